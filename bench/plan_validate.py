"""Validate `alchemist plan` on measured runs: predict, then run, on 2-4 emulated hosts.

    /work/main/.venv/bin/python bench/plan_validate.py [--hosts 2,3,4] [--rates 50,100,400]
        [--algorithms sync,bmuf] [--steps 40]

For every (hosts, link rate, algorithm) point the plan is made FIRST (the same code as
`alchemist plan --link <rate>mbit --workers-per-node 1`, profiling the job on this machine),
then the same job runs on that many network namespaces (alchemist_jobs.netns) whose links are
limited to the rate by a token bucket, one worker per host. The measured step time is the
steady state of rank 0: the wall time between its TensorBoard `train/loss` points after the
first WARMUP steps (connection set-up, DDP's bucket rebuild) divided by the steps between. The
emulated hosts share this machine's processors, so the plan is told so (compute scaled by
hosts / cores, at least 1): the link is real, the compute is shared.

Writes bench/results/plan/validation.{md,json}; exits 1 if any point is off by more than 15%.
Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from alchemist_jobs.planner import model  # noqa: E402
from alchemist_jobs.planner.facts import cluster_facts  # noqa: E402
from alchemist_jobs.planner.profile import profile_spec  # noqa: E402
from alchemist_jobs.spec import parse_spec  # noqa: E402

RESULTS = REPO / "bench" / "results" / "plan"
TOLERANCE = 0.15
WARMUP = 3  # steps not timed: the plan predicts the steady state


def job(hosts: int, algo: str, steps: int, params: int) -> dict:
    """An MLP of `params` parameters on synthetic data; no epoch end (no evaluation) and no
    checkpoint inside the timed steps."""
    algorithm = {"name": algo} if algo == "sync" else {"name": algo, "tau": 4}
    return dict(name=f"plan-{algo}-{hosts}", nodes=hosts, procs_per_node=1,
                task={"builtin": "synthetic",
                      "synthetic": {"params": params, "samples": 65536, "features": 32}},
                algorithm=algorithm,
                hyper=dict(batch_size=64, lr=0.01, momentum=0.9, steps=steps, seed=0),
                checkpoint={"every_steps": 1_000_000}, max_restarts=0, metrics=False)


def predict(spec, prof, hosts: int, rate: int) -> model.Point:
    scale = max(1.0, hosts / (os.cpu_count() or 1))
    cluster = cluster_facts(workers_per_node=1, link=f"{rate}mbit", latency_us=50.0, stack=None,
                            runs_root=None, job_name=spec.name, compute_scale=scale)
    algo = model.Algorithm(spec.algorithm.name, getattr(spec.algorithm, "tau", 1))
    return model.predict(prof, [algo], [hosts], cluster)[0]


def measure(spec, home: Path, hosts: int, rate: int) -> float:
    from tests.netns import Hosts, NetnsScheduler
    
    with Hosts(hosts, rate_mbit=rate) as net:
        sched = NetnsScheduler(home, net)
        handle = sched.schedule(sched.dryrun(spec, REPO))
        status = sched.wait(handle)
        if status.state != "succeeded":
            raise RuntimeError(f"{handle.run.run_id} {status.state}; logs in {handle.run.logs}")
        return steady_step_s(handle.run.tensorboard)


def steady_step_s(logdir: Path) -> float:
    """Seconds per step between rank 0's first logged step at or after WARMUP and its last."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    events = [e for e in acc.Scalars("train/loss") if e.step >= WARMUP]
    if len(events) < 2 or events[-1].step == events[0].step:
        raise RuntimeError(f"{logdir}: too few logged steps after warm-up to time the steady state")
    return (events[-1].wall_time - events[0].wall_time) / (events[-1].step - events[0].step)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="2,3,4")
    ap.add_argument("--rates", default="50,100,400", help="Mbit/s")
    ap.add_argument("--algorithms", default="sync,bmuf")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--params", type=int, default=1_000_000)
    args = ap.parse_args()
    home = Path(os.environ.get("ALCHEMIST_BENCH_HOME", f"/tmp/alchemist-bench-{os.getuid()}")) / "plan"
    home.mkdir(parents=True, exist_ok=True)
    rows = []
    for algo in args.algorithms.split(","):
        for hosts in map(int, args.hosts.split(",")):
            spec = parse_spec(job(hosts, algo, args.steps, args.params), "<plan>", REPO)
            prof = profile_spec(spec, home, steps=100)
            for rate in map(int, args.rates.split(",")):
                point = predict(spec, prof, hosts, rate)  # before the run
                t0 = time.time()
                measured = measure(spec, home, hosts, rate)
                err = measured / point.step_s - 1
                rows.append(dict(algorithm=algo, hosts=hosts, mbit=rate,
                                 predicted_ms=point.step_s * 1e3, measured_ms=measured * 1e3,
                                 error=err, wall_s=time.time() - t0))
                print(f"{algo:5} hosts={hosts} {rate:4} Mbit/s  predicted {point.step_s * 1e3:8.1f} ms"
                      f"  measured {measured * 1e3:8.1f} ms  error {err:+.1%}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "validation.json").write_text(json.dumps(rows, indent=2))
    lines = ["| algorithm | hosts | link Mbit/s | predicted ms/step | measured ms/step | error |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['algorithm']} | {r['hosts']} | {r['mbit']} | {r['predicted_ms']:.1f} | "
              f"{r['measured_ms']:.1f} | {r['error']:+.1%} |" for r in rows]
    (RESULTS / "validation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    bad = [r for r in rows if abs(r["error"]) > TOLERANCE]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
