"""What the model-averaging strategies (bmuf, easgd) share: the check that every replica
starts from the same model, and evaluating a model vector in the local parameters."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters


def check_same_start(vec: torch.Tensor, comm: Any, what: str) -> None:
    """Fail early if the replicas do not start from the same model (it would silently skew
    every average): compare a checksum's min and max over ranks. 8 bytes of control traffic."""
    # On the model's device: the process group's backend may accept only that (NCCL takes
    # CUDA tensors only); one read back afterwards.
    total = vec.detach().double().sum()
    s = torch.stack([total, -total])
    dist.all_reduce(s, op=dist.ReduceOp.MAX)
    comm.allreduce(s.numel() * s.element_size(), dist.get_world_size())
    hi, neg_lo = s.cpu().tolist()
    if abs(hi + neg_lo) > 1e-6 * max(1.0, abs(hi)):
        raise RuntimeError(f"{what}: workers start from different models; they must share a seed")


@contextlib.contextmanager
def swapped(params: list[torch.Tensor], vec: torch.Tensor) -> Iterator[None]:
    """Temporarily load `vec` into the parameters; the local values come back afterwards."""
    with torch.no_grad():
        saved = parameters_to_vector(params).detach().clone()
        vector_to_parameters(vec.clone(), params)
    try:
        yield
    finally:
        with torch.no_grad():
            vector_to_parameters(saved, params)
