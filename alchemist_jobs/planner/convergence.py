"""The convergence model behind `alchemist plan --auto`: steps to a target quality, and the
final quality, as functions of the algorithm, tau, the wire precision and overlap.

Calibrated from short measured runs (planner/auto.py runs them), fitted by least squares,
each group on its own runs:

    log(steps_to_target) = base[group](tau) + half[group] * half
    final_accuracy       = the same form, without the log

`group` is the family (sync plain or fp16/bf16 on the wire, powersgd-r<rank> with each rank
its own, bmuf or easgd), and for bmuf and easgd with `overlap` (each exchange applied one
block late) a group of its own: bmuf+overlap, easgd+overlap. `half` is 1 when the wire carries
16-bit values. `base` is one value for the sync families; for the block groups it is piecewise
linear in log2(tau) between the taus the runs measured (`@<tau>` terms: a candidate between
two of them takes both, weighted by where it lies).

Every term belongs to one group, because they respond differently: overlap costs bmuf's
block momentum far more than easgd, and more at some taus than at others (bmuf with overlap
lost 4.5 points at tau 16 and 0.5 at tau 39 in the same job), and a 16-bit wire rounds
gradients in sync but parameters in the block algorithms. A model that shared those terms
carried one family's loss to another's candidates that do not have it.

What the runs did not vary, the model does not extrapolate: a candidate outside its group's
measured taus, or needing a half term no pair of runs separates, is not predicted
(`predictable`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

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

    @property
    def group(self) -> str:
        """The model's unit: the family, a block family with overlap a group of its own."""
        return f"{self.family}+overlap" if self.blocks and self.overlap else self.family


@dataclass(frozen=True)
class Observation:
    """One calibration run: its candidate and what it measured (steps None: never reached)."""

    features: Features
    steps_to_target: float | None
    final_accuracy: float


@dataclass(frozen=True)
class Fit:
    """The fitted terms by name (`<group>@<tau>` or `<group>` for the base, `half:<group>`),
    for steps (in log) and for final accuracy; `taus` holds each block group's measured taus
    (the interpolation's knots; `step_taus` those of the runs that reached the target, the
    accuracy fit also uses the others); `fixed` what every run of a group shared (a half
    value no pair of runs varied: candidates must share it). `rms_log` is the steps fit's
    residual (0 with as many runs as terms)."""

    steps: dict[str, float]
    accuracy: dict[str, float]
    rms_log: float
    runs: int
    taus: dict[str, tuple[int, ...]] = field(default_factory=dict)
    fixed: dict[str, dict[str, bool]] = field(default_factory=dict)
    step_taus: dict[str, tuple[int, ...]] = field(default_factory=dict)
    step_fixed: dict[str, dict[str, bool]] = field(default_factory=dict)

    def predictable(self, f: Features) -> bool:
        for coef, taus, fixed in (
            (self.steps, self.step_taus, self.step_fixed),
            (self.accuracy, self.taus, self.fixed),
        ):
            t = _terms(f, taus, fixed)
            if t is None or not all(name in coef for name in t):
                return False
        return True

    def predicts_accuracy(self, f: Features) -> bool:
        """The final accuracy alone (a group whose runs never reached the target has it)."""
        t = _terms(f, self.taus, self.fixed)
        return t is not None and all(name in self.accuracy for name in t)

    def steps_to_target(self, f: Features) -> float:
        terms = _terms(f, self.step_taus, self.step_fixed)
        assert terms is not None, f"{f} is not predictable"
        return math.exp(sum(self.steps[t] * x for t, x in terms.items()))

    def final_accuracy(self, f: Features) -> float:
        terms = _terms(f, self.taus, self.fixed)
        assert terms is not None, f"{f} is not predictable"
        return sum(self.accuracy[t] * x for t, x in terms.items())

    def why_not(self, f: Features) -> str:
        """Why a candidate is not predicted, in a few words."""
        for taus, fixed in ((self.step_taus, self.step_fixed), (self.taus, self.fixed)):
            knots = taus.get(f.group, ())
            if f.blocks and knots and not knots[0] <= f.tau <= knots[-1]:
                return f"tau {f.tau} is outside the calibrated taus {knots[0]}-{knots[-1]}"
            for name, value in fixed.get(f.group, {}).items():
                if getattr(f, name) != value:
                    return (
                        f"no calibration run of {f.group} {'with' if getattr(f, name) else 'without'} {name}"
                    )
        return "the calibration runs fit no term for it (or never reached the target)"


