"""Fault injection for drills and tests: knobs that make a healthy run misbehave, set in a
spec's `env:` (or `--set env.ALCHEMIST_FAULT_STALL_AT_STEP=200`); docs/environment.md lists
them. A stalled rank keeps serving its metrics, so monitoring sees a live worker that no
longer steps: what the `AlchemistJobStalled` alert and the stall watchdog are for.
"""

from __future__ import annotations

import os
import time

from alchemist_jobs import environment as E


def slowdown(rank: int, env: str | None = None) -> float:
    """This rank's step-time factor from ALCHEMIST_SLOW_RANKS (`RANK:FACTOR,...`); 1 = none."""
    text = E.SLOW_RANKS.get(default="") if env is None else env
    for item in filter(None, (t.strip() for t in text.split(","))):
        try:
            rank_text, factor_text = item.split(":")
            r, f = int(rank_text), float(factor_text)
        except ValueError:
            raise ValueError(f"{E.SLOW_RANKS.name}: {item!r} is not RANK:FACTOR (e.g. 1:3)") from None
        if f < 1:
            raise ValueError(f"{E.SLOW_RANKS.name}: factor {f} of rank {r} is below 1")
        if r == rank:
            return f
    return 1.0


class Faults:
    def __init__(self, rank: int, environ: dict[str, str] | None = None):
        env = os.environ if environ is None else environ
        self.stall_at = E.FAULT_STALL_AT_STEP.get(env)
        self.stall_s = E.FAULT_STALL_SECONDS.get(env)
        self.active = self.stall_at is not None and rank == E.FAULT_STALL_RANK.get(env, 0)
        self.stall_busy = bool(E.FAULT_STALL_BUSY.get(env))
        self.slow = slowdown(rank, E.SLOW_RANKS.get(env, ""))
        self.allow_nan = bool(E.ALLOW_NAN.get(env))
        self.hold_file = E.FAULT_HOLD_FILE.get(env)

    def stretch(self, step_seconds: float) -> None:
        """Make this step last `slow` times as long, as on a slower machine."""
        if self.slow > 1:
            time.sleep((self.slow - 1) * step_seconds)

    def check_loss(self, loss: float, step: int) -> None:
        if loss != loss or loss in (float("inf"), float("-inf")):
            if not self.allow_nan:
                raise FloatingPointError(f"loss is {loss} at step {step}; stopping")

    def after_step(self, step: int) -> None:
        if self.hold_file and step == 1:
            print(f"alchemist: fault injection: holding until {self.hold_file} exists", flush=True)
            while not os.path.exists(self.hold_file):
                time.sleep(0.2)
        if not self.active or step != self.stall_at:
            return
        print(
            f"alchemist: fault injection: stalling after step {step} "
            f"for {'ever' if self.stall_s is None else f'{self.stall_s:g} s'}"
            f"{', computing' if self.stall_busy else ''}",
            flush=True,
        )
        deadline = None if self.stall_s is None else time.monotonic() + self.stall_s
        while deadline is None or time.monotonic() < deadline:
            if self.stall_busy:
                continue
            time.sleep(0.2 if deadline is None else min(0.2, max(0.0, deadline - time.monotonic())))
