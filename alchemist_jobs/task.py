"""Bring your own model to the built-in trainer: what a `task.entry` function returns.

    # model.py, next to the job spec (task: {entry: "model.py:make_task"})
    def make_task(ctx):                       # ctx: TaskContext (or take no argument)
        return dict(model=Net(), train=TrainSet(), test=TestSet(), loss=F.cross_entropy)

The function runs in every worker (and in the planner's profile and the learning-curve
evaluation), after the job's seed is set, so each worker builds the same initial model. It
returns a `Task`, a mapping or any object with the same fields. The trainer then does the
rest, as for the built-in tasks (which are two such functions, runtime/tasks.py): sharding,
`hyper` (batch, learning-rate rules, warm-up, LARS), every algorithm, checkpoints and
resume, metrics, progress and learning curves. docs/bring-your-model.md has the whole story.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from alchemist_jobs.spec import Hyper, JobSpec


class TaskError(Exception):
    """The entry function or what it returned breaks the task contract (a restart cannot
    help): one line naming the entry, the field and what is accepted."""


@dataclass
class TaskContext:
    """What an entry function may want to know about where it runs."""

    spec: JobSpec  # the whole job spec (hyper, algorithm, data...)
    rank: int  # this worker's rank (0 in the planner's profile and the curve's evaluation)
    world_size: int  # workers in the job
    shared_root: Path  # the shared file system every worker sees (locally: a directory)

    @property
    def data_dir(self) -> Path:
        """The job's data: <shared file system>/<data.path>."""
        return self.shared_root / self.spec.data.path

    @property
    def hyper(self) -> Hyper:
        return self.spec.hyper


@dataclass
class Task:
    """A model and the data it learns. Required: model, train, test, loss."""

    model: torch.nn.Module
    # Map-style datasets (len() and [i]) of (input, target) pairs. A TensorDataset of two
    # tensors is sliced in place, batch by batch (no per-sample collation).
    train: Any
    test: Any
    # loss(outputs, targets) -> scalar tensor, e.g. torch.nn.functional.cross_entropy
    loss: Callable[[Any, Any], torch.Tensor]
    # metrics(outputs, targets) -> {name: number}, averaged over the test set (weighted by
    # batch size). Accuracy is computed without it when outputs are class scores over the
    # last dimension and targets class indices of the same leading shape.
    metrics: Callable[[Any, Any], Mapping[str, float]] | None = None
    # optimizer(params, hyper) -> torch.optim.Optimizer; default: hyper.optimizer. The
    # trainer sets every param group's lr each step from hyper's schedule either way.
    optimizer: Callable[[Any, Hyper], torch.optim.Optimizer] | None = None
    collate: Callable[[list], Any] | None = None  # default: torch's default_collate
    eval_batch_size: int = 1024  # test samples per forward pass when evaluating


_REQUIRED = ("model", "train", "test", "loss")


def as_task(obj: Any, entry: str) -> Task:
    """A Task from what an entry function returned (a Task, a mapping or an object)."""
    import torch

    if isinstance(obj, Task):
        got = {f.name: getattr(obj, f.name) for f in fields(Task)}
    elif isinstance(obj, Mapping):
        unknown = sorted(set(obj) - {f.name for f in fields(Task)})
        if unknown:
            raise TaskError(
                f"task.entry {entry}: returned unknown field {unknown[0]!r}; "
                f"accepted: {', '.join(f.name for f in fields(Task))}"
            )
        got = dict(obj)
    else:
        got = {f.name: getattr(obj, f.name) for f in fields(Task) if hasattr(obj, f.name)}
    missing = [k for k in _REQUIRED if got.get(k) is None]
    if missing:
        raise TaskError(
            f"task.entry {entry}: returned no {missing[0]!r} "
            f"({type(obj).__name__}); accepted: a Task or mapping with "
            f"{', '.join(_REQUIRED)}"
        )
    if not isinstance(got["model"], torch.nn.Module):
        raise TaskError(
            f"task.entry {entry}: model is a {type(got['model']).__name__}; accepted: a torch.nn.Module"
        )
    for name in ("train", "test"):
        ds = got[name]
        if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
            raise TaskError(
                f"task.entry {entry}: {name} is a {type(ds).__name__} without "
                "len() and [i]; accepted: a map-style torch Dataset"
            )
        if len(ds) == 0:
            raise TaskError(
                f"task.entry {entry}: {name} is empty; accepted: a dataset with at least one sample"
            )
    for name in ("loss", "metrics", "optimizer", "collate"):
        if got.get(name) is not None and not callable(got[name]):
            raise TaskError(
                f"task.entry {entry}: {name} is a {type(got[name]).__name__}; accepted: a function"
            )
    return Task(**got)


def entry_function(entry: str, code_dir: Path | None = None) -> Callable[..., Any]:
    """The function `FILE.py:FUNCTION` (FILE relative to `code_dir`, the run's copy of the
    spec's directory) or `package.module:FUNCTION` names."""
    target, _, name = entry.rpartition(":")
    if target.endswith(".py"):
        path = (code_dir or Path.cwd()) / target
        if not path.is_file():
            raise TaskError(
                f"task.entry {entry}: {path} not found; accepted: a Python file in the spec's directory"
            )
        # One module per file, whatever its name: two entries both called model.py (two
        # projects, one process: the tests, a notebook) must not share a cached module.
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        module_name = f"_alchemist_entry_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{digest}"
        if module_name not in sys.modules:
            folder = str(path.parent.resolve())
            if folder not in sys.path:
                sys.path.insert(0, folder)  # the entry file's siblings import as they would
            loader = importlib.util.spec_from_file_location(module_name, path)
            # a .py path always gets a spec with its SourceFileLoader
            assert loader is not None and loader.loader is not None
            module = importlib.util.module_from_spec(loader)
            sys.modules[module_name] = module  # dataclasses and pickling look it up there
            try:
                loader.loader.exec_module(module)
            except BaseException:
                del sys.modules[module_name]
                raise
        module = sys.modules[module_name]
    else:
        if code_dir is not None and str(code_dir) not in sys.path:
            sys.path.insert(0, str(code_dir))
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as e:
            if e.name is not None and target.startswith(e.name):
                raise TaskError(
                    f"task.entry {entry}: no module named {e.name!r}; accepted: a "
                    "module importable from the spec's directory or installed"
                ) from e
            raise
    fn = getattr(module, name, None)
    if not callable(fn):
        raise TaskError(f"task.entry {entry}: {target} has no function {name!r}")
    return fn


def build_task(entry: str, ctx: TaskContext, code_dir: Path | None = None) -> Task:
    """Call the entry function (with the context if it takes an argument) and check what it
    returned."""
    fn = entry_function(entry, code_dir)
    try:
        takes_ctx = bool(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        takes_ctx = True
    return as_task(fn(ctx) if takes_ctx else fn(), entry)
