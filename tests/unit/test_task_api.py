"""The task API (task.entry) and the own-loop API, in process: what an entry function may
return and the one line for what it may not, how a task's data is batched and evaluated,
and `prepare` outside an Alchemist run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, TensorDataset

from alchemist_jobs.errors import UserError
from alchemist_jobs.runtime.batches import Batches, evaluate
from alchemist_jobs.spec import JobSpec, load_spec, parse_spec
from alchemist_jobs.task import Task, TaskContext, TaskError, as_task, build_task

CPU = torch.device("cpu")


def _spec_file(tmp_path: Path, task: dict, **more) -> Path:
    import yaml

    p = tmp_path / "job.yaml"
    p.write_text(yaml.safe_dump(dict(name="mine", task=task, **more)))
    return p


def test_an_entry_names_a_file_in_the_spec_directory_or_a_module(tmp_path: Path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "net.py").write_text("def make(): pass\n")
    spec = load_spec(_spec_file(tmp_path, {"entry": "./models/../models/net.py:make"}))
    assert spec.task.entry == "models/net.py:make" and spec.task.kind == "entry"
    assert spec.task.entry_file == "models/net.py" and spec.task.worker_args() == ["trainer"]
    spec = load_spec(_spec_file(tmp_path, {"entry": "my_pkg.models:make_task"}))
    assert spec.task.entry_file is None and spec.task.entry_point == "my_pkg.models:make_task"
    assert JobSpec(name="d", task={"builtin": "digits"}).task.entry_point == \
        "alchemist_jobs.runtime.tasks:digits"


@pytest.mark.parametrize("task, words", [
    ({"entry": "net.py"}, "is not FILE.py:FUNCTION or package.module:FUNCTION"),
    ({"entry": "net.py:make-task"}, "is not FILE.py:FUNCTION"),
    ({"entry": "missing.py:make"}, "task.entry: 'missing.py' not found"),
    ({"entry": "../outside.py:make"}, "lies outside the spec's directory"),
    ({"entry": "net.py:make", "framework": "jax"}, "built-in and entry tasks train with torch"),
    ({"entry": "net.py:make", "script": "net.py"}, "needs exactly one of"),
])
def test_a_bad_entry_is_one_line_naming_the_field(tmp_path: Path, task, words):
    (tmp_path / "net.py").write_text("def make(): pass\n")
    (tmp_path.parent / "outside.py").write_text("def make(): pass\n")
    with pytest.raises(UserError) as e:
        load_spec(_spec_file(tmp_path, task))
    assert words in str(e.value) and "\n" not in str(e.value) and "task" in str(e.value)


class _Pairs(Dataset):
    """A map-style dataset as users write them: a sample at a time."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def _task(**over) -> dict:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 4, generator=g), torch.randint(0, 3, (40,), generator=g)
    return dict(dict(model=torch.nn.Linear(4, 3), train=_Pairs(x, y), test=_Pairs(x, y),
                     loss=F.cross_entropy), **over)


@pytest.mark.parametrize("over, words", [
    (dict(loss=None), "returned no 'loss'"),
    (dict(model="a model"), "model is a str; accepted: a torch.nn.Module"),
    (dict(train=iter([1, 2])), "train is a list_iterator without len() and [i]"),
    (dict(test=_Pairs(torch.zeros(0, 4), torch.zeros(0))), "test is empty"),
    (dict(metrics=3), "metrics is a int; accepted: a function"),
    (dict(lr=0.1), "returned unknown field 'lr'"),
])
def test_what_an_entry_returns_is_checked_with_one_line(over, words):
    with pytest.raises(TaskError) as e:
        as_task(_task(**over), "net.py:make")
    assert str(e.value).startswith("task.entry net.py:make: ") and words in str(e.value)


def test_an_entry_may_return_a_task_a_mapping_or_an_object(tmp_path: Path):
    assert isinstance(as_task(Task(**_task()), "e"), Task)

    class Bundle:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    got = as_task(Bundle(**_task(), notes="ignored"), "e")
    assert isinstance(got.model, torch.nn.Linear) and got.metrics is None


def test_the_entry_function_gets_the_context_if_it_takes_one(tmp_path: Path):
    (tmp_path / "helpers.py").write_text("WIDTH = 5\n")
    (tmp_path / "net.py").write_text(
        "import torch\nfrom torch.utils.data import TensorDataset\nimport helpers\n"
        "seen = []\n"
        "def data():\n    return TensorDataset(torch.zeros(4, 2), torch.zeros(4).long())\n"
        "def with_ctx(ctx):\n    seen.append(ctx)\n"
        "    return dict(model=torch.nn.Linear(2, helpers.WIDTH), train=data(), test=data(),\n"
        "                loss=torch.nn.functional.cross_entropy)\n"
        "def bare():\n    return with_ctx(None)\n")
    spec = JobSpec(name="m", task={"entry": "net.py:with_ctx"}, procs_per_node=2)
    ctx = TaskContext(spec=spec, rank=1, world_size=2, shared_root=tmp_path / "shared")
    task = build_task("net.py:with_ctx", ctx, code_dir=tmp_path)
    assert task.model.out_features == 5  # the entry's sibling module imported
    assert build_task("net.py:bare", ctx, code_dir=tmp_path).model.out_features == 5
    import sys

    from alchemist_jobs.task import entry_function

    seen = sys.modules[entry_function("net.py:with_ctx", tmp_path).__module__].seen
    assert seen[0] is ctx and seen[0].data_dir == tmp_path / "shared" / "data" and seen[1] is None
    with pytest.raises(TaskError, match="has no function 'nope'"):
        build_task("net.py:nope", ctx, code_dir=tmp_path)
    with pytest.raises(TaskError, match="no module named 'no_such_pkg'"):
        build_task("no_such_pkg.models:make", ctx, code_dir=tmp_path)


