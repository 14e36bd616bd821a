"""Dataset staging against a plain boto3 download loop, from the same moto S3 server; targets: >= 1.0x, cached < 1%.

moto's S3 server runs as a process of its own on 127.0.0.1 (a real HTTP endpoint). A dataset
of --files files totalling --total-mib MiB is pushed once with `alchemist data push`'s code.
Then, --repeats times, alternating which goes first:

  baseline  a plain boto3 loop: list the prefix, then get_object + write, one file after another
  stage     `stage()` into an empty node cache: list, parallel transfer-manager downloads,
            SHA-256 check of every file against the push manifest, one rename
  cached    `stage()` again into that same cache: what a second job on the node pays

It prints the medians, staging throughput as a ratio of the baseline's, and the cached stage
as a fraction of the cold one.

    python bench/data_staging.py [--files 1000] [--total-mib 1024] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # werkzeug announces the socket once it is listening
        if "Running on" in line:
            break
    else:
        raise SystemExit(f"moto server did not start (exit {proc.wait()})")
    # it logs every request: keep reading, or the full pipe stops the server mid-benchmark
    threading.Thread(target=lambda: all(proc.stderr), daemon=True).start()
    return proc


def make_files(root: Path, files: int, total: int) -> None:
    size, extra = divmod(total, files)
    for i in range(files):
        sub = root / f"part-{i // 100:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"{i:05d}.bin").write_bytes(os.urandom(size + (1 if i < extra else 0)))


def baseline(client, bucket: str, prefix: str, dest: Path) -> float:
    t = time.perf_counter()
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])]
    for key in keys:
        target = dest / key[len(prefix):]
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            f.write(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    return time.perf_counter() - t


def timed_stage(spec, home: Path) -> tuple[float, bool]:
    from alchemist_jobs.data.stage import stage

    t = time.perf_counter()
    entry = stage(spec, home)
    elapsed = time.perf_counter() - t
    entry.release()
    return elapsed, entry.filled


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--total-mib", type=float, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    total = int(args.total_mib * 2**20)
    port = free_port()
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    os.environ.pop("ALCHEMIST_DATA_CACHE", None)
    os.environ.pop("ALCHEMIST_DATA_CACHE_LIMIT", None)
    moto = start_moto(port)
    work = Path(tempfile.mkdtemp(prefix="alchemist-bench-data-"))
    try:
        from alchemist_jobs.data import push, s3
        from alchemist_jobs.data.source import dataset_uri
        from alchemist_jobs.spec import parse_spec

        client = s3.client()
        client.create_bucket(Bucket="bench")
        make_files(work / "src", args.files, total)
        uri = dataset_uri("bench", "bench")
        t = time.perf_counter()
        push.push(client, work / "src", uri)
        print(f"dataset: {args.files} files, {total / 2**20:.0f} MiB; pushed in {time.perf_counter() - t:.1f} s")
        spec = parse_spec({"name": "bench", "task": {"builtin": "digits"}, "data": {"source": str(uri)}}, "bench")
        base, cold, warm = [], [], []
        for i in range(args.repeats):
            for what in (("baseline", "stage") if i % 2 == 0 else ("stage", "baseline")):
                shutil.rmtree(work / "out", ignore_errors=True)
                shutil.rmtree(work / "home", ignore_errors=True)
                if what == "baseline":
                    base.append(baseline(client, "bench", uri.prefix, work / "out"))
                else:
                    elapsed, filled = timed_stage(spec, work / "home")
                    assert filled
                    cold.append(elapsed)
                    elapsed, filled = timed_stage(spec, work / "home")
                    assert not filled
                    warm.append(elapsed)
            print(f"  repeat {i + 1}: baseline {base[-1]:.2f} s  stage {cold[-1]:.2f} s  cached {warm[-1] * 1000:.1f} ms")
        b, c, w = statistics.median(base), statistics.median(cold), statistics.median(warm)
        mib = total / 2**20
        print(f"baseline loop   {b:7.2f} s  {mib / b:7.1f} MiB/s")
        print(f"stage (cold)    {c:7.2f} s  {mib / c:7.1f} MiB/s   throughput {b / c:.2f}x the loop (target >= 1.0x)")
        print(f"stage (cached)  {w * 1000:7.1f} ms              {100 * w / c:.3f}% of the cold stage (target < 1%)")
        return 0 if b / c >= 1.0 and w / c < 0.01 else 1
    finally:
        moto.terminate()
        moto.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
