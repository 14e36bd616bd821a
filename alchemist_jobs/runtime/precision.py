"""The worker's device and numeric precision: bf16 autocast and TF32, as the spec asks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from alchemist_jobs.runtime.devices import select_device
from alchemist_jobs.spec import JobSpec


class Precision:
    """`precision.autocast: bf16` runs forward in bfloat16 (weights, gradients and the
    optimizer stay float32); `precision.tf32: true` lets float32 matmuls and convolutions
    use TF32 tensor cores. Unset, both are on for a GPU, as nanoGPT and torchtitan train by
    default (bf16 only where the GPU computes it natively: compute capability 8.0, Ampere,
    and newer; older GPUs emulate it slowly), and off on CPU, where bf16 is rarely faster and
    TF32 does nothing. `{tf32: false, autocast: none}` turns both off."""

    def __init__(self, spec: JobSpec, device: torch.device):
        self.device = device
        self.autocast_mode, self.tf32 = resolve(spec, device)
        self.dtype = torch.bfloat16 if self.autocast_mode == "bf16" else None
        if device.type == "cuda":
            # Set per process, before the first matmul; "highest" is torch's default (no TF32).
            torch.backends.cuda.matmul.allow_tf32 = self.tf32
            torch.backends.cudnn.allow_tf32 = self.tf32
            torch.set_float32_matmul_precision("high" if self.tf32 else "highest")

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if self.dtype is None:
            yield
            return
        with torch.autocast(device_type=self.device.type, dtype=self.dtype):
            yield

    @staticmethod
    def device_for(spec: JobSpec, local_rank: int) -> torch.device:
        """cuda:<LOCAL_RANK> when the spec asks for GPUs and one is usable; CPU for CPU jobs
        (which then never initialise CUDA); DeviceError otherwise (unless gpu_fallback)."""
        gpu = spec.resources.gpu
        if gpu == 0:
            return torch.device("cpu")  # no CUDA query at all: a CPU job leaves GPUs alone
        available = torch.cuda.is_available()
        count = torch.cuda.device_count() if available else 0
        device = torch.device(select_device(gpu, local_rank, spec.resources.gpu_fallback, available, count))
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:
            print(
                f"alchemist: resources.gpu={gpu} but no usable GPU; training on CPU "
                "(resources.gpu_fallback=true)",
                flush=True,
            )
        return device


def resolve(spec: JobSpec, device: torch.device) -> tuple[str, bool]:
    """(autocast, tf32) for this device: the spec's fields where set, else the defaults above."""
    p, gpu = spec.precision, device.type == "cuda"
    tf32 = p.tf32 if p.tf32 is not None else gpu
    if p.autocast is not None:
        return p.autocast, tf32
    native_bf16 = gpu and torch.cuda.get_device_capability(device) >= (8, 0)
    return ("bf16" if native_bf16 else "none"), tf32
