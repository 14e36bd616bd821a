"""The metric contract: Prometheus naming conventions, and workers export exactly what it says."""

from __future__ import annotations

import re

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from alchemist_jobs.metric_contract import (BASE_LABELS, EXTERNAL_METRICS, METRICS, SYSTEM_METRICS,
                                            known_series, metric)
from alchemist_jobs.runtime.faults import Faults
from alchemist_jobs.runtime.metrics import WorkerMetrics
from alchemist_jobs.runtime.system_metrics import SystemCollector, nvml_device_for

LABELS = dict(job="digits", run="digits-1", rank="0", node="host-a", algorithm="sync")
SUFFIX = {"seconds": "_seconds", "bytes": "_bytes", "ratio": "_ratio", "watts": "_watts"}


@pytest.mark.parametrize("m", METRICS, ids=lambda m: m.name)
def test_names_follow_prometheus_conventions(m):
    assert re.fullmatch(r"alchemist_[a-z][a-z0-9_]*", m.name)
    assert m.name.endswith("_total") == (m.type == "counter")
    if m.unit in SUFFIX:  # base unit in the name, before `_total`
        assert m.name.removesuffix("_total").endswith(SUFFIX[m.unit]), m.name
    assert m.labels[:len(BASE_LABELS)] == ("job", "run", "rank", "node", "algorithm")
    assert (m.type == "histogram") == bool(m.buckets)
    assert list(m.buckets) == sorted(m.buckets)
    assert m.help.endswith(".")


def test_names_are_unique_and_external_ones_are_declared_with_their_source():
    names = [m.name for m in (*METRICS, *EXTERNAL_METRICS)]
    assert len(names) == len(set(names))
    assert {m.source for m in EXTERNAL_METRICS} == {"dcgm-exporter", "kueue"}
    assert "alchemist_step_seconds_bucket" in known_series()
    assert "DCGM_FI_DEV_GPU_UTIL" in known_series() and "kueue_pending_workloads" in known_series()
    with pytest.raises(KeyError, match="not in the metric contract"):
        metric("alchemist_nope")


