"""Stall watchdog: a worker that makes no optimizer step for too long exits, so the group restarts.

A stopped (SIGSTOP) or hung worker cannot notice anything itself, but its peers wait for it
in their next collective, and torch's collective timeout is 30 minutes. Each worker's
watchdog thread sees its own loop stop stepping, prints one line naming the cause and exits
with STALL_EXIT_CODE; torchrun (locally and in every pod alike) then stops the group and
restarts it from the newest checkpoint, within `max_restarts`.

How long is too long (`checkpoint.stall_timeout_s`):
- `auto` (the default) follows the run's own pace: AUTO_FACTOR times the median of the
  last STEP_WINDOW intervals between optimizer steps, and never under AUTO_FLOOR_S. A worker
  that slows down gradually (a loaded machine) is waited for; one that stops is not.
- a number of seconds is a fixed limit between steps;
- `null` turns the watchdog off.
The first step of an attempt also waits for every peer's start (imports, restoring the
checkpoint, building the model), so it gets at least FIRST_STEP_S in every mode.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections import deque
from typing import Callable

STALL_EXIT_CODE = 75  # EX_TEMPFAIL: try again
AUTO_FACTOR = 100
AUTO_FLOOR_S = 60.0
FIRST_STEP_S = 300.0
STEP_WINDOW = 50


def _exit_now(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    # The main thread is blocked inside a collective: only a process exit ends it.
    os._exit(STALL_EXIT_CODE)


class StallWatchdog:
    """`beat(step)` after every optimizer step; `on_stall` runs once if none comes in time."""

    def __init__(self, timeout_s: float | str | None, rank: int,
                 on_stall: Callable[[str], None] = _exit_now,
                 clock: Callable[[], float] = time.monotonic):
        self.timeout_s, self.rank = timeout_s, rank
        self.on_stall, self.clock = on_stall, clock
        self.last_beat = clock()
        self.step: int | None = None  # no step yet in this attempt
        self.intervals: deque[float] = deque(maxlen=STEP_WINDOW)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_spec(cls, spec, rank: int) -> "StallWatchdog":
        return cls(spec.checkpoint.stall_timeout_s, rank)

    def start(self) -> None:
        if self.timeout_s is None or self._thread is not None:
            return
        self.last_beat = self.clock()
        self._thread = threading.Thread(target=self._watch, name="alchemist-stall-watchdog",
                                        daemon=True)
        self._thread.start()

    def beat(self, step: int) -> None:
        now = self.clock()
        if self.step is not None:
            self.intervals.append(now - self.last_beat)
        self.step, self.last_beat = step, now

    def stop(self) -> None:
        self._stop.set()

    def limit(self) -> tuple[float, str]:
        """Seconds allowed until the next step, and how that was reached (for the message)."""
        fixed = self.timeout_s != "auto"
        if self.step is None:
            limit = max(FIRST_STEP_S, float(self.timeout_s) if fixed else 0.0)
            return limit, (f"the first step of an attempt gets {limit:g} s "
                           f"(checkpoint.stall_timeout_s={self.timeout_s})")
        if fixed:
            return float(self.timeout_s), f"checkpoint.stall_timeout_s={self.timeout_s:g}"
        if not self.intervals:  # one step so far: nothing measured yet
            return FIRST_STEP_S, "checkpoint.stall_timeout_s=auto, no step time measured yet"
        median = statistics.median(self.intervals)
        limit = max(AUTO_FLOOR_S, AUTO_FACTOR * median)
        return limit, (f"steps took {median:.3g} s (median of the last {len(self.intervals)}), "
                       f"so one was expected within {limit:.0f} s: checkpoint.stall_timeout_s="
                       f"auto is {AUTO_FACTOR} x the step time, at least {AUTO_FLOOR_S:g} s")

    def _watch(self) -> None:
        poll = 1.0 if self.timeout_s == "auto" else min(1.0, float(self.timeout_s) / 4)
        while not self._stop.wait(poll):
            idle = self.clock() - self.last_beat
            limit, why = self.limit()
            if idle >= limit:
                after = "before its first step" if self.step is None else f"after step {self.step}"
                self.on_stall(
                    f"alchemist: rank {self.rank} made no optimizer step for {idle:.0f} s {after} "
                    f"({why}): a worker is stopped or hung; exiting so the group restarts "
                    f"from the newest checkpoint")
                return
