"""The Trainer in one process (no launcher, no process group): resume, state, precision,
devices and the stall watchdog."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from alchemist_jobs.rundir import RunDir, read_json
from alchemist_jobs.runtime.trainer import Trainer, WorkerPlace
from alchemist_jobs.spec import JobSpec

CPU = torch.device("cpu")


def _spec(steps: int, **extra) -> JobSpec:
    return JobSpec(name="resume", task={"builtin": "digits"}, metrics=False,
                   hyper={"steps": steps, "lr": 0.05, "batch_size": 32},
                   checkpoint={"every_steps": 30, "keep": 2}, **extra)


def _run(root: Path, name: str) -> RunDir:
    run = RunDir(root / "runs" / name)
    run.create()
    return run


def test_resume_continues_bit_identically_from_the_checkpoint(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("ALCHEMIST_SLOW_RANKS", raising=False)
    # 60 steps straight through (45 batches per epoch: one epoch boundary on the way).
    straight = _run(tmp_path, "straight")
    whole = Trainer(_spec(60), straight, tmp_path, WorkerPlace(), device=CPU).train()

    # The same 60 steps as 30, a new Trainer (as a restarted worker), then 30 more.
    resumed = _run(tmp_path, "resumed")
    first = Trainer(_spec(30), resumed, tmp_path, WorkerPlace(), device=CPU)
    assert first.state.step == 0 and first.state.resumed_from is None
    first.train()
    second = Trainer(_spec(60), resumed, tmp_path, WorkerPlace(restarts=1), device=CPU)
    assert (second.state.step, second.state.epoch, second.state.batch_in_epoch) == (30, 0, 30)
    assert second.state.resumed_from == 30
    result = second.train()

    assert result["resumed_from_step"] == 30 and result["steps"] == 60
    assert read_json(resumed.worker_file(0))["final_param_sha256"] == \
        read_json(straight.worker_file(0))["final_param_sha256"]
    assert result["final_loss"] == whole["final_loss"]
    assert [h["epoch"] for h in result["history"]] == [1]  # the boundary crossed after resume


def test_resume_off_starts_from_scratch(tmp_path: Path):
    run = _run(tmp_path, "fresh")
    Trainer(_spec(30), run, tmp_path, WorkerPlace(), device=CPU).train()
    spec = _spec(30, ).model_copy(update={"checkpoint": _spec(30).checkpoint.model_copy(
        update={"resume": False})})
    again = Trainer(spec, run, tmp_path, WorkerPlace(), device=CPU)
    assert again.state.step == 0 and again.state.resumed_from is None


def test_bf16_autocast_trains_on_cpu(tmp_path: Path):
    spec = _spec(10, precision={"autocast": "bf16"})
    result = Trainer(spec, _run(tmp_path, "bf16"), tmp_path, WorkerPlace(), device=CPU).train()
    assert result["steps"] == 10 and result["final_loss"] == result["final_loss"]  # finite


def test_a_nan_loss_stops_the_run(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("ALCHEMIST_ALLOW_NAN", raising=False)
    spec = _spec(10).model_copy(update={"hyper": _spec(10).hyper.model_copy(update={"lr": 1e30})})
    with pytest.raises(FloatingPointError, match="loss is"):
        Trainer(spec, _run(tmp_path, "nan"), tmp_path, WorkerPlace(), device=CPU).train()
