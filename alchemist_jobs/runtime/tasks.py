"""Built-in tasks: data sets on the shared file system and the models that learn them.

Each is a `task.entry` function like a user's (`digits`, `synthetic` below, alchemist_jobs/
task.py): the trainer, the parameter server's worker, the planner and the learning curve
reach every task, built-in or not, through `load_task`. `digits` is scikit-learn's bundled 8x8 digits set; `synthetic` is generated classification
data with a model whose parameter count the spec sets. Both are prepared once into
`<shared root>/<data.path>/` (under a file lock, written atomically) and then loaded by every
worker as tensors, so workers never import scikit-learn after the first run. With
`data.source` set, a task reads a staged dataset instead (`load_staged`, docs/datasets.md).
"""

from __future__ import annotations

import fcntl
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from alchemist_jobs import environment as E
from alchemist_jobs.data.cache import DataError
from alchemist_jobs.data.stage import stage
from alchemist_jobs.spec import DIGITS_TEST
from alchemist_jobs.task import Task, TaskContext, build_task

if TYPE_CHECKING:
    import torch

    from alchemist_jobs.spec import JobSpec, TaskSpec

_FORMAT = 2  # bump when the prepared files change (shape or values)


@dataclass
class TaskData:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: int

    @property
    def features(self) -> int:
        return int(self.x_train.shape[1])


def _prepare_digits(seed: int) -> dict:
    import numpy as np
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=DIGITS_TEST, random_state=seed, stratify=y)
    # Standardise on the training split's statistics only. A pixel constant there (a corner
    # that is always blank) keeps scale 1: dividing by a zero std plus epsilon turned a test
    # image's ink in that corner into an input near 1e6.
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
    std = np.where(std > 1e-3, std, 1.0)
    f = lambda a: torch.from_numpy(((a - mean) / std).astype(np.float32))  # noqa: E731
    return dict(
        x_train=f(x_tr),
        y_train=torch.from_numpy(y_tr).long(),
        x_test=f(x_te),
        y_test=torch.from_numpy(y_te).long(),
        classes=10,
    )


