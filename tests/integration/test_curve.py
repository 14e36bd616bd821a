"""Learning curves off the training path: rank 0's snapshots, evaluated afterwards, and the
time to a target read between two evaluations."""

from __future__ import annotations

from pathlib import Path

import pytest

from alchemist_jobs.rundir import RunDir
from alchemist_jobs.runtime import trainer
from alchemist_jobs.runtime.curve import evaluate_snapshots, snapshot_dir, time_to_target
from alchemist_jobs.spec import JobSpec


def test_time_to_target_is_linear_between_the_evaluations_around_the_crossing():
    pts = [dict(wall_s=0.0, accuracy=0.1), dict(wall_s=10.0, accuracy=0.5),
           dict(wall_s=20.0, accuracy=0.9), dict(wall_s=30.0, accuracy=0.7)]
    assert time_to_target(pts, 0.8) == pytest.approx(17.5)
    assert time_to_target(pts, 0.5) == 10.0
    assert time_to_target(pts, 0.05) == 0.0
    assert time_to_target(pts, 0.95) is None


def test_rank0_snapshots_every_n_steps_and_they_evaluate_to_the_runs_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    spec = JobSpec(name="curve", task={"builtin": "digits"}, metrics=False,
                   hyper={"steps": 30, "lr": 0.05, "batch_size": 32},
                   checkpoint={"every_steps": 1000}, curve={"every_steps": 10})
    run = RunDir(tmp_path / "runs" / "curve")
    run.create()
    run.spec.write_text(spec.to_yaml())
    result = trainer.train(spec, run, tmp_path)

    assert sorted(p.name for p in snapshot_dir(run).iterdir()) == [
        f"step-{s:08d}.pt" for s in (0, 10, 20, 30)]
    assert result["history"] == []  # no evaluation on the training path
    points = evaluate_snapshots(run, tmp_path)
    assert [p["step"] for p in points] == [0, 10, 20, 30]
    walls = [p["wall_s"] for p in points]
    assert walls == sorted(walls)
    assert points[-1]["accuracy"] == result["test_accuracy"]  # the last one is the final model
    assert points[-1]["accuracy"] > points[0]["accuracy"]
    assert result["curve_snapshot_s"] > 0


def test_curve_every_steps_rejects_zero():
    with pytest.raises(ValueError, match="every_steps"):
        JobSpec(name="t", task={"builtin": "digits"}, curve={"every_steps": 0})
