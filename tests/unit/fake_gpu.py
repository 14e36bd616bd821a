"""A stand-in GPU for machines without one: the `meta` device plus the two rules a CPU run
never enforces.

1. `SameDevice`: an operator mixing tensors of two devices fails, as on CUDA. Upstream:
   pytorch/pytorch v2.13.0 aten/src/ATen/TensorIterator.cpp, TensorIteratorBase::compute_types
   ("Expected all tensors to be on the same device, but found at least two devices"), which
   exempts CPU zero-dim scalars; copies (`copy_`, `_to_copy`) may cross devices.
2. `NcclLikeGroup`: collectives refuse host tensors, as NCCL does. Upstream: pytorch/pytorch
   v2.13.0 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, check_gpu_single_tensor
   ("Tensors must be CUDA and dense"). Here the "GPU" is whatever device the group is given
   (`meta` for device checks; `cpu` to exercise a strategy's maths with a fake peer).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_CROSSING = {torch.ops.aten.copy_.default, torch.ops.aten._to_copy.default,
             torch.ops.aten.lift_fresh.default, torch.ops.aten._copy_from.default}


class SameDevice(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in _CROSSING:
            devices = {t.device for t in tree_flatten((args, kwargs))[0]
                       if isinstance(t, torch.Tensor) and not (t.device.type == "cpu" and t.dim() == 0)}
            if len(devices) > 1:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at "
                                   f"least two devices, {sorted(map(str, devices))} ({func})")
        return func(*args, **kwargs)


class Refused(RuntimeError):
    pass


class NcclLikeGroup:
    """Patches torch.distributed for a world of `world` ranks whose peers hold exactly this
    rank's values (an all-reduce SUM multiplies by `world`, MAX leaves them)."""

    def __init__(self, monkeypatch: Any, device: str, world: int = 2):
        self.device, self.world, self.calls, self.dtypes = torch.device(device), world, [], []
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: world)
        monkeypatch.setattr(dist, "all_reduce", self.all_reduce)

    def all_reduce(self, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None,
                   async_op: bool = False) -> "_DoneWork | None":
        if tensor.device != self.device:
            raise Refused(f"Tensors must be CUDA and dense (got a {tensor.device} tensor; "
                          f"this group's device is {self.device})")
        self.calls.append(tensor.device)
        self.dtypes.append(tensor.dtype)
        if op == dist.ReduceOp.SUM and tensor.device.type != "meta":
            tensor.mul_(self.world)
        return _DoneWork(tensor) if async_op else None


class _DoneWork:
    """What an async collective returns (c10d Work): here already complete. Its future holds
    [tensor], as ProcessGroupNCCL's WorkNCCL::getFuture does for an all-reduce."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    def wait(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result([self.tensor])
        return fut
