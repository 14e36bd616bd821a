"""A JAX job through Alchemist against the same script launched by hand: wall time and each
worker's peak memory (issue 41.5: torch was imported into every TensorFlow/JAX worker only to
swap the workers' addresses, +210 MB a worker).

The script initializes jax.distributed across 2 processes, runs one cross-process sum and
records its own peak RSS (getrusage ru_maxrss) and wall time from interpreter start. The hand
launch starts the 2 processes itself with the variables jax.distributed.initialize() needs
(JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID); the Alchemist run goes through
the real CLI (`alchemist run`, torchrun's agent, the bootstrap). The two take turns in every
repeat, so each pair saw the same load. Reported: medians of each, and `wall_ratio` and
`rss_ratio` (Alchemist / hand; the issue's targets 1.15 and 1.2) of the medians, and of each
pair (`pairs`).

Usage: python bench/framework_start.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SCRIPT = """
import json, os, resource, sys, time
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
hand = os.environ.get("BENCH_HAND")  # by hand: "coordinator process_id", as a user would pass
if hand:
    coordinator, pid = hand.split()
    jax.distributed.initialize(coordinator, num_processes=2, process_id=int(pid))
else:
    jax.distributed.initialize()
me = jax.process_index()
mesh = jax.make_mesh((jax.device_count(),), ("w",))
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("w")), np.array([me + 1.0], np.float32))
total = float(jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x))
assert total == 3.0, total
out = os.environ["BENCH_OUT"]
with open(os.path.join(out, f"worker-{me}.json"), "w") as f:
    json.dump({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}, f)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _workers(out: Path) -> list[float]:
    return [json.loads(p.read_text())["rss_mb"] for p in sorted(out.glob("worker-*.json"))]


def hand(work: Path) -> tuple[float, float]:
    out = Path(tempfile.mkdtemp(dir=work))
    coord = f"127.0.0.1:{_free_port()}"
    t = time.monotonic()
    procs = [subprocess.Popen([sys.executable, str(work / "sum.py")], cwd=work, env=dict(
        os.environ, BENCH_OUT=str(out), BENCH_HAND=f"{coord} {i}", JAX_PLATFORMS="cpu",
        OMP_NUM_THREADS="1")) for i in range(2)]
    codes = [p.wait() for p in procs]
    wall = time.monotonic() - t
    assert codes == [0, 0], codes
    return wall, max(_workers(out))


def alchemist(work: Path, home: Path) -> tuple[float, float]:
    out = Path(tempfile.mkdtemp(dir=work))
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "alchemist_jobs", "run", str(work / "job.yaml"),
                        "--quiet", "--set", f"env.BENCH_OUT={out}"], cwd=REPO,
                       capture_output=True, text=True,
                       env=dict(os.environ, ALCHEMIST_HOME=str(home), PYTHONPATH=str(REPO)))
    wall = time.monotonic() - t
    assert r.returncode == 0, r.stdout + r.stderr
    return wall, max(_workers(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work, home = Path(tmp), Path(tmp) / "home"
        (work / "sum.py").write_text(SCRIPT)
        (work / "job.yaml").write_text(
            "name: bench-jax\ntask: {script: sum.py, framework: jax}\nprocs_per_node: 2\n"
            "max_restarts: 0\nenv: {JAX_PLATFORMS: cpu}\n")
        pairs = []
        for _ in range(args.repeats):
            h, a = hand(work), alchemist(work, home)
            pairs.append({"hand_s": round(h[0], 2), "alchemist_s": round(a[0], 2),
                          "hand_rss_mb": round(h[1]), "alchemist_rss_mb": round(a[1])})
            print(json.dumps(pairs[-1]), flush=True)
    med = {k: statistics.median(p[k] for p in pairs) for k in pairs[0]}
    print(json.dumps({
        "repeats": args.repeats, **{f"median_{k}": v for k, v in med.items()},
        "wall_ratio": round(med["alchemist_s"] / med["hand_s"], 3),
        "rss_ratio": round(med["alchemist_rss_mb"] / med["hand_rss_mb"], 3),
        "pair_wall_ratios": [round(p["alchemist_s"] / p["hand_s"], 3) for p in pairs]}))


if __name__ == "__main__":
    main()
