"""Fault injection for drills and tests: documented knobs that make a healthy run misbehave.

    ALCHEMIST_FAULT_STALL_AT_STEP=N     after optimizer step N, one rank stops making progress
    ALCHEMIST_FAULT_STALL_SECONDS=S     ... for S seconds (default: until the run is stopped)
    ALCHEMIST_FAULT_STALL_RANK=R        ... on rank R (default 0); the others then wait for it
                                        in their next collective, as behind a hung worker
    ALCHEMIST_FAULT_STALL_BUSY=1        ... and keeps a CPU busy meanwhile: a step suddenly
                                        much slower (swapping, throttled), not a hang
    ALCHEMIST_SLOW_RANKS=1:3            (comma-separated RANK:FACTOR) stretches each step of
                                        rank 1 to 3 times its duration by sleeping, as if that
                                        worker ran on a slower machine
    ALCHEMIST_ALLOW_NAN=1               keep training when the loss is not finite (the loop
                                        otherwise stops with an error)
    ALCHEMIST_FAULT_HOLD_FILE=PATH      after step 1, every rank waits until PATH exists (a
                                        test lets the job go once monitoring has seen it)

The stalled rank keeps serving its metrics, so monitoring sees a live worker that no longer
steps: what the `AlchemistJobStalled` alert is for (docs/monitoring.md), and what the stall
watchdog (`checkpoint.stall_timeout_s`) turns into a restart. Set them in a spec's `env:`
(or `--set env.ALCHEMIST_FAULT_STALL_AT_STEP=200`).
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
            r, f = item.split(":")
            r, f = int(r), float(f)
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
        print(f"alchemist: fault injection: stalling after step {step} "
              f"for {'ever' if self.stall_s is None else f'{self.stall_s:g} s'}"
              f"{', computing' if self.stall_busy else ''}", flush=True)
        deadline = None if self.stall_s is None else time.monotonic() + self.stall_s
        while deadline is None or time.monotonic() < deadline:
            if self.stall_busy:
                continue
            time.sleep(0.2 if deadline is None else min(0.2, max(0.0, deadline - time.monotonic())))