def _terms(
    f: Features, taus: dict[str, tuple[int, ...]], fixed: dict[str, dict[str, bool]]
) -> dict[str, float] | None:
    """The model's terms for one candidate with their values (zero-valued ones left out), or
    None where the model would extrapolate: a tau outside the group's knots, or a half value
    the group's runs never had."""
    g = f.group
    out: dict[str, float] = {}
    if f.blocks:
        knots = taus.get(g, ())
        if not knots or not knots[0] <= f.tau <= knots[-1]:
            return None
        if f.tau in knots:
            out[f"{g}@{f.tau}"] = 1.0
        else:
            hi = next(i for i, t in enumerate(knots) if t > f.tau)
            t0, t1 = knots[hi - 1], knots[hi]
            w = (math.log2(f.tau) - math.log2(t0)) / (math.log2(t1) - math.log2(t0))
            out[f"{g}@{t0}"], out[f"{g}@{t1}"] = 1.0 - w, w
    else:
        out[g] = 1.0
    known = fixed.get(g, {})
    if "half" in known:
        if known["half"] != f.half:
            return None
    elif f.half:
        out[f"half:{g}"] = 1.0
    return out


def fit(observations: list[Observation]) -> Fit:
    """Least squares, group by group: the steps over the runs that reached the target, the
    accuracy over every run. A group whose runs never reached the target gets no steps
    terms: it is not predicted."""
    reached = [o for o in observations if o.steps_to_target is not None and o.steps_to_target > 0]
    step_taus, step_fixed = _layout(reached)
    taus, fixed = _layout(observations)
    steps = _solve(reached, [math.log(o.steps_to_target or 1.0) for o in reached], step_taus, step_fixed)
    accuracy = _solve(observations, [o.final_accuracy for o in observations], taus, fixed)
    rms = 0.0
    resid = []
    for o in reached:
        terms = _terms(o.features, step_taus, step_fixed)
        if terms is not None and all(t in steps for t in terms):
            resid.append(math.log(o.steps_to_target or 1.0) - sum(steps[t] * x for t, x in terms.items()))
    if resid:
        rms = math.sqrt(sum(r * r for r in resid) / len(resid))
    return Fit(
        steps=steps,
        accuracy=accuracy,
        rms_log=rms,
        runs=len(observations),
        taus=taus,
        fixed=fixed,
        step_taus=step_taus,
        step_fixed=step_fixed,
    )


def _layout(observations: list[Observation]) -> tuple[dict[str, tuple[int, ...]], dict[str, dict[str, bool]]]:
    """Each block group's measured taus, and what every run of a group shared."""
    taus: dict[str, set[int]] = {}
    seen: dict[str, set[bool]] = {}
    for o in observations:
        f = o.features
        if f.blocks:
            taus.setdefault(f.group, set()).add(f.tau)
        seen.setdefault(f.group, set()).add(f.half)
    fixed = {g: {"half": next(iter(values))} for g, values in seen.items() if len(values) == 1}
    return {k: tuple(sorted(v)) for k, v in taus.items()}, fixed


def _solve(
    observations: list[Observation],
    y: list[float],
    taus: dict[str, tuple[int, ...]],
    fixed: dict[str, dict[str, bool]],
) -> dict[str, float]:
    """Each group's terms by least squares over its own runs; a group whose runs do not
    separate its terms (a rank-deficient design) gets none: it is not trusted."""
    out: dict[str, float] = {}
    by_group: dict[str, list[tuple[dict[str, float], float]]] = {}
    for o, target in zip(observations, y, strict=True):
        terms = _terms(o.features, taus, fixed)
        if terms is not None:
            by_group.setdefault(o.features.group, []).append((terms, target))
    for rows in by_group.values():
        names = sorted({t for terms, _ in rows for t in terms})
        x = np.array([[terms.get(t, 0.0) for t in names] for terms, _ in rows])
        if np.linalg.matrix_rank(x) < len(names):
            continue
        solution, *_ = np.linalg.lstsq(x, np.array([v for _, v in rows]), rcond=None)
        out.update({t: float(v) for t, v in zip(names, solution, strict=True)})
    return out
