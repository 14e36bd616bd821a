"""What exporting metrics costs a training step: the same built-in run with `metrics: true`
and `metrics: false`, alternating, several times; the ratio of their training steps/s.

    python bench/metrics_overhead.py [--spec examples/digits.yaml] [--repeats 6] [--steps 600]

With metrics on, a scraper polls every worker's /metrics as Prometheus would (every
--scrape-every seconds), so the cost of serving scrapes is counted too. Steps/s is each run's
own (rank 0's `steps_per_s` in result.json: optimizer steps over the training loop's wall
time), so start-up does not dilute the difference. A second figure, steadier on a busy
machine, times the loop's exact per-step metric updates in this process and divides by the
measured step time. Target: overhead under 1%.
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
                try:
                    port = json.loads(rec.read_text()).get("metrics_port")
                    if port:
                        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
                except (OSError, ValueError):
                    pass


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "digits.yaml")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--scrape-every", type=float, default=5.0)
    args = ap.parse_args()

    rates: dict[bool, list[float]] = {True: [], False: []}
    step_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="alchemist-bench-") as tmp:
        for i in range(args.repeats):
            # Alternate the order too, so a slow phase of a busy machine hits both sides alike.
            for metrics in ((True, False) if i % 2 == 0 else (False, True)):
                res = run_once(args.spec, Path(tmp), metrics, args.steps, args.scrape_every)
                rates[metrics].append(res["steps_per_s"])
                step_s.append(res["train_s"] / res["steps"])
                print(f"repeat {i + 1}/{args.repeats}  metrics={'on ' if metrics else 'off'}  "
                      f"{res['steps_per_s']:8.1f} steps/s", flush=True)
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    # Each pair ran back to back, under the same load: their ratios are the fairer comparison.
    pairs = [a / b for a, b in zip(rates[True], rates[False])]
    paired = statistics.median(pairs)
    update = per_step_update_seconds()
    step = statistics.median(step_s)
    print(f"\nspec {args.spec.relative_to(ROOT) if args.spec.is_relative_to(ROOT) else args.spec}, "
          f"{args.steps} steps, {args.repeats} repeats each, scrape every {args.scrape_every:g} s")
    print(f"median steps/s   metrics on {on:.1f}   off {off:.1f}")
    print(f"steps/s ratio on/off, median of back-to-back pairs: {paired:.4f} "
          f"(overhead {100 * (1 - paired):+.2f}%); pairs {', '.join(f'{p:.3f}' for p in pairs)}")
    print(f"per-step metric updates {update * 1e6:.1f} us against a median step of {step * 1e3:.2f} ms: "
          f"{100 * update / step:.2f}% of a step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
