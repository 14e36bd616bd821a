"""The Trainer in one process (no launcher, no process group): resume, state, precision,
devices and the stall watchdog."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from alchemist_jobs.rundir import RunDir, read_json
from alchemist_jobs.runtime.trainer import Trainer, WorkerPlace
from alchemist_jobs.spec import JobSpec

CPU = torch.device("cpu")


def _spec(steps: int, **extra) -> JobSpec:
    return JobSpec(
        name="resume",
        task={"builtin": "digits"},
        metrics=False,
        hyper={"steps": steps, "lr": 0.05, "batch_size": 32},
        checkpoint={"every_steps": 30, "keep": 2},
        **extra,
    )


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
    assert (
        read_json(resumed.worker_file(0))["final_param_sha256"]
        == read_json(straight.worker_file(0))["final_param_sha256"]
    )
    assert result["final_loss"] == whole["final_loss"]
    assert [h["epoch"] for h in result["history"]] == [1]  # the boundary crossed after resume


def test_resume_off_starts_from_scratch(tmp_path: Path):
    run = _run(tmp_path, "fresh")
    Trainer(_spec(30), run, tmp_path, WorkerPlace(), device=CPU).train()
    spec = _spec(
        30,
    ).model_copy(update={"checkpoint": _spec(30).checkpoint.model_copy(update={"resume": False})})
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


def test_a_cpu_job_on_a_gpu_host_never_touches_cuda(tmp_path: Path, monkeypatch):
    """Saving RNG state must not call torch.cuda.get_rng_state_all merely because CUDA exists:
    it initialises CUDA on every device, and GPU metrics would be reported for a CPU job."""
    touched = []

    def forbidden(*_a, **_k):
        touched.append(True)
        raise AssertionError("a CPU job initialised CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", forbidden)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", forbidden)
    monkeypatch.setattr(torch.cuda, "set_device", forbidden)
    run = _run(tmp_path, "cpu-on-gpu-host")
    Trainer(_spec(30), run, tmp_path, WorkerPlace()).train()  # device chosen from the spec
    resumed = Trainer(_spec(31), run, tmp_path, WorkerPlace())
    assert resumed.state.resumed_from == 30 and resumed.device.type == "cpu" and not touched


def test_gpu_asked_but_missing_fails_in_one_line_or_falls_back(tmp_path: Path, monkeypatch):
    from alchemist_jobs.runtime.devices import DeviceError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError) as e:
        Trainer(_spec(5, resources={"gpu": 1}), _run(tmp_path, "g"), tmp_path, WorkerPlace())
    msg = str(e.value)
    assert "\n" not in msg and "resources.gpu=1" in msg and "gpu_fallback" in msg
    t = Trainer(
        _spec(5, resources={"gpu": 1, "gpu_fallback": True}), _run(tmp_path, "f"), tmp_path, WorkerPlace()
    )
    assert t.device.type == "cpu"


def test_local_device_plan_gives_each_node_its_own_gpus():
    from alchemist_jobs.runtime.devices import DeviceError, plan_local_devices, select_device

    visible = ["0", "1", "2", "3"]
    assert plan_local_devices(0, 2, 2, visible) == [None, None]
    # Two local nodes of two ranks: LOCAL_RANK restarts at 0 on each, so each node's
    # agent gets its own slice and cuda:<LOCAL_RANK> never names another node's GPU.
    assert plan_local_devices(2, 2, 2, visible) == ["0,1", "2,3"]
    assert plan_local_devices(1, 1, 1, ["GPU-a", "GPU-b"]) == ["GPU-a"]
    with pytest.raises(DeviceError, match="procs_per_node=2"):
        plan_local_devices(1, 1, 2, visible)  # two ranks on one device: NCCL refuses
    with pytest.raises(DeviceError, match="needs 6 GPUs.*4 visible"):
        plan_local_devices(2, 3, 2, visible)
    assert select_device(1, 1, False, True, 2) == "cuda:1"
    assert select_device(0, 0, False, True, 2) == "cpu"
    with pytest.raises(DeviceError, match="LOCAL_RANK 2"):
        select_device(1, 2, False, True, 2)
    assert select_device(1, 0, True, False, 0) == "cpu"


def test_visible_devices_reads_cuda_visible_devices():
    from alchemist_jobs.runtime.devices import visible_devices

    assert visible_devices({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_devices({}, count=2) == ["0", "1"]


def test_loader_workers_yield_the_same_batches_in_the_same_order(tmp_path: Path):
    from alchemist_jobs.runtime.batches import Batches
    from alchemist_jobs.runtime.tasks import load_task

    task = load_task(_spec(1), tmp_path)
    plain = Batches(task, 32, 1, 2, 0, CPU, loader_workers=0)
    ahead = Batches(task, 32, 1, 2, 0, CPU, loader_workers=3)
    got = list(ahead.epoch(1, start_batch=5))
    want = list(plain.epoch(1, start_batch=5))
    assert [b for b, _, _ in got] == [b for b, _, _ in want] == list(range(5, plain.per_epoch))
    assert all(torch.equal(a[1], b[1]) and torch.equal(a[2], b[2]) for a, b in zip(got, want))


def test_digits_test_loss_is_of_the_order_of_the_training_loss(tmp_path: Path):
    """Pixels that are constant in the training split (a corner always 0) must not be scaled
    by 1/epsilon: a test image with ink there became an input near 1e6 and a test loss in the
    hundreds beside an accuracy of 0.95."""
    from alchemist_jobs.runtime.tasks import load_task_data

    spec = _spec(120)
    data = load_task_data(spec, tmp_path)
    assert float(data.x_test.abs().max()) < 100.0
    result = Trainer(spec, _run(tmp_path, "digits-loss"), tmp_path, WorkerPlace(), device=CPU).train()
    assert result["test_accuracy"] > 0.9
    assert result["test_loss"] < 10 * max(result["final_loss"], 0.05), result


def test_rank_0s_log_tells_progress_evaluations_and_the_result(tmp_path: Path, capsys, monkeypatch):
    """`alchemist logs RUN` shows what a training log shows: step, loss and throughput every
    few seconds, each epoch's evaluation and the final figures."""
    import alchemist_jobs.runtime.trainer as trainer

    monkeypatch.setattr(trainer, "LOG_EVERY_S", 0.0)  # every progress report, not every 5 s
    spec = _spec(60)
    Trainer(spec, _run(tmp_path, "logged"), tmp_path, WorkerPlace(), device=CPU).train()
    lines = capsys.readouterr().out.splitlines()
    steps = [ln for ln in lines if ln.startswith("step ")]
    assert (
        len(steps) >= 2
        and steps[-1].startswith("step 60/60")
        and "loss" in steps[-1]
        and "samples/s" in steps[-1]
    )
    assert any(ln.startswith("epoch 1 done at step 45: test accuracy") for ln in lines)
    assert any(ln.startswith("finished at step 60: test accuracy") for ln in lines)


