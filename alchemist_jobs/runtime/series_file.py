"""A run's series at step resolution: series.jsonl in the run directory, one JSON object per
optimizer step (`step`, `loss`, `samples_per_s`, `communication_s`, `metrics`, `time`),
appended by rank 0 of the trainer and of a script alike; the dashboard charts it during and
after the run (ui/series.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SERIES_FILE = "series.jsonl"
SERIES_MAX_BYTES = 64 << 20  # beyond this a run's series is not written further


def append_series(run_dir: Path, points: list[dict[str, Any]]) -> None:
    """Append `points`; a chart is an aid: nothing here may stop training."""
    if not points:
        return
    path = Path(run_dir) / SERIES_FILE
    try:
        if path.exists() and path.stat().st_size > SERIES_MAX_BYTES:
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with open(fd, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(p, allow_nan=False) + "\n" for p in points))
    except (OSError, ValueError):
        pass
