"""A run's chart series: its TensorBoard event files and the series.jsonl its rank 0 appends
(the trainer's and a script's alike: one point per step with loss, samples/s, communication
seconds and every metric a script reported; runtime/series_file.py), read from the run
directory during and after the run; topped up with samples of its live progress each time
the page asks."""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from pathlib import Path
from typing import Any

from alchemist_jobs.rundir import read_json
from alchemist_jobs.runtime.series_file import SERIES_FILE  # rank 0 of a run appends it

# TensorBoard tags the trainer writes (alchemist_jobs/runtime/trainer.py) -> chart.
TB_TAGS = {"train/loss": "loss", "train/samples_per_s": "throughput", "test/accuracy": "accuracy"}
# Sample fields -> chart.
SAMPLE_FIELDS = {
    "loss": "loss",
    "samples_per_s": "throughput",
    "accuracy": "accuracy",
    "communication_s": "communication",
}
CHARTS = ("loss", "accuracy", "throughput", "communication")
MAX_POINTS = 2000  # per chart; older points are thinned, never the newest
MAX_RUNS = 64  # runs whose series are kept in memory
# series.jsonl fields -> chart.
SERIES_FIELDS = {"loss": "loss", "samples_per_s": "throughput", "communication_s": "communication"}
_METRIC = re.compile(
    r"^(alchemist_communication_seconds_total|alchemist_test_accuracy_ratio)"
    r"\{([^}]*)\}\s+(\S+)",
    re.M,
)


def metrics_url(run_dir: Path, worker: str = "rank-0") -> str | None:
    """Where this machine reads a worker's /metrics: through the run's metrics bridge (its
    port in run.json) when the run has a network of its own (private_net.py), else the port
    in workers/<worker>.json; None when it serves none (yet)."""
    rec = read_json(run_dir / "workers" / f"{worker}.json") or {}
    port = rec.get("metrics_port")
    if not isinstance(port, int):
        return None
    bridge = (read_json(run_dir / "run.json") or {}).get("metrics_bridge")
    if isinstance(bridge, int) and not isinstance(bridge, bool):
        return f"http://127.0.0.1:{bridge}/metrics/{worker}"
    return f"http://127.0.0.1:{port}/metrics"


def scrape_rank0(run_dir: Path, timeout: float = 0.5) -> dict[str, float] | None:
    """Rank 0's communication seconds and test accuracy from its own /metrics on this machine
    (metrics_url); None when it serves none (yet)."""
    url = metrics_url(run_dir)
    if url is None:
        return None
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            text = r.read(1 << 20).decode(errors="replace")
    except (OSError, ValueError):
        return None
    out: dict[str, float] = {}
    for name, labels, value in _METRIC.findall(text):
        if 'rank="0"' not in labels:
            continue
        key = "communication_s" if name.endswith("seconds_total") else "accuracy"
        try:
            out[key] = float(value)
        except ValueError:
            continue
    if out.get("accuracy") == 0.0:  # not evaluated yet
        out.pop("accuracy")
    return out or None


def read_tensorboard(folder: Path) -> dict[str, dict[float, float]]:
    """{chart: {step: value}} from every event file in `folder` (all attempts)."""
    out: dict[str, dict[float, float]] = {c: {} for c in CHARTS}
    files = sorted(folder.glob("events.out.tfevents.*")) if folder.is_dir() else []
    if not files:
        return out
    # Imported here: a second or two, and only a run page needs it.
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    for path in files:
        try:
            for event in EventFileLoader(str(path)).Load():
                for v in event.summary.value:
                    chart = TB_TAGS.get(v.tag)
                    if chart is None:
                        continue
                    value = (
                        v.simple_value
                        if v.HasField("simple_value")
                        else float(tensor_util.make_ndarray(v.tensor))
                    )
                    out[chart][float(event.step)] = float(value)
        except Exception:  # a file being written ends mid-record: keep what was read
            continue
    return out


def read_series(
    path: Path, offset: int, charts: dict[str, dict[float, float]], metrics: dict[str, dict[float, float]]
) -> int:
    """Add the points of series.jsonl from `offset` on (whole lines only) to `charts` and
    `metrics`; the offset to read from next time. A later line for a step wins (a restarted
    attempt steps again)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    end = data.rfind(b"\n") + 1
    for raw in data[:end].splitlines():
        try:
            point = json.loads(raw)
            step = float(point["step"])
        except (ValueError, KeyError, TypeError):
            continue
        for field, chart in SERIES_FIELDS.items():
            value = point.get(field)
            if isinstance(value, (int, float)) and value == value:
                charts[chart][step] = float(value)
        for name, value in (point.get("metrics") or {}).items():
            if isinstance(name, str) and isinstance(value, (int, float)) and value == value:
                metrics.setdefault(name, {})[step] = float(value)
                if name == "accuracy":
                    charts["accuracy"][step] = float(value)
    return offset + end


class SeriesBook:
    """Series per run, kept between requests so live samples accumulate into a chart."""

    def __init__(self) -> None:
        self._runs: dict[str, dict[str, dict[float, float]]] = {}
        self._final: set[str] = set()  # runs whose events were reread after they ended
        self._metrics: dict[str, dict[str, dict[float, float]]] = {}  # reported, by name
        self._offsets: dict[str, int] = {}  # how far each run's series.jsonl was read
        self._lock = threading.Lock()

    def update(
        self, key: str, tb_dir: Path | None, sample: dict[str, Any] | None, final: bool
    ) -> dict[str, Any]:
        """{chart: points} for CHARTS, and "metrics": {name: points} (a script's reports).
        A local run's series.jsonl lies beside its `tb_dir`."""
        with self._lock:
            book = self._runs.get(key)
            done = key in self._final
            metrics = self._metrics.get(key, {})
            offset = self._offsets.get(key, 0) if book is not None else 0
        if book is None or final and not done:
            # Reread the events: the whole history on the first look, the flushed final
            # points at the end.
            fresh = read_tensorboard(tb_dir) if tb_dir is not None else {c: {} for c in CHARTS}
            if book is not None:
                for chart in CHARTS:
                    fresh[chart] = {**book[chart], **fresh[chart]}
            book = fresh
        if offset == 0:
            metrics = {}
        if tb_dir is not None:
            offset = read_series(tb_dir.parent / SERIES_FILE, offset, book, metrics)
        if sample and sample.get("step") is not None:
            step = float(sample["step"])
            for field, chart in SAMPLE_FIELDS.items():
                value = sample.get(field)
                if isinstance(value, (int, float)) and value == value:  # not NaN
                    book[chart][step] = float(value)
            for name, value in (sample.get("metrics") or {}).items():
                if isinstance(value, (int, float)) and value == value:
                    metrics.setdefault(name, {})[step] = float(value)
                    if name == "accuracy":
                        book["accuracy"][step] = float(value)
        with self._lock:
            self._runs[key], self._metrics[key], self._offsets[key] = book, metrics, offset
            if final:
                self._final.add(key)
            while len(self._runs) > MAX_RUNS:
                self._final.discard(old := next(iter(self._runs)))
                self._runs.pop(old)
                self._metrics.pop(old, None)
                self._offsets.pop(old, None)
        out: dict[str, Any] = {chart: _thin(sorted(book[chart].items())) for chart in CHARTS}
        out["metrics"] = {name: _thin(sorted(points.items())) for name, points in sorted(metrics.items())}
        return out


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_POINTS:
        return points
    stride = len(points) / (MAX_POINTS - 1)
    return [points[int(i * stride)] for i in range(MAX_POINTS - 1)] + [points[-1]]
