"""Process CPU and memory (psutil) and GPU utilisation, memory and power (NVML) samples.

NVML is optional: without an NVIDIA driver the GPU gauges are simply not exported.
"""

from __future__ import annotations

import time
from typing import Any

from alchemist_jobs.metric_contract import metric


class SystemSampler:
    def __init__(self, registry: Any, labels: dict[str, str]):
        import psutil
        from prometheus_client import Gauge

        self.labels = labels
        self.proc = psutil.Process()
        self.proc.cpu_percent(None)  # prime: the first call always returns 0
        m_cpu, m_mem = metric("alchemist_process_cpu_ratio"), metric("alchemist_process_memory_bytes")
        self.cpu = Gauge(m_cpu.name, m_cpu.help, m_cpu.labels, registry=registry).labels(**labels)
        self.mem = Gauge(m_mem.name, m_mem.help, m_mem.labels, registry=registry).labels(**labels)
        self.gpus: list[tuple[str, Any]] = []
        self._nvml = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self.gpus = [(str(i), pynvml.nvmlDeviceGetHandleByIndex(i))
                         for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no driver, no GPU, or no library: CPU-only host
            self.gpus = []
        if self.gpus:
            g = {n: metric(n) for n in ("alchemist_gpu_utilization_ratio",
                                        "alchemist_gpu_memory_used_bytes",
                                        "alchemist_gpu_power_watts")}
            self.gpu_gauges = {n: Gauge(m.name, m.help, m.labels, registry=registry)
                               for n, m in g.items()}

    def sample(self) -> None:
        self.cpu.set(self.proc.cpu_percent(None) / 100.0)
        self.mem.set(self.proc.memory_info().rss)
        nv = self._nvml
        for idx, h in self.gpus:
            try:
                util = nv.nvmlDeviceGetUtilizationRates(h)
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                power_mw = nv.nvmlDeviceGetPowerUsage(h)
            except Exception:
                continue
            lab = dict(self.labels, gpu=idx)
            self.gpu_gauges["alchemist_gpu_utilization_ratio"].labels(**lab).set(util.gpu / 100.0)
            self.gpu_gauges["alchemist_gpu_memory_used_bytes"].labels(**lab).set(mem.used)
            self.gpu_gauges["alchemist_gpu_power_watts"].labels(**lab).set(power_mw / 1000.0)

    def run_forever(self, interval: float) -> None:
        while True:
            try:
                self.sample()
            except Exception:
                pass  # a failed sample must never take a worker down
            time.sleep(interval)
