"""Listing at scale: with N runs (10,000 by default) in the home, how long `alchemist list --json`,
`alchemist status RUN`, a real dashboard's first and later `GET /api/v1/runs` and the runs page
take, each beyond the same command on a home with one run (the interpreter's start and the
CLI's imports, measured in the same run as the baseline).

The runs are copies of one real finished run (bench/ui_dashboard.py's `fill`: its spec,
run.json, progress.json, result.json and worker records; ids and times changed), so every file
the listing reads is the real thing.

Targets (issue: a run's story at any scale): list --json and /api/v1/runs under 0.5 s beyond
the baseline, status under 0.1 s beyond it, the page rendered under 1 s.

Usage: python bench/run_listing.py [--runs 10000] [--repeats 5] [--no-page]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ui_dashboard import fill, page_render, real_run, start_ui  # noqa: E402


def cli_seconds(home: Path, *args: str, repeats: int) -> float:
    """Median wall time of `alchemist ARGS` as a process (what a user waits for)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "alchemist_jobs", *args], cwd=REPO, env=env,
                           capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            sys.exit(f"alchemist {' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return statistics.median(times)


def api_seconds(url: str, repeats: int, auth: dict[str, str]) -> tuple[float, float]:
    """(the first GET /api/v1/runs, the median of `repeats` more)."""
    import httpx

    with httpx.Client(base_url=url, timeout=600, headers=auth) as c:
        t0 = time.perf_counter()
        c.get("api/v1/runs", params={"limit": 10000}).raise_for_status()
        first = time.perf_counter() - t0
        later = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            c.get("api/v1/runs", params={"limit": 10000}).raise_for_status()
            later.append(time.perf_counter() - t0)
    return first, statistics.median(later)


def measure(home: Path, run_id: str, repeats: int, page: bool, n: int) -> dict:
    out = dict(
        list_json_s=cli_seconds(home, "list", "--json", repeats=repeats),
        list_limit3_s=cli_seconds(home, "list", "--limit", "3", repeats=repeats),
        status_s=cli_seconds(home, "status", run_id, "--json", repeats=repeats),
    )
    proc, url, signed_in, auth = start_ui(home)
    try:
        out["api_first_s"], out["api_s"] = api_seconds(url, repeats, auth)
        if page:
            out["page_render_s"] = statistics.median(page_render(signed_in, repeats, min(n, 1000)))
    finally:
        proc.terminate()
        proc.wait()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-page", action="store_true", help="skip the browser measurement")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="alchemist-list-bench-") as tmp:
        one, many = Path(tmp) / "one", Path(tmp) / "many"
        seed = real_run(one)
        shutil.copytree(seed, many / "runs" / seed.name, symlinks=True)
        fill(many, many / "runs" / seed.name, args.runs)
        run_id = f"digits-bench-{args.runs // 2:05d}"
        base = measure(one, seed.name, args.repeats, page=False, n=1)
        big = measure(many, run_id, args.repeats, page=not args.no_page, n=args.runs)
    beyond = {k: round(big[k] - base[k], 3) for k in base}
    result = dict(runs=args.runs, one_run_baseline_s={k: round(v, 3) for k, v in base.items()},
                  with_runs_s={k: round(v, 3) for k, v in big.items()},
                  beyond_baseline_s=beyond,
                  targets=dict(list_json_s=0.5, api_first_s=0.5, api_s=0.5, status_s=0.1,
                               page_render_s=1.0))
    result["ok"] = all(beyond[k] < result["targets"][k] for k in beyond if k in result["targets"]) \
        and big.get("page_render_s", 0) < 1.0
    print(json.dumps(result, indent=1))
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "run_listing.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
