"""Dashboard benchmark: with 1,000 runs in the home directory, the median latency of
`GET /api/v1/runs` from a real `alchemist ui` (target: under 100 ms) and the time the runs
page takes to render them in headless Chromium (target: under 1 s).

The 1,000 runs are copies of one real finished run (its spec, run.json, progress.json,
result.json and worker records; ids and times changed), so every file the listing reads is
the real thing. Baseline, measured in the same run: `LocalScheduler.list()` in process (what
`alchemist list` does, reading every run's files each time). The dashboard reads an ended
run's files once and keeps its summary (it never changes), so after the first request
(`api_runs_first_ms`, reported too) the API answers from memory: the ratio is below 1.

Usage: python bench/ui_dashboard.py [--runs 1000] [--requests 30] [--loads 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def real_run(home: Path) -> Path:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "alchemist_jobs", "run", "examples/digits.yaml",
                        "--set", "hyper.epochs=1", "--quiet", "--home", str(home)], cwd=REPO,
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"the seed run failed:\n{r.stderr[-3000:]}")
    return next((home / "runs").iterdir())


def fill(home: Path, seed: Path, n: int) -> None:
    """n runs cloned from `seed` (not its checkpoints or event files: the listing reads
    neither)."""
    base = json.loads((seed / "run.json").read_text())
    t0 = time.time() - n * 60
    for i in range(n):
        run_id = f"digits-bench-{i:05d}"
        d = home / "runs" / run_id
        (d / "workers").mkdir(parents=True)
        for name in ("spec.yaml", "progress.json", "result.json"):
            shutil.copy(seed / name, d / name)
        for w in (seed / "workers").glob("*.json"):
            shutil.copy(w, d / "workers" / w.name)
        state = ["succeeded", "failed", "cancelled"][i % 3]
        (d / "run.json").write_text(json.dumps(dict(base, run_id=run_id, state=state,
                                                    created=t0 + i * 60, ended=t0 + i * 60 + 30)))
    shutil.rmtree(seed)


def start_ui(home: Path) -> tuple[subprocess.Popen, str, str, dict[str, str]]:
    """(the server, its base URL, its one-time URL with the token, the API's auth header)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "alchemist_jobs", "ui", "--home", str(home),
                             "--port", "0"], cwd=REPO, env=env, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:
        if line.startswith("dashboard: http"):
            token = re.search(r"#token=([A-Za-z0-9_-]+)", line).group(1)
            return proc, re.search(r"(http://\S+?/)", line).group(1), \
                re.search(r"(http://\S+)", line).group(1), {"Authorization": f"Bearer {token}"}
    sys.exit("alchemist ui did not start")


def api_latency(url: str, requests: int, auth: dict[str, str]) -> tuple[float, list[float]]:
    """(the first request, which reads every run's files, and then `requests` more, which
    find the ended runs' summaries kept)."""
    import httpx

    out = []
    with httpx.Client(base_url=url, timeout=60, headers=auth) as c:
        t0 = time.perf_counter()
        assert c.get("api/v1/runs").json()["total"] >= 1000
        first = time.perf_counter() - t0
        for _ in range(requests):
            t0 = time.perf_counter()
            r = c.get("api/v1/runs", params={"limit": 1000})
            r.raise_for_status()
            out.append(time.perf_counter() - t0)
    return first, out


def baseline(home: Path, requests: int) -> list[float]:
    from alchemist_jobs.local_backend import LocalScheduler

    s = LocalScheduler(home)
    s.list()
    out = []
    for _ in range(requests):
        t0 = time.perf_counter()
        s.list()
        out.append(time.perf_counter() - t0)
    return out


def page_render(url: str, loads: int, n: int) -> list[float]:
    """Navigation start to the runs table filled (the page marks `runs-rendered`)."""
    from tests.ui.test_ui_browser import browser  # the tests' own Chromium set-up

    driver = browser()
    out = []
    try:
        for _ in range(loads + 1):  # the first load warms the browser's cache
            driver.get("about:blank")
            driver.get(url)
            deadline = time.time() + 120
            while time.time() < deadline:
                t = driver.execute_script(
                    "const m = performance.getEntriesByName('runs-rendered');"
                    "return m.length ? [m[0].startTime, "
                    "document.querySelectorAll('#runs-table tbody tr').length] : null;")
                if t:
                    break
                time.sleep(0.05)
            else:
                sys.exit("the runs page never rendered")
            assert t[1] == n, t
            out.append(t[0] / 1000)
    finally:
        driver.quit()
    return out[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--loads", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="alchemist-ui-bench-") as tmp:
        home = Path(tmp)
        fill(home, real_run(home), args.runs)
        proc, url, login_url, auth = start_ui(home)
        try:
            first, times = api_latency(url, args.requests, auth)
            api = statistics.median(times)
            base = statistics.median(baseline(home, args.requests))
            page = statistics.median(page_render(login_url, args.loads, min(args.runs, 1000)))
        finally:
            proc.terminate()
            proc.wait()
    result = dict(runs=args.runs, api_runs_median_ms=round(api * 1000, 1),
                  api_runs_first_ms=round(first * 1000, 1),
                  scheduler_list_median_ms=round(base * 1000, 1),
                  api_over_list=float(f"{api / base:.3g}"), page_render_median_s=round(page, 3),
                  targets=dict(api_runs_ms=100, page_render_s=1.0),
                  ok=api < 0.1 and page < 1.0)
    print(json.dumps(result, indent=1))
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "ui_dashboard.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
