"""The convergence model behind `alchemist plan --auto`: steps to a target quality, and the
final quality, as functions of the algorithm, tau, the wire precision and overlap.

Calibrated from short measured runs (planner/auto.py runs them), fitted by least squares:

    log(steps_to_target) = b[family] + a[family] * log2(tau) + c * half + d * overlap
    final_accuracy       = the same form, without the log

`family` is sync (plain or fp16/bf16 on the wire), powersgd-r<rank> (each rank its own), bmuf
or easgd; `half` is 1 when the wire carries 16-bit values; `overlap` is 1 when a block
algorithm applies each exchange one block late. A slope a[family] is fitted only where runs
of that family at two or more taus exist; c and d only where runs with and without exist.
What the runs did not vary, the model does not extrapolate: a candidate needing a term that
was not fitted is not predicted (`predictable`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Features:
    """What the convergence model knows of a candidate."""

    family: str  # sync, powersgd-r<rank>, bmuf or easgd
    tau: int = 1
    half: bool = False  # 16-bit values on the wire
    overlap: bool = False

    @property
    def blocks(self) -> bool:
        return self.family in ("bmuf", "easgd")


@dataclass(frozen=True)
class Observation:
    """One calibration run: its candidate and what it measured (steps None: never reached)."""

    features: Features
    steps_to_target: float | None
    final_accuracy: float


@dataclass(frozen=True)
class Fit:
    """The fitted terms, by name (b:<family>, a:<family>, half, overlap), for steps (in log)
    and for final accuracy; `rms_log` is the steps fit's residual (0 with as many runs as
    terms)."""

    steps: dict[str, float]
    accuracy: dict[str, float]
    rms_log: float
    runs: int

    def predictable(self, f: Features) -> bool:
        return all(t in self.steps for t in _terms(f))

    def steps_to_target(self, f: Features) -> float:
        return math.exp(sum(self.steps[t] * x for t, x in _terms(f).items()))

    def final_accuracy(self, f: Features) -> float:
        return sum(self.accuracy[t] * x for t, x in _terms(f).items())


def _terms(f: Features) -> dict[str, float]:
    """The model's terms for one candidate, with their values (zero-valued terms left out, so
    a candidate at tau 1 or without a 16-bit wire needs no slope or half term)."""
    out = {f"b:{f.family}": 1.0}
    if f.blocks and f.tau > 1:
        out[f"a:{f.family}"] = math.log2(f.tau)
    if f.half:
        out["half"] = 1.0
    if f.overlap:
        out["overlap"] = 1.0
    return out


def fit(observations: list[Observation]) -> Fit:
    """Least squares over the runs that reached the target (the accuracy fit over every run).
    A family whose runs never reached the target gets no steps terms: it is not predicted."""
    reached = [o for o in observations if o.steps_to_target is not None and o.steps_to_target > 0]
    steps = _solve(reached, [math.log(o.steps_to_target or 1.0) for o in reached])
    accuracy = _solve(observations, [o.final_accuracy for o in observations])
    rms = 0.0
    if reached:
        resid = [
            math.log(o.steps_to_target or 1.0)
            - sum(steps.get(t, 0.0) * x for t, x in _terms(o.features).items())
            for o in reached
        ]
        rms = math.sqrt(sum(r * r for r in resid) / len(resid))
    return Fit(steps=steps, accuracy=accuracy, rms_log=rms, runs=len(observations))


def _solve(observations: list[Observation], y: list[float]) -> dict[str, float]:
    """The terms the observations vary, least squares; a slope needs two taus of its family,
    the half and overlap terms runs with and without."""
    taus: dict[str, set[int]] = {}
    for o in observations:
        taus.setdefault(o.features.family, set()).add(o.features.tau)
    names: list[str] = []
    for o in observations:
        for t in _terms(o.features):
            if t in names:
                continue
            if t.startswith("a:") and len(taus[t[2:]]) < 2:
                continue
            if t == "half" and all(o2.features.half for o2 in observations):
                continue
            if t == "overlap" and all(o2.features.overlap for o2 in observations):
                continue
            names.append(t)
    if not names:
        return {}
    x = np.array([[_terms(o.features).get(t, 0.0) for t in names] for o in observations])
    solution, *_ = np.linalg.lstsq(x, np.array(y), rcond=None)
    # A term no run separates from the others (a rank-deficient design) is not trusted.
    if np.linalg.matrix_rank(x) < len(names):
        return {}
    return {t: float(v) for t, v in zip(names, solution, strict=True)}
