"""Process CPU and memory (psutil) and the worker's GPU utilisation, memory and power (NVML).

A Prometheus collector read at scrape time: no sampling thread, no cost between scrapes.
GPU series appear only while this process trains on a GPU (CUDA initialised by the loop), so a
CPU job on a GPU host never reports an idle GPU; without an NVIDIA driver they never appear.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

from alchemist_jobs.metric_contract import metric


def nvml_device_for(
    local_rank: int, cuda_visible_devices: str | None, device_count: int
) -> tuple[str, int | str] | None:
    """Which NVML device the worker with this LOCAL_RANK trains on.

    The loop uses `cuda:<LOCAL_RANK>`, an index into CUDA_VISIBLE_DEVICES when that is set
    (entries are host indices or GPU-/MIG- UUIDs), else into all devices NVML sees.
    Returns ("index", i), ("uuid", u) or None when the rank has no device.
    """
    if cuda_visible_devices is not None and cuda_visible_devices.strip() != "":
        entries = [e.strip() for e in cuda_visible_devices.split(",") if e.strip()]
        if not 0 <= local_rank < len(entries):
            return None
        entry = entries[local_rank]
        return ("index", int(entry)) if entry.isdigit() else ("uuid", entry)
    return ("index", local_rank) if 0 <= local_rank < device_count else None


def _load_nvml() -> Any | None:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no library, no driver, no GPU: a CPU-only host
        return None


class SystemCollector:
    """Collects the contract's process and GPU metrics for one worker or server process."""

    def __init__(
        self,
        labels: dict[str, str],
        role: str = "worker",
        nvml: Any | None = None,
        uses_gpu: Any | None = None,
    ):
        import psutil

        self.labels = dict(labels)
        self.proc = psutil.Process()
        self._nvml = nvml
        self._nvml_tried = nvml is not None
        self._handle: tuple[str, str, Any] | None = None  # (index, UUID, NVML handle)
        # Whether this process trains on a GPU; by default, whether it has initialised CUDA.
        self._uses_gpu = uses_gpu or _cuda_initialised
        self._names = {
            n: metric(n)
            for n in (
                "alchemist_process_cpu_seconds_total",
                "alchemist_process_memory_bytes",
                "alchemist_gpu_utilization_ratio",
                "alchemist_gpu_memory_used_bytes",
                "alchemist_gpu_power_watts",
            )
        }

    def describe(self) -> list:
        return []  # keeps the registry from calling collect() (and NVML) at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        keys, values = list(self.labels), list(self.labels.values())
        m = self._names["alchemist_process_cpu_seconds_total"]
        cpu = CounterMetricFamily(m.name, m.help, labels=keys)
        t = self.proc.cpu_times()
        cpu.add_metric(values, t.user + t.system)
        yield cpu
        m = self._names["alchemist_process_memory_bytes"]
        mem = GaugeMetricFamily(m.name, m.help, labels=keys)
        mem.add_metric(values, self.proc.memory_info().rss)
        yield mem
        yield from self._gpu(keys, values)

    def _gpu(self, keys: list[str], values: list[str]) -> Iterator[Any]:
        if not self._uses_gpu():
            return
        reading = self._read_gpu()
        if reading is None:
            return
        from prometheus_client.core import GaugeMetricFamily

        gpu, uuid, util, used, power_w = reading
        for name, value in (
            ("alchemist_gpu_utilization_ratio", util),
            ("alchemist_gpu_memory_used_bytes", used),
            ("alchemist_gpu_power_watts", power_w),
        ):
            m = self._names[name]
            fam = GaugeMetricFamily(m.name, m.help, labels=keys + ["gpu", "UUID"])
            fam.add_metric(values + [gpu, uuid], value)
            yield fam

    def _read_gpu(self) -> tuple[str, str, float, float, float] | None:
        """(gpu label, UUID, utilisation ratio, memory used bytes, power watts), or None.

        `gpu` is NVML's index as this container sees it; DCGM's exporter labels the host's
        index. The UUID is the same everywhere: dashboards join the two on it."""
        if not self._nvml_tried:
            self._nvml_tried = True
            self._nvml = _load_nvml()
        nv = self._nvml
        if nv is None:
            return None
        try:
            if self._handle is None:
                which = nvml_device_for(
                    int(os.environ.get("LOCAL_RANK", 0)),
                    os.environ.get("CUDA_VISIBLE_DEVICES"),
                    nv.nvmlDeviceGetCount(),
                )
                if which is None:
                    return None
                kind, key = which
                handle = (
                    nv.nvmlDeviceGetHandleByIndex(key)
                    if kind == "index"
                    else nv.nvmlDeviceGetHandleByUUID(key)
                )
                uuid = nv.nvmlDeviceGetUUID(handle)
                uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
                self._handle = (str(nv.nvmlDeviceGetIndex(handle)), uuid, handle)
            gpu, uuid, h = self._handle
            util = nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
            used = float(nv.nvmlDeviceGetMemoryInfo(h).used)
            power_w = nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # NVML reports milliwatts
        except Exception:
            return None  # a failed reading must never fail the scrape or the worker
        return gpu, uuid, util, used, power_w


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")  # never import torch just to ask
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        return False
