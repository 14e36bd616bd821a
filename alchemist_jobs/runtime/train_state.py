"""Where a worker stands: its position in the data and its random generators, checkpointable."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state(cuda: bool) -> dict[str, Any]:
    """This process's RNG states, as tensors and lists (loadable with weights_only).

    The CUDA generators are read only when this worker trains on a GPU: merely asking for
    them initialises CUDA, and a CPU job on a GPU host would then hold a context on every
    device and report GPU metrics (an idle GPU) for a job that never used one.
    """
    np_state = np.random.get_state(legacy=True)
    assert isinstance(np_state, tuple)  # the global RandomState is MT19937: its legacy tuple
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].copy()), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if cuda:
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], cuda: bool) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy(), *rest))
    torch.set_rng_state(state["torch"])
    if cuda and "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


def param_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter's bytes: equal digests mean identical models."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


@dataclass
class TrainState:
    """Optimizer steps done, the epoch, and the next batch of it (the sampler position).

    The per-rank RNG states travel beside it in a checkpoint's `ranks` entry, since each
    rank has its own; `rng_state`/`set_rng_state` read and set them.
    """

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    resumed_from: int | None = None

    def position(self) -> dict[str, int]:
        return dict(step=self.step, epoch=self.epoch, batch_in_epoch=self.batch_in_epoch)

    def load_position(self, payload: dict[str, Any], checkpoint_step: int) -> None:
        self.step, self.epoch = int(payload["step"]), int(payload["epoch"])
        self.batch_in_epoch = int(payload["batch_in_epoch"])
        self.resumed_from = checkpoint_step
