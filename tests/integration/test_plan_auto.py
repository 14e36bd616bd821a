"""`alchemist plan SPEC --auto` as a user runs it: real calibration runs on the local stack,
the pick and runner-up as `--set` arguments, a second plan served from the cache, and
`alchemist run SPEC --set algorithm=auto` running the pick."""

from __future__ import annotations

import json
import shlex

import yaml

from alchemist_jobs.planner import auto
from alchemist_jobs.rundir import RunDir
from alchemist_jobs.spec import ALGORITHMS, JobSpec
from tests.conftest import cli

SPEC = {
    "name": "auto-small",
    "task": {"builtin": "synthetic", "synthetic": {"params": 20000, "samples": 2048, "features": 8}},
    "nodes": 2,
    "procs_per_node": 1,
    "hyper": {"batch_size": 64, "lr": 0.02, "momentum": 0.9, "epochs": 3, "seed": 0},
    "checkpoint": {"every_steps": 1000000},
    "max_restarts": 0,
}
# one seed a point: the flow, not the fit, is what this test shows (the seeds: test_plan_auto_pick)
PLAN = ["--auto", "--target", "0.6", "--link", "100mbit", "--profile-steps", "20", "--calibration-seeds", "1"]


def test_plan_auto_picks_prints_set_arguments_and_run_applies_the_pick(tmp_path, home):
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(SPEC))

    first = cli("plan", str(spec), *PLAN, home=home, timeout=900)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stderr.count("calibration run ") == len(auto.CALIBRATION)
    lines = first.stdout.splitlines()
    pick_line = next(i for i, line in enumerate(lines) if line.startswith("pick: "))
    assert lines[pick_line + 2].startswith("runner-up: ")
    # the printed --set arguments, as a shell splits them, give a valid algorithm section
    printed = shlex.split(lines[pick_line + 1])
    assert printed[0] == "--set" and printed[1].startswith("algorithm={")

    second = cli("plan", str(spec), *PLAN, "--json", home=home, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "calibration run" not in second.stderr  # the cached runs serve a second plan
    plan = json.loads(second.stdout)
    pick, runner = plan["pick"], plan["runner_up"]
    # profiled afresh, the step times (and so the pick) may differ; both plans print candidates
    assert printed[1] in {c["set"][0] for c in plan["candidates"]}
    assert pick["time_to_target_s"] <= runner["time_to_target_s"]
    predicted = plan["start_s"] + pick["steps_to_target"] * pick["step_s"]
    assert abs(pick["time_to_target_s"] - predicted) <= 0.05 * pick["step_s"] + 0.002
    # each calibration run is a real run of the job in the home, succeeded
    for entry in plan["calibration"].values():
        assert RunDir(home / "runs" / entry["run_id"]).state()["state"] == "succeeded"

    run = cli("run", str(spec), "--set", "algorithm=auto", home=home, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    runs = sorted((home / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    ran = JobSpec.model_validate(yaml.safe_load((runs[-1] / "spec.yaml").read_text()))
    assert ran.algorithm == ALGORITHMS[pick["algorithm"]["name"]](**pick["algorithm"])
