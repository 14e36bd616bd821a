"""The worker's device and numeric precision: bf16 autocast and TF32, as the spec asks."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from alchemist_jobs.runtime.devices import select_device
from alchemist_jobs.spec import JobSpec


class Precision:
    """`precision.autocast: bf16` runs forward in bfloat16 (weights, gradients and the
    optimizer stay float32); `precision.tf32: true` lets float32 matmuls and convolutions
    use TF32 tensor cores. Both act on GPUs; on CPU, bf16 autocast works too but is rarely
    faster, and TF32 does nothing."""

    def __init__(self, spec: JobSpec, device: torch.device):
        p = spec.precision
        self.device = device
        self.dtype = torch.bfloat16 if p.autocast == "bf16" else None
        if device.type == "cuda":
            # Set per process, before the first matmul; "highest" is torch's default (no TF32).
            torch.backends.cuda.matmul.allow_tf32 = p.tf32
            torch.backends.cudnn.allow_tf32 = p.tf32
            torch.set_float32_matmul_precision("high" if p.tf32 else "highest")

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
        device = torch.device(select_device(gpu, local_rank, spec.resources.gpu_fallback,
                                            available, count))
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:
            print(f"alchemist: resources.gpu={gpu} but no usable GPU; training on CPU "
                  "(resources.gpu_fallback=true)", flush=True)
        return device
