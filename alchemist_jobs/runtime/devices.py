"""Which device each worker trains on, checked before anything starts.

`resources.gpu` is GPUs per node, one per rank: `procs_per_node` ranks on `gpu` devices.
Locally, several torchrun agents (`nodes > 1`) share one machine and each restarts
LOCAL_RANK at 0, so each agent gets its own `CUDA_VISIBLE_DEVICES` slice and its ranks use
`cuda:<LOCAL_RANK>` inside it: no two ranks ever land on one device, which NCCL refuses
("Duplicate GPU detected", nccl src/init.cc).
"""

from __future__ import annotations

import os
from collections.abc import Sequence


class DeviceError(RuntimeError):
    """The spec asks for GPUs this machine or pod cannot give; one line, no traceback."""


def visible_devices(environ: dict[str, str] | None = None, count: int | None = None) -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES' entries, else 0..count-1."""
    env = os.environ if environ is None else environ
    text = env.get("CUDA_VISIBLE_DEVICES")
    if text is not None:
        return [e.strip() for e in text.split(",") if e.strip() and e.strip() != "-1"]
    if count is None:
        count = _nvml_count()
    return [str(i) for i in range(count)]


def _nvml_count() -> int:
    """GPUs the driver sees, without initialising CUDA in this (launcher) process."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no library, no driver: no GPU
        return 0


def plan_local_devices(gpu: int, nodes: int, procs_per_node: int, visible: Sequence[str]) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES for each local node (torchrun agent), or None for CPU jobs.

    Raises DeviceError naming the field when the machine has too few devices, or when
    ranks would share one.
    """
    if gpu == 0:
        return [None] * nodes
    if procs_per_node > gpu:
        raise DeviceError(
            f"resources.gpu={gpu} with procs_per_node={procs_per_node}: each rank needs its own "
            f"GPU (NCCL refuses two ranks on one device); set resources.gpu >= procs_per_node"
        )
    need = gpu * nodes
    if need > len(visible):
        seen = ",".join(visible) or "none"
        raise DeviceError(
            f"resources.gpu={gpu} x nodes={nodes} needs {need} GPUs; this machine has "
            f"{len(visible)} visible ({seen}); lower resources.gpu or nodes, or set resources.gpu=0"
        )
    return [",".join(visible[k * gpu : (k + 1) * gpu]) for k in range(nodes)]


def select_device(gpu: int, local_rank: int, fallback: bool, cuda_available: bool, device_count: int) -> str:
    """The device string a worker trains on; DeviceError when the spec's GPU is missing."""
    if gpu == 0:
        return "cpu"
    if cuda_available and local_rank < device_count:
        return f"cuda:{local_rank}"
    if fallback:
        return "cpu"
    why = (
        "no usable GPU (CUDA unavailable)"
        if not cuda_available
        else f"LOCAL_RANK {local_rank} but only {device_count} visible GPU(s)"
    )
    raise DeviceError(
        f"resources.gpu={gpu}: {why}; set resources.gpu=0 to train on CPU, or "
        f"resources.gpu_fallback=true to allow it"
    )