def test_evaluation_builds_no_autograd_graph():
    """Each epoch's evaluation of the whole test set ran with autograd on: a graph of every
    activation (time, and on a GPU memory) that nothing ever used."""
    from torch.utils.data import TensorDataset

    from alchemist_jobs.runtime.batches import evaluate
    from alchemist_jobs.task import Task

    seen = []
    model = torch.nn.Linear(4, 3)
    model.register_forward_hook(lambda m, i, out: seen.append(out.requires_grad))
    task = Task(
        model=model,
        train=TensorDataset(torch.zeros(1, 4), torch.zeros(1).long()),
        test=TensorDataset(torch.randn(8, 4), torch.zeros(8, dtype=torch.long)),
        loss=torch.nn.functional.cross_entropy,
    )
    evaluate(model, task, torch.device("cpu"))
    assert seen == [False]


def test_rank_0_records_every_steps_loss_for_the_charts(tmp_path: Path):
    """The dashboard charts an ended run at step resolution from series.jsonl: the trainer
    appends every step's loss (read from the device with the others, not once per step),
    as a script's reporter does."""
    import json

    run = _run(tmp_path, "series")
    result = Trainer(_spec(60), run, tmp_path, WorkerPlace(), device=CPU).train()
    points = [json.loads(line) for line in (run.path / "series.jsonl").read_text().splitlines()]
    assert [p["step"] for p in points] == list(range(1, 61))
    assert points[-1]["loss"] == pytest.approx(result["final_loss"])
    assert all(p["loss"] > 0 and p["samples_per_s"] >= 0 for p in points)
