"""Stall watchdog: a worker that makes no optimizer step for too long exits, so the group restarts.

A stopped (SIGSTOP) or hung worker cannot notice anything itself, but its peers wait for it
in their next collective, and torch's collective timeout is 30 minutes. Each worker's
watchdog thread sees its own loop stop stepping, prints one line naming the cause and exits
with STALL_EXIT_CODE; torchrun (locally and in every pod alike) then stops the group and
restarts it from the newest checkpoint, within `max_restarts`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable

STALL_EXIT_CODE = 75  # EX_TEMPFAIL: try again


def _exit_now(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    # The main thread is blocked inside a collective: only a process exit ends it.
    os._exit(STALL_EXIT_CODE)


class StallWatchdog:
    """`beat(step)` after every optimizer step; `on_stall` runs once if none comes in time."""

    def __init__(self, timeout_s: float | None, rank: int,
                 on_stall: Callable[[str], None] = _exit_now,
                 clock: Callable[[], float] = time.monotonic):
        self.timeout_s, self.rank = timeout_s, rank
        self.on_stall, self.clock = on_stall, clock
        self.last_beat = clock()
        self.step = 0
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
        self.step, self.last_beat = step, self.clock()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        poll = min(1.0, self.timeout_s / 4)
        while not self._stop.wait(poll):
            idle = self.clock() - self.last_beat
            if idle >= self.timeout_s:
                self.on_stall(
                    f"alchemist: rank {self.rank} made no optimizer step for {idle:.0f} s after "
                    f"step {self.step} (checkpoint.stall_timeout_s={self.timeout_s:g}): a worker "
                    f"is stopped or hung; exiting so the group restarts from the newest checkpoint")
                return
