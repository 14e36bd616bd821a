"""`alchemist plan` against measured runs: the plan is made before the run, then the job runs on
two emulated hosts over a 50 Mbit/s link, and the measured step time must be within 15%.

A subset of bench/plan_validate.py (which runs 2-4 hosts at 50, 100 and 400 Mbit/s for sync
and bmuf; its table is in docs/plan.md), through the same functions: the link is measured by
a separate short probe on two fresh hosts (the plan's `--link-probe`), compute by profiling
two processes at once (`--emulated`: the hosts share this machine's processors). At 50 Mbit/s
the link carries most of the step (sync ~95%, bmuf with tau 4 ~80%), so a busy machine's
noise in compute moves the step little.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from alchemist_jobs.planner.profile import profile_spec
from alchemist_jobs.spec import parse_spec
from tests import netns

REPO = Path(__file__).resolve().parents[2]
RATE = 50  # Mbit/s
pytestmark = [pytest.mark.netns, pytest.mark.quiet,
              pytest.mark.skipif(netns.unavailable() is not None,
                                 reason=f"network namespaces unavailable: {netns.unavailable()}")]


def _bench():
    spec = importlib.util.spec_from_file_location("plan_validate", REPO / "bench" / "plan_validate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def link_probe(bench, tmp_path_factory) -> Path:
    """The link, measured once by its own run (never the measured one)."""
    return bench.probe_link(RATE, tmp_path_factory.mktemp("probe") / "link.json", repeats=3,
                            timeout=120)


@pytest.mark.parametrize("algo", ["sync", "bmuf"])
def test_predicted_step_time_within_15_percent_on_two_hosts(algo, bench, link_probe, tmp_path):
    spec = parse_spec(bench.job(2, algo, steps=20, params=1_000_000), "<plan>", REPO)
    prof = profile_spec(spec, tmp_path, steps=30, warmup=5, concurrent=2)
    point = bench.predict(spec, prof, hosts=2, probe=link_probe)  # before the run
    m = bench.measure(spec, tmp_path, hosts=2, rate=RATE, timeout=240)
    predicted = bench.window_prediction(point, getattr(spec.algorithm, "tau", 1), m["first"], m["last"])
    assert m["step_s"] == pytest.approx(predicted, rel=bench.TOLERANCE), (
        f"{algo}: predicted {predicted * 1e3:.1f} ms/step (compute {point.compute_s * 1e3:.1f}), "
        f"measured {m['step_s'] * 1e3:.1f} over steps {m['first']}-{m['last']} of {m['run']}")
