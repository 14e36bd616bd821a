"""Listing at scale: with N runs (10,000 by default) in the home, how long `alchemist list --json`,
`alchemist status RUN`, a real dashboard's first and later `GET /api/v1/runs` and the runs page
take, each beyond the same command on a home with one run (the interpreter's start and the
CLI's imports; the two homes take turns in every repeat).

The runs are copies of one real finished run (bench/ui_dashboard.py's `fill`: its spec,
run.json, progress.json, result.json and worker records; ids and times changed), so every file
the listing reads is the real thing.

Targets: list --json and /api/v1/runs under 0.5 s beyond
the baseline, status under 0.1 s beyond it, the page rendered under 1 s. The dashboard reads
the ended runs before it prints its URL: `ui_start_s` (no target) is that wait;
`list_json_first_s` (no target) is the one listing that reads every run and writes the index.

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


def cli_seconds(home: Path, *args: str) -> float:
    """Wall time of `alchemist ARGS` as a process (what a user waits for)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "alchemist_jobs", *args], cwd=REPO, env=env,
                       capture_output=True, text=True)
    took = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"alchemist {' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return took


def ui_seconds(home: Path, repeats: int) -> dict[str, float]:
    """A fresh `alchemist ui`: from its start to its URL printed (it reads the ended runs
    first), its first GET /api/v1/runs, and the median of `repeats` more."""
    import httpx

    t0 = time.perf_counter()
    proc, url, _signed_in, auth = start_ui(home)
    out = dict(ui_start_s=time.perf_counter() - t0)
    try:
        with httpx.Client(base_url=url, timeout=600, headers=auth) as c:
            t0 = time.perf_counter()
            c.get("api/v1/runs", params={"limit": 10000}).raise_for_status()
            out["api_first_s"] = time.perf_counter() - t0
            later = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                c.get("api/v1/runs", params={"limit": 10000}).raise_for_status()
                later.append(time.perf_counter() - t0)
            out["api_s"] = statistics.median(later)
    finally:
        proc.terminate()
        proc.wait()
    return out


def measure(homes: dict[str, tuple[Path, str]], repeats: int) -> dict[str, dict[str, float]]:
    """Each figure's median for each home, the homes taking turns in every repeat so that
    both see the same load on a shared machine."""
    samples: dict[str, dict[str, list[float]]] = {h: {} for h in homes}
    for _ in range(repeats):
        for h, (home, run_id) in homes.items():
            got = dict(list_json_s=cli_seconds(home, "list", "--json"),
                       list_limit3_s=cli_seconds(home, "list", "--limit", "3"),
                       status_s=cli_seconds(home, "status", run_id, "--json"),
                       **ui_seconds(home, repeats))
            for k, v in got.items():
                samples[h].setdefault(k, []).append(v)
    return {h: {k: statistics.median(v) for k, v in figs.items()} for h, figs in samples.items()}


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
        # The first listing reads every run and writes the index of ended runs; once only.
        first = {h: cli_seconds(home, "list", "--json") for h, home in (("one", one), ("many", many))}
        medians = measure({"one": (one, seed.name), "many": (many, run_id)}, args.repeats)
        base, big = medians["one"], medians["many"]
        base["list_json_first_s"], big["list_json_first_s"] = first["one"], first["many"]
        if not args.no_page:
            proc, _url, signed_in, _auth = start_ui(many)
            try:
                big["page_render_s"] = statistics.median(
                    page_render(signed_in, args.repeats, min(args.runs, 1000)))
            finally:
                proc.terminate()
                proc.wait()
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
