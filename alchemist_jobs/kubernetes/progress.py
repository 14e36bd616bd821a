"""A worker's progress for `alchemist run --stack X`, described in one line: from rank 0's
progress lines in its pod log (the cluster's counterpart of the local run's progress.json),
or parsed from a Prometheus text exposition."""

from __future__ import annotations

import re

# The metric contract's names (alchemist_jobs/metric_contract.py).
_WANTED = {
    "alchemist_steps_total": "step",
    "alchemist_epoch": "epoch",
    "alchemist_loss": "loss",
    "alchemist_samples_total": "samples",
    "alchemist_restarts": "restarts",
    "alchemist_test_accuracy_ratio": "accuracy",
}
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str, rank: int = 0) -> dict | None:
    """The progress fields of one rank from a Prometheus text exposition, or None if the
    page has none of that rank's series."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m or m.group(1) not in _WANTED:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        if labels.get("rank") != str(rank):
            continue
        try:
            out[_WANTED[m.group(1)]] = float(m.group(3))
        except ValueError:
            continue
    return out or None


def describe(p: dict, epochs: float | None = None) -> str:
    parts = [f"step {int(p.get('step', 0))}"]
    if "epoch" in p:
        parts.append(f"epoch {p['epoch']:.2f}" + (f"/{epochs:g}" if epochs else ""))
    if "loss" in p:
        parts.append(f"loss {p['loss']:.4f}")
    if p.get("accuracy"):
        parts.append(f"test accuracy {p['accuracy']:.4f}")
    if p.get("restarts"):
        parts.append(f"restarts {int(p['restarts'])}")
    return "  ".join(parts)
