"""Learning rate over time: large-batch scaling, gradual warm-up, then decay.

    peak = hyper.lr * k, where k = 1 (none), B/B_ref (linear) or sqrt(B/B_ref) (sqrt)
    warm-up: linear over W steps from hyper.lr (k > 1, as in Goyal et al. 2017) or from
             0 (k <= 1) up to the peak
    after:   constant, cosine to 0, or x0.1 at 50% and 75% of training (step)
B is the global batch: workers x per-worker batch x gradient-accumulation micro-batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LRSchedule:
    base_lr: float
    scale: float
    warmup_steps: int
    total_steps: int
    decay: str = "constant"

    @property
    def peak(self) -> float:
        return self.base_lr * self.scale

    def __call__(self, step: int) -> float:
        """Learning rate for optimizer step `step` (0-based)."""
        if step < self.warmup_steps:
            start = self.base_lr if self.scale > 1 else 0.0
            return start + (self.peak - start) * (step + 1) / self.warmup_steps
        if self.decay == "constant":
            return self.peak
        span = max(1, self.total_steps - self.warmup_steps)
        frac = min(1.0, (step - self.warmup_steps) / span)
        if self.decay == "cosine":
            return self.peak * 0.5 * (1 + math.cos(math.pi * frac))
        return self.peak * (0.1 ** (int(frac >= 0.5) + int(frac >= 0.75)))


def lr_scale(rule: str, global_batch: int, reference_batch: int) -> float:
    ratio = global_batch / reference_batch
    return {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[rule]


def build_schedule(hyper, global_batch: int, steps_per_epoch: int, total_steps: int) -> LRSchedule:
    warmup = int(round(hyper.warmup_epochs * steps_per_epoch)) + hyper.warmup_steps
    return LRSchedule(
        base_lr=hyper.lr,
        scale=lr_scale(hyper.lr_scaling, global_batch, hyper.reference_batch),
        warmup_steps=min(warmup, total_steps),
        total_steps=total_steps,
        decay=hyper.schedule,
    )