def _prepare_synthetic(task: TaskSpec, seed: int) -> dict:
    """Gaussian inputs labelled by a fixed random two-layer teacher: learnable, not trivial."""
    import torch

    s = task.synthetic
    g = torch.Generator().manual_seed(seed + 1)
    n_test = max(s.samples // 4, s.classes)
    x = torch.randn(s.samples + n_test, s.features, generator=g)
    w1 = torch.randn(s.features, 64, generator=g) / math.sqrt(s.features)
    w2 = torch.randn(64, s.classes, generator=g) / 8.0
    y = (torch.tanh(x @ w1) @ w2).argmax(dim=1)
    return dict(
        x_train=x[: s.samples].contiguous(),
        y_train=y[: s.samples].contiguous(),
        x_test=x[s.samples :].contiguous(),
        y_test=y[s.samples :].contiguous(),
        classes=s.classes,
    )


def _data_seed(spec: JobSpec) -> int:
    """The synthetic data's seed: its own where the spec sets one, else the job's."""
    own = spec.task.synthetic.data_seed
    return spec.hyper.seed if own is None else own


def _data_file(spec: JobSpec, root: Path) -> Path:
    t = spec.task
    if t.builtin == "digits":
        name = f"digits-v{_FORMAT}-seed{spec.hyper.seed}.pt"
    else:
        s = t.synthetic
        name = f"synthetic-v{_FORMAT}-{s.samples}x{s.features}-c{s.classes}-seed{_data_seed(spec)}.pt"
    return root / spec.data.path / name


# A staged dataset (`data.source`) for a built-in task: `train.npz` and `test.npz`, each with
# `x` (float32, samples x features) and `y` (integer class labels).
STAGED_FILES = ("train.npz", "test.npz")
_staged: list = []  # cache entries this process reads: held in use (never evicted) until exit


def load_staged(spec: JobSpec, shared_root: Path) -> TaskData:
    """Stage `data.source` into the node's dataset cache (once per node) and load its .npz files."""
    import numpy as np
    import torch

    entry = stage(spec, shared_root, E.RUN_DIR.get())
    _staged.append(entry)
    arrays = {}
    for name in STAGED_FILES:
        try:
            with np.load(entry.path / name) as f:
                arrays[name] = (
                    torch.from_numpy(f["x"].astype(np.float32)),
                    torch.from_numpy(f["y"].astype(np.int64)),
                )
        except (OSError, KeyError, ValueError) as e:
            raise DataError(
                f"data.source {spec.data.source}: {name} is not an .npz with arrays "
                f"x and y ({type(e).__name__}); accepted: {' and '.join(STAGED_FILES)} "
                "as written by `python -m alchemist_jobs.data.examples`"
            ) from None
    (x_tr, y_tr), (x_te, y_te) = arrays["train.npz"], arrays["test.npz"]
    classes = int(max(y_tr.max(), y_te.max())) + 1
    return TaskData(x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, classes=classes)


def load_task_data(spec: JobSpec, shared_root: Path) -> TaskData:
    """Load the task's data set, preparing it first if no worker has yet (atomic, locked)."""
    import torch

    if spec.data.source is not None:
        return load_staged(spec, shared_root)
    path = _data_file(spec, shared_root)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one preparer; the others wait, then load
            if not path.exists():
                data = (
                    _prepare_digits(spec.hyper.seed)
                    if spec.task.builtin == "digits"
                    else _prepare_synthetic(spec.task, _data_seed(spec))
                )
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                torch.save(data, tmp)
                os.replace(tmp, path)
    return TaskData(**torch.load(path, weights_only=True))


def build_model(spec: JobSpec, data: TaskData) -> torch.nn.Module:
    """An MLP: digits uses `task.digits.hidden`; synthetic sizes its hidden width so the
    model has about `task.synthetic.params` parameters."""
    import torch.nn as nn

    if spec.task.builtin == "digits":
        widths = list(spec.task.digits.hidden)
    else:
        s = spec.task.synthetic
        widths = [synthetic_width(s.params, data.features, s.classes, s.layers)] * s.layers
    layers: list[nn.Module] = []
    prev = data.features
    for w in widths:
        layers += [nn.Linear(prev, w), nn.ReLU()]
        prev = w
    layers.append(nn.Linear(prev, data.classes))
    return nn.Sequential(*layers)


def synthetic_width(params: int, features: int, classes: int, layers: int) -> int:
    """Hidden width h with features*h + (layers-1)*h^2 + h*classes (+ biases) ~= params."""
    a = layers - 1
    b = features + classes + layers
    if a == 0:
        return max(1, round((params - classes) / b))
    return max(1, round((-b + math.sqrt(b * b + 4 * a * max(params - classes, 1))) / (2 * a)))


def _builtin(ctx: TaskContext) -> Task:
    import torch.nn.functional as F
    from torch.utils.data import TensorDataset

    data = load_task_data(ctx.spec, ctx.shared_root)
    return Task(
        model=build_model(ctx.spec, data),
        train=TensorDataset(data.x_train, data.y_train),
        test=TensorDataset(data.x_test, data.y_test),
        loss=F.cross_entropy,
    )


def digits(ctx: TaskContext) -> Task:
    """scikit-learn's digits and an MLP of `task.digits.hidden` widths."""
    return _builtin(ctx)


def synthetic(ctx: TaskContext) -> Task:
    """Generated classification data and an MLP of about `task.synthetic.params` parameters."""
    return _builtin(ctx)


def load_task(
    spec: JobSpec, shared_root: Path, rank: int = 0, world: int = 1, code_dir: Path | None = None
) -> Task:
    """The job's task, built-in or the user's entry, built after seeding every generator
    with the job's seed: every process that calls this builds the same initial model."""
    from alchemist_jobs.runtime.train_state import seed_everything

    seed_everything(spec.hyper.seed)
    ctx = TaskContext(spec=spec, rank=rank, world_size=world, shared_root=Path(shared_root))
    return build_task(spec.task.entry_point, ctx, code_dir)
