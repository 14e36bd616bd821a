"""A job with `requirements:` starts as fast as one without, once its environment exists.

A trivial script job (it imports its package and prints) is run through the real CLI with
`requirements:` naming a package outside the platform's lock, and the same job without it
(its script importing nothing), taking turns in every repeat on one home. The first run with
requirements resolves and installs (`first_s`, no target); every later one finds the cached
resolution and environment and installs nothing (checked: the find-links directory is emptied
after the first run, so a resolution or an install would fail). Target: the median wall time
of the paired differences (each run with requirements minus the baseline run just before it,
so both saw the same load) within 1 s (`difference_s`), and `ratio` of the medians. On a
loaded machine single runs vary by seconds either way, so the work the requirements add is
also timed alone, in process: the cached resolution and the environment found in place
(`added_s`, the median of 20).

The package is a real wheel built here into a find-links directory (PIP_NO_INDEX,
PIP_FIND_LINKS), as the tests do: no network.

Usage: python bench/requirements_start.py [--repeats 5]
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
sys.path.insert(0, str(REPO))

from tests.integration.test_job_requirements import build_wheel  # noqa: E402


def run_seconds(job: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "alchemist_jobs", "run", str(job), "--quiet"],
                       env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{job}: exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "requirements_start.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="alchemist-bench-deps-") as tmp:
        top = Path(tmp)
        links = top / "links"
        build_wheel(links, "tinydep_alc", "1.3.0")
        for name, script, reqs in (("with", "import tinydep_alc\nprint(tinydep_alc.VALUE)\n",
                                    "[tinydep_alc]"),
                                   ("without", "print('1.3.0')\n", "[]")):
            d = top / name
            d.mkdir()
            (d / "job.py").write_text(script)
            (d / "job.yaml").write_text(f"name: deps-{name}\ntask: {{script: job.py}}\n"
                                        f"max_restarts: 0\nrequirements: {reqs}\n")
        env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(top / "home"),
                   PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links))
        first = run_seconds(top / "with" / "job.yaml", env)
        added = []
        os.environ.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links))
        from alchemist_jobs import job_env
        from alchemist_jobs.spec import load_spec

        for _ in range(20):
            t0 = time.perf_counter()
            spec = load_spec(top / "with" / "job.yaml")
            job_env.ensure_site(job_env.resolve(spec.requirements, top / "home"), top / "home")
            added.append(time.perf_counter() - t0)
        for whl in links.iterdir():  # from now on, resolving or installing would fail
            whl.unlink()
        with_s, without_s = [], []
        for _ in range(args.repeats):
            without_s.append(run_seconds(top / "without" / "job.yaml", env))
            with_s.append(run_seconds(top / "with" / "job.yaml", env))
    result = {
        "repeats": args.repeats, "first_s": round(first, 3),
        "with_requirements_s": [round(x, 3) for x in with_s],
        "baseline_s": [round(x, 3) for x in without_s],
        "median_with_s": round(statistics.median(with_s), 3),
        "median_baseline_s": round(statistics.median(without_s), 3),
    }
    result["difference_s"] = round(statistics.median(
        w - b for w, b in zip(with_s, without_s)), 3)
    result["added_s"] = round(statistics.median(added), 4)
    result["ratio"] = round(result["median_with_s"] / result["median_baseline_s"], 3)
    result["target_met"] = result["difference_s"] <= 1.0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
