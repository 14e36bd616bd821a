"""What the model-averaging strategies (bmuf, easgd) share: the check that every replica
starts from the same model, and evaluating a model vector in the local parameters."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

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
def swapped(params: Sequence[torch.Tensor], vec: torch.Tensor) -> Iterator[None]:
    """Temporarily load `vec` into the parameters; the local values come back afterwards."""
    with torch.no_grad():
        saved = parameters_to_vector(params).detach().clone()
        vector_to_parameters(vec.clone(), params)
    try:
        yield
    finally:
        with torch.no_grad():
            vector_to_parameters(saved, params)


WIRE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class Exchange:
    """One all-reduce (sum) of a model-sized vector, in the wire precision the spec asks for,
    blocking or left in flight (`start`, later `land`) while local steps run. Counts its bytes
    and a round in `comm`, and the time a step waited for it."""

    def __init__(self, comm: Any, world: int, device: torch.device, dtype: str):
        self.comm, self.world, self.device = comm, world, device
        self.dtype = WIRE_DTYPES[dtype]
        self.work: Any = None
        self.buf: torch.Tensor | None = None

    @property
    def in_flight(self) -> bool:
        return self.work is not None

    def start(self, vec: torch.Tensor) -> None:
        """Sum `vec` over ranks in the background (on a copy: `vec` may change meanwhile)."""
        assert self.work is None, "one exchange in flight at a time"
        self.buf = vec.detach().to(self.dtype, copy=True)
        self.work = dist.all_reduce(self.buf, async_op=True)
        self.comm.allreduce(self.buf.numel() * self.buf.element_size(), self.world)
        self.comm.rounds += 1

    def land(self) -> torch.Tensor:
        """Wait for the exchange in flight (the step waits only for what is left); its sum
        in fp32."""
        with self.comm.timed(self.device):
            self.work.wait()
        return self._take()

    def sum(self, vec: torch.Tensor) -> torch.Tensor:
        """A blocking exchange: the step waits for all of it."""
        with self.comm.timed(self.device):
            self.start(vec)
            self.work.wait()
        return self._take()

    def _take(self) -> torch.Tensor:
        assert self.buf is not None  # start() filled it
        out, self.work, self.buf = self.buf.float(), None, None
        return out
