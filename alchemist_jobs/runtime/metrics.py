"""A worker's Prometheus metrics, created from the metric contract and served over HTTP.

Every series carries the contract's base labels (job, run, rank, node, algorithm). The
port is `ALCHEMIST_METRICS_PORT + LOCAL_RANK` where the stack fixes one (Kubernetes), or a
free port otherwise; either way it is recorded in the run directory for discovery. On the
local stack the endpoint listens on 127.0.0.1 only; elsewhere on every interface (pods are
scraped from other hosts). `ALCHEMIST_METRICS_ADDR` overrides either.
"""

from __future__ import annotations

import os
import time
from typing import Any

from alchemist_jobs.metric_contract import BY_NAME, METRICS, SYSTEM_METRICS, Metric


class _Null:
    """Stands in for a metric when metrics are off: every call is a no-op."""

    def __getattr__(self, _name: str) -> Any:
        return self._noop

    def _noop(self, *_a: Any, **_k: Any) -> "_Null":
        return self


_NULL = _Null()


class WorkerMetrics:
    """Children of the contract's metrics, bound to this process's base labels."""

    def __init__(self, labels: dict[str, str], role: str = "worker", enabled: bool = True):
        self.labels = labels
        self.role = role
        self.port: int | None = None
        self._server = None
        self._children: dict[str, Any] = {}
        self.registry = None
        if enabled:
            from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram,
                                           disable_created_metrics)

            # `*_created` timestamps would double every scrape and nothing here reads them.
            disable_created_metrics()
            self.registry = CollectorRegistry(auto_describe=True)
            kinds = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
            for m in METRICS:
                if m.role not in (role, "both") or m.name in SYSTEM_METRICS:
                    continue  # read on scrape by the system collector (runtime/system_metrics.py)
                kw: dict[str, Any] = dict(registry=self.registry, labelnames=m.labels)
                if m.type == "histogram":
                    kw["buckets"] = m.buckets
                # prometheus_client adds `_total` itself; give it the bare counter name.
                name = m.name.removesuffix("_total") if m.type == "counter" else m.name
                self._children[m.name] = kinds[m.type](name, m.help, **kw).labels(**labels)

    def __getitem__(self, name: str) -> Any:
        child = self._children.get(name)
        if child is not None:
            return child
        if name not in BY_NAME:
            raise KeyError(f"{name} is not in the metric contract (alchemist_jobs/metric_contract.py)")
        return _NULL  # metrics off, or a metric of the other role (e.g. a server's on a worker)

    def serve(self, local_rank: int = 0) -> int | None:
        """Start the /metrics HTTP server in a daemon thread; returns the port."""
        if self.registry is None:
            return None
        from prometheus_client import start_http_server

        base = os.environ.get("ALCHEMIST_METRICS_PORT")
        port = int(base) + local_rank if base else 0
        default_addr = "127.0.0.1" if os.environ.get("ALCHEMIST_STACK") == "local" else "0.0.0.0"
        addr = os.environ.get("ALCHEMIST_METRICS_ADDR", default_addr)
        self._server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port = int(self._server.server_port)
        return self.port

    def add_system_collector(self, *_ignored: Any) -> None:
        """Process CPU/memory (psutil) and, where this worker trains on a GPU, its NVML readings.

        They are read when Prometheus scrapes, not sampled by a thread: nothing runs between
        scrapes, and the values are as fresh as the scrape.
        """
        if self.registry is None:
            return
        from alchemist_jobs.runtime.system_metrics import SystemCollector

        self.registry.register(SystemCollector(self.labels, role=self.role))

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None


def now() -> float:
    return time.time()


__all__ = ["WorkerMetrics", "Metric"]
