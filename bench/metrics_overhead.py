"""What exporting metrics costs a training step: the same built-in run with `metrics: true`
and `metrics: false`, alternating; target under 1%. Three figures, from steadiest to noisiest:

1. per-step CPU: the built-in loop of the spec's task, one worker in this process (no
   launcher, no gloo), `--pairs` back-to-back on/off pairs; CPU time per optimizer step
   (process time, so other processes' load on a shared machine hardly moves it).
2. per-step metric updates: the loop's exact metric calls timed alone, against a step; and
   the CPU a worker spends answering one scrape.
3. end to end: the spec as is (digits: 2 workers under torchrun), `--repeats` on/off pairs,
   each run's own training steps/s (rank 0's `steps_per_s`), workers scraped every
   --scrape-every seconds as Prometheus would. On a busy machine pairs swing by tens of
   percent; `--repeats 0` skips it.

    python bench/metrics_overhead.py [--spec examples/digits.yaml] [--pairs 16] [--repeats 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from alchemist_jobs.ui.series import metrics_url  # noqa: E402


def run_once(spec: Path, home: Path, metrics: bool, steps: int, scrape_every: float) -> dict:
    argv = [sys.executable, "-m", "alchemist_jobs", "run", str(spec), "--quiet", "--home", str(home),
            "--set", f"metrics={'true' if metrics else 'false'}", "--set", f"hyper.steps={steps}"]
    before = set((home / "runs").glob("*")) if (home / "runs").exists() else set()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "ALCHEMIST_HOME": str(home)})
    stop = threading.Event()
    scraper = threading.Thread(target=_scrape, args=(home, before, stop, scrape_every), daemon=True)
    if metrics:
        scraper.start()
    out, _ = proc.communicate()
    stop.set()
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n{out}")
    run = next(p for p in (home / "runs").glob("*") if p not in before)
    return json.loads((run / "result.json").read_text())


def _scrape(home: Path, before: set, stop: threading.Event, every: float) -> None:
    """Poll every worker endpoint the run records, like a Prometheus scrape."""
    while not stop.wait(every):
        for run in set((home / "runs").glob("*")) - before:
            for rec in (run / "workers").glob("rank-*.json"):
                try:  # through the run's metrics bridge, as the monitor's Prometheus does
                    url = metrics_url(run, rec.stem)
                    if url:
                        urllib.request.urlopen(url, timeout=2).read()
                except (OSError, ValueError):
                    pass


def cpu_per_step(spec_path: Path, home: Path, metrics: bool, steps: int) -> float:
    """CPU seconds per optimizer step of the built-in loop, one worker, in this process."""
    from alchemist_jobs.rundir import RunDir, new_run_id
    from alchemist_jobs.runtime import trainer
    from alchemist_jobs.spec import load_spec

    spec = load_spec(spec_path, [f"metrics={'true' if metrics else 'false'}", f"hyper.steps={steps}",
                                 "nodes=1", "procs_per_node=1"])
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", ALCHEMIST_STACK="local")
    run = RunDir(home / "runs" / new_run_id(spec.name))
    run.create()
    run.spec.write_text(spec.to_yaml())
    t0 = time.process_time()
    res = trainer.train(spec, run, home)
    return (time.process_time() - t0) / res["steps"]


def per_step_update_seconds(n: int = 20000) -> float:
    """The loop's per-step metric calls (runtime/trainer.py), timed in this process."""
    from alchemist_jobs.runtime.metrics import WorkerMetrics

    m = WorkerMetrics(dict(job="bench", run="bench-1", rank="0", node="n", algorithm="sync"))
    names = ("alchemist_steps_total", "alchemist_samples_total", "alchemist_loss",
             "alchemist_learning_rate", "alchemist_epoch", "alchemist_step_seconds",
             "alchemist_data_seconds_total", "alchemist_communication_seconds_total",
             "alchemist_compute_seconds_total", "alchemist_last_step_timestamp_seconds",
             "alchemist_communication_sent_bytes_total",
             "alchemist_communication_received_bytes_total", "alchemist_sync_rounds_total")
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(n):
            m[names[0]].inc()
            m[names[1]].inc(32)
            m[names[2]].set(0.5)
            m[names[3]].set(0.05)
            m[names[4]].set(i / 1000)
            m[names[5]].observe(0.004)
            m[names[6]].inc(0.0001)
            m[names[7]].inc(0.002)
            m[names[8]].inc(0.002)
            m[names[9]].set(time.time())
            m[names[10]].inc(1000.0)
            m[names[11]].inc(1000.0)
            m[names[12]].inc(1)
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def scrape_seconds(n: int = 200) -> float:
    """CPU time a worker spends answering one scrape (collect and format every series)."""
    from prometheus_client import generate_latest

    from alchemist_jobs.runtime.metrics import WorkerMetrics

    m = WorkerMetrics(dict(job="bench", run="bench-1", rank="0", node="n", algorithm="sync"))
    m.add_system_collector()
    t0 = time.process_time()
    for _ in range(n):
        generate_latest(m.registry)
    return (time.process_time() - t0) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "digits.yaml")
    ap.add_argument("--pairs", type=int, default=16, help="in-process on/off pairs")
    ap.add_argument("--repeats", type=int, default=4, help="end-to-end on/off pairs (0: skip)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--scrape-every", type=float, default=5.0)
    args = ap.parse_args()

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as the local stack sets for each worker
    import torch

    torch.set_num_threads(1)
    cpu: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="alchemist-bench-") as tmp:
        cpu_per_step(args.spec, Path(tmp), True, 50)  # warm-up: imports, data, first allocations
        for i in range(args.pairs):
            for metrics in ((True, False) if i % 2 == 0 else (False, True)):
                cpu[metrics].append(cpu_per_step(args.spec, Path(tmp), metrics, args.steps))
            print(f"pair {i + 1}/{args.pairs}  CPU per step  on {cpu[True][-1] * 1e3:.3f} ms  "
                  f"off {cpu[False][-1] * 1e3:.3f} ms", flush=True)
    cpu_pairs = [a / b for a, b in zip(cpu[True], cpu[False])]
    cpu_ratio = statistics.median(cpu_pairs)
    update = per_step_update_seconds()
    scrape = scrape_seconds()
    step_cpu = statistics.median(cpu[False])

    rates: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="alchemist-bench-") as tmp:
        for i in range(args.repeats):
            # Alternate the order too, so a slow phase of a busy machine hits both sides alike.
            for metrics in ((True, False) if i % 2 == 0 else (False, True)):
                res = run_once(args.spec, Path(tmp), metrics, args.steps, args.scrape_every)
                rates[metrics].append(res["steps_per_s"])
                print(f"repeat {i + 1}/{args.repeats}  metrics={'on ' if metrics else 'off'}  "
                      f"{res['steps_per_s']:8.1f} steps/s", flush=True)

    spec_name = args.spec.relative_to(ROOT) if args.spec.is_relative_to(ROOT) else args.spec
    print(f"\n{spec_name}, {args.steps} steps per run")
    print(f"1. CPU per step, one worker in process, median of {args.pairs} pairs: on/off "
          f"{cpu_ratio:.4f} (overhead {100 * (cpu_ratio - 1):+.2f}%); pairs "
          f"{', '.join(f'{p:.3f}' for p in cpu_pairs)}")
    print(f"2. per-step metric updates {update * 1e6:.1f} us = {100 * update / step_cpu:.2f}% of a "
          f"{step_cpu * 1e3:.2f} ms step (CPU); answering a scrape {scrape * 1e3:.2f} ms CPU, "
          f"every {args.scrape_every:g} s = {100 * scrape / args.scrape_every:.3f}% of a core")
    if rates[True]:
        # Each pair ran back to back, under the same load: their ratios are the fairer comparison.
        pairs = [a / b for a, b in zip(rates[True], rates[False])]
        paired = statistics.median(pairs)
        print(f"3. end to end, {args.repeats} pairs, scraped every {args.scrape_every:g} s: steps/s "
              f"on/off {paired:.4f} (overhead {100 * (1 - paired):+.2f}%); pairs "
              f"{', '.join(f'{p:.3f}' for p in pairs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