def _scrape(wm: WorkerMetrics) -> dict:
    text = generate_latest(wm.registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_a_worker_exports_every_worker_metric_with_the_base_labels():
    wm = WorkerMetrics(LABELS)
    wm.add_system_collector()
    wm["alchemist_steps_total"].inc(3)
    wm["alchemist_step_seconds"].observe(0.02)
    wm["alchemist_server_updates_total"].inc()  # a server metric: a no-op on a worker
    fams = _scrape(wm)
    # prometheus_client names a counter family without `_total`; its samples carry it.
    exported = {f.name + ("_total" if f.type == "counter" else "") for f in fams.values()}
    expected = {m.name for m in METRICS if m.role in ("worker", "both") and m.when not in ("gpu", "script")}
    assert exported == expected
    for fam in fams.values():
        for sample in fam.samples:
            assert {k: sample.labels[k] for k in BASE_LABELS} == LABELS
            assert not sample.name.endswith("_created")
    steps = fams["alchemist_steps"].samples[0]
    assert steps.name == "alchemist_steps_total" and steps.value == 3
    cpu = fams["alchemist_process_cpu_seconds"].samples[0]
    assert cpu.value > 0 and fams["alchemist_process_memory_bytes"].samples[0].value > 10e6


def test_a_server_exports_server_metrics_and_no_training_progress():
    wm = WorkerMetrics(LABELS, role="server")
    wm["alchemist_server_updates_total"].inc()
    exported = {f.name + ("_total" if f.type == "counter" else "") for f in _scrape(wm).values()}
    assert "alchemist_server_updates_total" in exported
    assert "alchemist_steps_total" not in exported


def test_metrics_off_is_a_silent_no_op_but_a_name_outside_the_contract_is_an_error():
    wm = WorkerMetrics(LABELS, enabled=False)
    wm["alchemist_steps_total"].inc()
    wm["alchemist_step_seconds"].observe(1.0)
    wm.add_system_collector()
    assert wm.registry is None and wm.serve() is None
    with pytest.raises(KeyError):
        WorkerMetrics(LABELS)["alchemist_stepz_total"]


def test_workers_serve_metrics_where_the_backend_says(monkeypatch):
    """A worker binds /metrics where ALCHEMIST_METRICS_ADDR says (the local backend sets
    loopback: tests/unit/test_stack_kind.py checks its workers' environment), not by the
    stack's name."""
    monkeypatch.setenv("ALCHEMIST_STACK", "local")
    monkeypatch.setenv("ALCHEMIST_METRICS_ADDR", "127.0.0.1")
    monkeypatch.delenv("ALCHEMIST_METRICS_PORT", raising=False)
    wm = WorkerMetrics(LABELS)
    try:
        port = wm.serve()
        assert wm._server.server_address[0] == "127.0.0.1" and port > 0
    finally:
        wm.close()


# --- GPU (NVML): the hardware is the far edge, so a fake pynvml stands in for the driver ---------


class FakeNVML:
    def __init__(self, count=4):
        self.count = count

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("h", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return ("h", {"GPU-b": 1}[uuid])

    def nvmlDeviceGetIndex(self, h):
        return h[1]

    def nvmlDeviceGetUUID(self, h):  # nvidia-ml-py returns str (bytes in old releases)
        return f"GPU-{h[1]}".encode() if h[1] % 2 else f"GPU-{h[1]}"

    def nvmlDeviceGetUtilizationRates(self, h):
        return type("U", (), {"gpu": 87})()

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("M", (), {"used": 3 * 2**30})()

    def nvmlDeviceGetPowerUsage(self, h):
        return 250_500  # milliwatts


def test_gpu_device_of_a_rank_follows_cuda_visible_devices():
    assert nvml_device_for(1, None, 4) == ("index", 1)
    assert nvml_device_for(4, None, 4) is None
    assert nvml_device_for(1, "2,3", 8) == ("index", 3)
    assert nvml_device_for(0, "GPU-b", 8) == ("uuid", "GPU-b")
    assert nvml_device_for(1, "0", 8) is None
    assert nvml_device_for(0, "", 2) == ("index", 0)


def _collect(collector) -> dict:
    return {s.name: s for fam in collector.collect() for s in fam.samples}


def test_gpu_metrics_only_while_the_worker_trains_on_its_gpu(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-b")
    training = {"on": False}
    c = SystemCollector(LABELS, nvml=FakeNVML(), uses_gpu=lambda: training["on"])
    assert not any(n.startswith("alchemist_gpu") for n in _collect(c))
    training["on"] = True
    got = _collect(c)
    assert got["alchemist_gpu_utilization_ratio"].value == pytest.approx(0.87)
    assert got["alchemist_gpu_memory_used_bytes"].value == 3 * 2**30
    assert got["alchemist_gpu_power_watts"].value == pytest.approx(250.5)
    assert got["alchemist_gpu_power_watts"].labels == dict(LABELS, gpu="1", UUID="GPU-1")
    assert {n for n in got} >= {metric(n).name for n in SYSTEM_METRICS if n != "alchemist_process_cpu_seconds_total"}


def test_a_failing_nvml_never_fails_the_scrape():
    class Broken(FakeNVML):
        def nvmlDeviceGetUtilizationRates(self, h):
            raise RuntimeError("GPU is lost")

    got = _collect(SystemCollector(LABELS, nvml=Broken(), uses_gpu=lambda: True))
    assert "alchemist_process_memory_bytes" in got
    assert not any(n.startswith("alchemist_gpu") for n in got)


def test_stall_knob_stalls_one_rank_after_its_step(monkeypatch):
    env = {"ALCHEMIST_FAULT_STALL_AT_STEP": "3", "ALCHEMIST_FAULT_STALL_SECONDS": "0.3",
           "ALCHEMIST_FAULT_STALL_RANK": "1"}
    assert not Faults(0, env).active and not Faults(1, {}).active
    f = Faults(1, env)
    import time

    t0 = time.monotonic()
    f.after_step(2)
    assert time.monotonic() - t0 < 0.1
    f.after_step(3)
    assert time.monotonic() - t0 >= 0.3


def test_exposition_is_exactly_prometheus_clients_for_the_same_updates():
    """The cheap children must expose what prometheus_client's own metric objects would."""
    from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram,
                                   disable_created_metrics, enable_created_metrics)

    disable_created_metrics()  # ours never emit `*_created` timestamps
    ref_registry, ref = CollectorRegistry(), {}
    kinds = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
    for m in METRICS:
        if m.role in ("worker", "both") and m.name not in SYSTEM_METRICS and m.when != "script":
            kw = dict(registry=ref_registry, labelnames=m.labels)
            if m.buckets:
                kw["buckets"] = m.buckets
            name = m.name.removesuffix("_total") if m.type == "counter" else m.name
            ref[m.name] = kinds[m.type](name, m.help, **kw).labels(**LABELS)
    wm = WorkerMetrics(LABELS)
    for x in (ref, wm):
        x["alchemist_steps_total"].inc()
        x["alchemist_samples_total"].inc(64)
        x["alchemist_loss"].set(0.25)
        x["alchemist_loss"].set(float("nan"))
        for s in (0.0005, 0.001, 0.3, 100.0):  # on a bound, inside, beyond the last
            x["alchemist_step_seconds"].observe(s)
        x["alchemist_staleness_steps"].observe(0)
    lines = lambda reg: sorted(generate_latest(reg).decode().splitlines())  # noqa: E731
    try:
        assert lines(wm.registry) == lines(ref_registry)
    finally:
        enable_created_metrics()
    with pytest.raises(ValueError):
        wm["alchemist_steps_total"].inc(-1)