def test_a_general_dataset_is_batched_like_the_same_tensors(workers: int = 0):
    """A dataset read sample by sample yields exactly the batches the in-memory slicing of
    the same tensors does: the same shard of DistributedSampler's order, resumable mid-epoch."""
    t = _task()
    x, y = t["train"].x, t["train"].y
    as_tensors = Batches(Task(**dict(t, train=TensorDataset(x, y))), 6, 1, 2, 0, CPU)
    general = Batches(Task(**t), 6, 1, 2, 0, CPU, loader_workers=workers)
    want, got = list(as_tensors.epoch(3, start_batch=1)), list(general.epoch(3, start_batch=1))
    assert [b for b, _, _ in got] == [b for b, _, _ in want] == [1, 2, 3]
    assert all(torch.equal(a[1], b[1]) and torch.equal(a[2], b[2]) for a, b in zip(got, want))


def test_evaluation_averages_loss_accuracy_and_the_tasks_metrics_over_samples():
    """Sequence outputs (batch, positions, classes) get accuracy by default; a regression
    gets none; the task's own metrics are weighted by batch size like the loss."""
    class Echo(torch.nn.Module):
        def forward(self, x):
            return x

    out = torch.tensor([[[5.0, 0.0], [0.0, 5.0]]] * 3 + [[[0.0, 5.0], [0.0, 5.0]]] * 2)
    tgt = torch.tensor([[0, 1]] * 5)
    seq = Task(model=Echo(), train=TensorDataset(out, tgt), test=_Pairs(out, tgt),
               loss=lambda o, t: F.cross_entropy(o.reshape(-1, 2), t.reshape(-1)),
               metrics=lambda o, t: {"first_right": (o[:, 0].argmax(-1) == t[:, 0]).float().mean()},
               eval_batch_size=2)
    got = evaluate(seq.model, seq, CPU)
    assert got["accuracy"] == pytest.approx(8 / 10) and got["first_right"] == pytest.approx(3 / 5)
    reg = Task(model=torch.nn.Linear(1, 1), train=TensorDataset(torch.ones(4, 1), torch.ones(4, 1)),
               test=TensorDataset(torch.ones(4, 1), torch.ones(4, 1)), loss=F.mse_loss)
    got = evaluate(reg.model, reg, CPU)
    assert set(got) == {"loss"} and math.isfinite(got["loss"])


def test_prepare_outside_an_alchemist_run_leaves_a_single_process_alone(monkeypatch):
    import alchemist_jobs

    monkeypatch.delenv("ALCHEMIST_RUN_DIR", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert alchemist_jobs.prepare(model, opt) == (model, opt)
    assert alchemist_jobs.checkpoint.resume() == {}
    alchemist_jobs.checkpoint.save(epoch=1)  # nothing to write to, nothing written
    alchemist_jobs.finish()


def test_a_builtin_task_is_an_entry_like_a_users(tmp_path: Path):
    from alchemist_jobs.runtime.tasks import load_task

    spec = parse_spec({"name": "d", "task": {"builtin": "digits"}}, "<d>", tmp_path)
    task = load_task(spec, tmp_path)
    assert isinstance(task, Task) and len(task.train) == 1437 and len(task.test) == 360
    again = load_task(spec, tmp_path)  # the job's seed: every process builds the same model
    assert all(torch.equal(a, b) for a, b in zip(task.model.parameters(),
                                                 again.model.parameters()))


def test_the_planner_profiles_an_entry_task_from_the_specs_directory(tmp_path: Path):
    """`alchemist plan` times a user's own model: the entry is built from the spec's
    directory and its loss runs in the timed steps."""
    from alchemist_jobs.planner.profile import profile_spec

    (tmp_path / "net.py").write_text(
        "import torch\nfrom torch.utils.data import TensorDataset\n"
        "def make():\n    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))\n"
        "    return dict(model=torch.nn.Linear(8, 4), train=data, test=data,\n"
        "                loss=torch.nn.functional.cross_entropy)\n")
    spec = load_spec(_spec_file(tmp_path, {"entry": "net.py:make"}, hyper={"batch_size": 8}))
    prof = profile_spec(spec, tmp_path, steps=3, warmup=1, code_dir=tmp_path)
    assert prof.exchange_bytes == (8 * 4 + 4) * 4 and prof.batch_per_worker == 8
    assert prof.forward_s > 0 and prof.backward_s > 0
