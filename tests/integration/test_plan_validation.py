"""`alchemist plan` against measured runs: the plan is made before the run, then the job runs on
two emulated hosts over a 50 Mbit/s link, and the measured step time must be within 15%.

A subset of bench/plan_validate.py (which runs 2-4 hosts at 50, 100 and 400 Mbit/s for sync
and bmuf and writes the table in docs/plan.md), through the same functions.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.netns import unavailable
from alchemist_jobs.planner.profile import profile_spec
from alchemist_jobs.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.netns, pytest.mark.skipif(unavailable() is not None,
                                                    reason=str(unavailable()))]


def _bench():
    spec = importlib.util.spec_from_file_location("plan_validate", REPO / "bench" / "plan_validate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("algo", ["sync", "bmuf"])
def test_predicted_step_time_within_15_percent_on_two_hosts(algo, tmp_path):
    bench = _bench()
    spec = parse_spec(bench.job(2, algo, steps=16, params=1_000_000), "<plan>", REPO)
    prof = profile_spec(spec, tmp_path, steps=50)
    predicted = bench.predict(spec, prof, hosts=2, rate=50).step_s  # before the run
    measured = bench.measure(spec, tmp_path, hosts=2, rate=50)
    assert measured == pytest.approx(predicted, rel=bench.TOLERANCE), (
        f"{algo}: predicted {predicted * 1e3:.1f} ms/step, measured {measured * 1e3:.1f}")
