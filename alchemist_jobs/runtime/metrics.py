"""A worker's Prometheus metrics, created from the metric contract and served over HTTP.

Every series carries the contract's base labels (job, run, rank, node, algorithm). The
port is `ALCHEMIST_METRICS_PORT + LOCAL_RANK` where the stack fixes one (Kubernetes), or a
free port otherwise; either way it is recorded in the run directory for discovery. On the
local stack the endpoint listens on 127.0.0.1 only; elsewhere on every interface (pods are
scraped from other hosts). `ALCHEMIST_METRICS_ADDR` overrides either.

The training loop updates a dozen metrics every step, so updates are plain attribute writes
(counters and histograms under a lock, for writers on several threads), several times cheaper
than prometheus_client's metric objects; a collector turns them into metric families only
when Prometheus scrapes. Exposition is prometheus_client's, byte for byte the same format.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

from alchemist_jobs import environment as E
from alchemist_jobs.metric_contract import BY_NAME, METRICS, SYSTEM_METRICS, Metric
from alchemist_jobs.runtime.system_metrics import SystemCollector


class _Null:
    """Stands in for a metric when metrics are off: every call is a no-op."""

    def __getattr__(self, _name: str) -> Any:
        return self._noop

    def _noop(self, *_a: Any, **_k: Any) -> _Null:
        return self


_NULL = _Null()


class Counter:
    __slots__ = ("value", "_lock")

    def __init__(self) -> None:
        self.value = 0.0
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters only go up; use a gauge")
        with self._lock:
            self.value += amount


class Gauge:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)  # one reference assignment: atomic, no lock needed

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class Histogram:
    __slots__ = ("bounds", "counts", "sum", "_lock")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.bounds, value)  # buckets are `le`: upper bound inclusive
        with self._lock:
            self.counts[i] += 1
            self.sum += value

    @contextlib.contextmanager
    def time(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.observe(time.perf_counter() - t0)

    def snapshot(self) -> tuple[list[int], float]:
        with self._lock:
            return list(self.counts), self.sum


class _ContractCollector:
    """Reads the children at scrape time into prometheus_client metric families."""

    def __init__(self, metrics: list[tuple[Metric, Any]], labels: dict[str, str]):
        self.metrics = metrics
        self.keys, self.values = list(labels), list(labels.values())

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        for m, child in self.metrics:
            if m.type == "counter":
                counter = CounterMetricFamily(m.name, m.help, labels=self.keys)
                counter.add_metric(self.values, child.value)
                yield counter
            elif m.type == "gauge":
                gauge = GaugeMetricFamily(m.name, m.help, labels=self.keys)
                gauge.add_metric(self.values, child.value)
                yield gauge
            else:
                counts, total = child.snapshot()
                cumulative, buckets = 0, []
                for bound, n in zip((*child.bounds, math.inf), counts):
                    cumulative += n
                    buckets.append(("+Inf" if bound == math.inf else _le(bound), cumulative))
                histogram = HistogramMetricFamily(m.name, m.help, labels=self.keys)
                histogram.add_metric(self.values, buckets, total)
                yield histogram


def _le(bound: float) -> str:
    return repr(float(bound))  # prometheus_client's spelling: 0.005, 1.0, 10.0


class WorkerMetrics:
    """Children of the contract's metrics, bound to this process's base labels."""

    def __init__(self, labels: dict[str, str], role: str = "worker", enabled: bool = True):
        self.labels = labels
        self.role = role
        self.port: int | None = None
        self._server: Any = None  # prometheus_client's WSGIServer, once serving
        self._children: dict[str, Any] = {}
        self.registry = None
        if enabled:
            from prometheus_client import CollectorRegistry

            self.registry = CollectorRegistry(auto_describe=True)
            made = []
            for m in METRICS:
                if m.role not in (role, "both") or m.name in SYSTEM_METRICS or m.when == "script":
                    continue  # read on scrape by their own collectors (system_metrics, script_report)
                child = (
                    Counter()
                    if m.type == "counter"
                    else Gauge()
                    if m.type == "gauge"
                    else Histogram(m.buckets)
                )
                self._children[m.name] = child
                made.append((m, child))
            self.registry.register(_ContractCollector(made, labels))

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

        base = E.METRICS_PORT.get()
        port = base + local_rank if base is not None else 0
        # The backend sets ALCHEMIST_METRICS_ADDR where every interface is wrong (a local
        # run: loopback only); on a cluster the pod's own address is scraped.
        addr = E.METRICS_ADDR.get(default="0.0.0.0") or "0.0.0.0"
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self._server = server
        self.port = int(server.server_port)
        return self.port

    def add_system_collector(self, *_ignored: Any) -> None:
        """Process CPU/memory (psutil) and, where this worker trains on a GPU, its NVML readings.

        They are read when Prometheus scrapes, not sampled by a thread: nothing runs between
        scrapes, and the values are as fresh as the scrape.
        """
        if self.registry is None:
            return

        self.registry.register(SystemCollector(self.labels, role=self.role))

    def totals(self, prefix: str = "alchemist_") -> dict[str, float]:
        """This process's contract samples summed by sample name (histograms as _count and
        _sum): what a last scrape would have read, for the run's records once it has exited."""
        if self.registry is None:
            return {}
        out: dict[str, float] = {}
        for family in self.registry.collect():
            for s in family.samples:
                if s.name.startswith(prefix) and not s.name.endswith("_bucket"):
                    out[s.name] = out.get(s.name, 0.0) + s.value
        return out

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None


def now() -> float:
    return time.time()


__all__ = ["WorkerMetrics", "Metric"]
