"""Stall watchdog: a worker that makes no optimizer step for too long exits, so the group restarts.

A stopped or hung worker cannot notice anything itself, but its peers wait for it in their
next collective (torch's timeout: 30 minutes). Each worker's watchdog thread sees its own
loop stop stepping, prints one line naming the cause and exits with STALL_EXIT_CODE; torchrun
then restarts the group from the newest checkpoint. The limit (`checkpoint.stall_timeout_s`:
`auto`, seconds or off) and how heartbeats (runtime/liveness.py) tell a slow rank from a
stopped one are described in docs/paradigms.md.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

from alchemist_jobs.runtime.liveness import WINDOW_S, Beat, Liveness, judge

STALL_EXIT_CODE = 75  # EX_TEMPFAIL: try again
AUTO_FACTOR = 100
AUTO_FLOOR_S = 60.0
FIRST_STEP_S = 300.0
STEP_WINDOW = 50
PATIENCE = 10  # a rank still working is waited for up to 10 x the limit


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _exit_now(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    # The main thread is blocked inside a collective: only a process exit ends it.
    os._exit(STALL_EXIT_CODE)


class StallWatchdog:
    """`beat(step)` after every optimizer step; `on_stall` runs once if none comes in time."""

    def __init__(
        self,
        timeout_s: float | str | None,
        rank: int,
        on_stall: Callable[[str], None] = _exit_now,
        clock: Callable[[], float] = time.monotonic,
        liveness: Liveness | None = None,
        say: Callable[[str], None] = _say,
    ):
        self.timeout_s, self.rank = timeout_s, rank
        self.on_stall, self.clock = on_stall, clock
        self.liveness, self.say = liveness, say
        self.last_beat = clock()
        self.step: int | None = None  # no step yet in this attempt
        self.intervals: deque[float] = deque(maxlen=STEP_WINDOW)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_spec(cls, spec, rank: int, liveness: Liveness | None = None) -> StallWatchdog:
        return cls(spec.checkpoint.stall_timeout_s, rank, liveness=liveness)

    def start(self) -> None:
        if self.timeout_s is None or self._thread is not None:
            return
        if self.liveness is not None:
            self.liveness.start()
        self.last_beat = self.clock()
        self._thread = threading.Thread(target=self._watch, name="alchemist-stall-watchdog", daemon=True)
        self._thread.start()

    def beat(self, step: int) -> None:
        now = self.clock()
        if self.step is not None:
            self.intervals.append(now - self.last_beat)
        self.step, self.last_beat = step, now
        if self.liveness is not None:
            self.liveness.stepped(step)

    def stop(self) -> None:
        self._stop.set()

    def limit(self) -> tuple[float, str]:
        """Seconds allowed until the next step, and how that was reached (for the message)."""
        assert self.timeout_s is not None  # start() watches nothing without a limit
        fixed = self.timeout_s != "auto"
        if self.step is None:
            limit = max(FIRST_STEP_S, float(self.timeout_s) if fixed else 0.0)
            return limit, (
                f"the first step of an attempt gets {limit:g} s (checkpoint.stall_timeout_s={self.timeout_s})"
            )
        if fixed:
            return float(self.timeout_s), f"checkpoint.stall_timeout_s={self.timeout_s:g}"
        if not self.intervals:  # one step so far: nothing measured yet
            return FIRST_STEP_S, "checkpoint.stall_timeout_s=auto, no step time measured yet"
        median = statistics.median(self.intervals)
        limit = max(AUTO_FLOOR_S, AUTO_FACTOR * median)
        return limit, (
            f"steps took {median:.3g} s (median of the last {len(self.intervals)}), "
            f"so one was expected within {limit:.0f} s: checkpoint.stall_timeout_s="
            f"auto is {AUTO_FACTOR} x the step time, at least {AUTO_FLOOR_S:g} s"
        )

    def _watch(self) -> None:
        assert self.timeout_s is not None  # start() watches nothing without a limit
        poll = 1.0 if self.timeout_s == "auto" else min(1.0, float(self.timeout_s) / 4)
        waited_for = None  # the last beat whose overrun was found slow, not stopped
        before, check_at = None, 0.0
        while not self._stop.wait(poll):
            now, beat_at = self.clock(), self.last_beat
            idle = now - beat_at
            limit, why = self.limit()
            if idle < limit:
                before = None
                continue
            after = "before its first step" if self.step is None else f"after step {self.step}"
            head = f"alchemist: rank {self.rank} made no optimizer step for {idle:.0f} s {after} ({why})"
            if self.liveness is None:
                return self._stalled(f"{head}: a worker is stopped or hung")
            if before is None or before[0] != beat_at:
                before, check_at = (beat_at, self.liveness.read()), now + WINDOW_S
                continue
            if now < check_at:
                continue
            reading = self.liveness.read()
            v = judge(before[1], reading)
            before, check_at = (beat_at, reading), now + WINDOW_S
            if v.stopped:
                names = ", ".join(map(str, v.stopped))
                names = f"ranks {names}" if len(v.stopped) > 1 else f"rank {names}"
                return self._stalled(
                    f"{head}: {names} stopped (no heartbeat for {WINDOW_S:g} s: frozen, "
                    f"or its process is gone)"
                )
            if not v.working:
                return self._stalled(
                    f"{head}: no rank is working (ranks {', '.join(map(str, v.idle))} are "
                    f"alive but use no CPU: a deadlock, or a wait that never ends)"
                )
            hard = PATIENCE * limit
            busy = ", ".join(_working(b, share) for b, share in v.working)
            if idle >= hard:
                return self._stalled(
                    f"{head}: {busy} still working, but the step has passed the hard limit "
                    f"of {hard:.0f} s ({PATIENCE} x the limit)"
                )
            if waited_for != beat_at:
                waited_for = beat_at
                self.say(
                    f"alchemist: rank {self.rank}: the step {after} has taken {idle:.0f} s, "
                    f"over the limit of {limit:.0f} s, but {busy} still working: the run "
                    f"is slow, not stopped; waiting for it, at most {hard:.0f} s in all"
                )

    def _stalled(self, cause: str) -> None:
        self.on_stall(f"{cause}; exiting so the group restarts from the newest checkpoint")


def _working(b: Beat, share: float | None) -> str:
    doing = "starting" if b.step is None else f"on step {b.step + 1}"
    cpu = "just started" if share is None else f"{share:.0%} of a CPU"
    return f"rank {b.rank} ({doing} for {b.since:.0f} s, {cpu})"
