"""Foundation benchmarks, each a ratio against a baseline measured in the same run.

(a) launch overhead: wall time of `alchemist run` on a spec wrapping examples/plain_ddp.py
    against `torchrun --standalone` on the same script (target: at most 1.05x).
(b) loop speed: steps/s of the built-in sync loop (task digits) against the hand-written
    DDP loop of examples/plain_ddp.py, same model (MLP 64-64-10), data, batch and workers
    (target: at least 0.97x).

Runs alternate between the two sides so drift on a shared machine hits both alike; the
figures are medians.  Usage: python bench/launch_and_loop.py [--repeats 5] [--epochs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "examples" / "plain_ddp.py"


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout[-3000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=10)
    args = ap.parse_args()
    py = sys.executable
    work = Path(tempfile.mkdtemp(prefix="alchemist-bench-"))
    env = dict(os.environ, ALCHEMIST_HOME=str(work / "home"), PYTHONPATH=str(REPO))
    spec = work / "plain.yaml"
    spec.write_text(f"name: bench-plain\ntask:\n  script: {SCRIPT}\n"
                    f"  args: [--epochs, '{args.epochs}']\nprocs_per_node: 2\nmax_restarts: 0\n")

    # (a) launch overhead on the same plain script.
    torchrun = [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                str(SCRIPT), "--epochs", str(args.epochs)]
    alchemist = [py, "-m", "alchemist_jobs", "run", str(spec), "--quiet"]
    timed(torchrun, env, work)  # warm the page cache for both sides
    base_a, ours_a = [], []
    for _ in range(args.repeats):
        base_a.append(timed(torchrun, env, work))
        ours_a.append(timed(alchemist, env, work))

    # (b) steps/s: hand-written DDP loop vs the built-in sync loop, same model and data.
    base_b, ours_b = [], []
    for i in range(args.repeats):
        out = work / f"plain-{i}.json"
        timed(torchrun + ["--result", str(out)], env, work)
        base_b.append(json.loads(out.read_text())["steps_per_s"])
        home = work / f"home-b{i}"
        timed([py, "-m", "alchemist_jobs", "run", str(REPO / "examples" / "digits.yaml"),
               "--quiet", "--set", f"hyper.epochs={args.epochs}", "--set", "checkpoint.every_steps=1000000",
               "--home", str(home)], env, work)
        res = json.loads(next((home / "runs").glob("*/result.json")).read_text())
        ours_b.append(res["steps_per_s"])

    ma, mb = statistics.median(ours_a) / statistics.median(base_a), \
        statistics.median(ours_b) / statistics.median(base_b)
    print("| benchmark | baseline | alchemist | ratio | target |")
    print("|---|---|---|---|---|")
    print(f"| (a) wall time, 2-worker plain DDP script, {args.epochs} epochs | torchrun --standalone "
          f"{statistics.median(base_a):.2f} s | alchemist run {statistics.median(ours_a):.2f} s "
          f"| {ma:.3f}x | <= 1.05x |")
    print(f"| (b) steps/s, digits MLP, 2 workers, batch 32 | hand-written DDP "
          f"{statistics.median(base_b):.0f} | built-in sync loop {statistics.median(ours_b):.0f} "
          f"| {mb:.3f}x | >= 0.97x |")
    print(f"\nraw (a) torchrun {['%.2f' % x for x in base_a]} alchemist {['%.2f' % x for x in ours_a]}")
    print(f"raw (b) hand-written {['%.0f' % x for x in base_b]} built-in {['%.0f' % x for x in ours_b]}")


if __name__ == "__main__":
    main()
