"""Worker heartbeats: what tells a slow rank from a stopped one when a step takes too long.

Every worker of a built-in task rewrites `workers/rank-<N>.heartbeat` in its run directory
every HEARTBEAT_S from a daemon thread: the process's id, a sequence number, its last
optimizer step and how long ago it was made, and its CPU time so far. Readers compare two
readings (never clocks of different hosts): a record that did not change is a stopped rank;
one from another process is a rank that has just (re)started. A rank that is computing, even
very slowly (swapping, throttled), shows its CPU time advancing; one frozen (SIGSTOP) or gone
writes no new heartbeat; one blocked without working (a wait that never ends) writes
heartbeats whose CPU time stands still.

Why the run directory: every worker of a run already writes there on every stack (a local
directory locally, the shared file system in every pod), and it answers whichever worker is
frozen. The workers' c10d store does not: locally it is one file that every operation locks
(store_bind.py), so a worker frozen inside an operation blocks every other reader. The record
is rewritten in place (one write of a fixed-size line, no rename): NFS clients check a file's
attributes on every open (close-to-open consistency), but may resolve a renamed name to its
old file for up to a minute.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HEARTBEAT_S = 2.0  # one small write per worker every 2 s
WINDOW_S = 5 * HEARTBEAT_S  # a rank with no new heartbeat over this long has stopped
MIN_CPU_SHARE = 0.05  # a rank using less of one CPU than this is waiting, not working
RECORD_BYTES = 255  # one fixed-size line, rewritten in place


@dataclass(frozen=True)
class Beat:
    rank: int
    id: str  # one per process: a restarted worker's heartbeats are new ones
    seq: int
    step: int | None  # last optimizer step made (None: none yet in this attempt)
    since: float  # seconds from that step (or from the start) to this heartbeat
    mono: float  # the writer's monotonic clock: differences within one rank only
    cpu: float  # the writer's process CPU time, all threads
    done: bool = False  # the worker has finished


@dataclass(frozen=True)
class Verdict:
    """Each rank's state over one window: no new heartbeat, working, or alive but idle."""

    stopped: list[int]
    working: list[tuple[Beat, float | None]]  # the newer heartbeat, its CPU share over the
    # window (None: a process that has just started)
    idle: list[int]


class Liveness:
    """One worker's heartbeat (`start`, `stepped`, `stop`) and its view of every rank's
    (`read`). `clock` and `cpu` are the writer's monotonic clock and CPU time."""

    def __init__(
        self,
        directory: Path,
        rank: int,
        world: int,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
        interval_s: float = HEARTBEAT_S,
    ):
        self.directory, self.rank, self.world = Path(directory), rank, world
        self.id = secrets.token_hex(4)
        self.clock, self.cpu, self.interval_s = clock, cpu, interval_s
        self.seq, self.stepped_at = 0, clock()
        self.step: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def path(self, rank: int) -> Path:
        return self.directory / f"rank-{rank}.heartbeat"

    def start(self) -> None:
        if self._thread is not None:
            return
        self.write()
        self._thread = threading.Thread(target=self._beat, name="alchemist-heartbeat", daemon=True)
        self._thread.start()

    def stepped(self, step: int) -> None:
        self.step, self.stepped_at = step, self.clock()

    def stop(self) -> None:
        """The last heartbeat says the worker is done: finished, not stopped."""
        if self._thread is None or self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self.write(done=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.write()

    def write(self, done: bool = False) -> None:
        with self._lock:
            self.seq += 1
            now = self.clock()
            record = dict(
                rank=self.rank,
                id=self.id,
                seq=self.seq,
                step=self.step,
                since=round(now - self.stepped_at, 3),
                mono=round(now, 3),
                cpu=round(self.cpu(), 3),
                done=done,
            )
            line = json.dumps(record, separators=(",", ":")).ljust(RECORD_BYTES - 1) + "\n"
            try:
                fd = os.open(self.path(self.rank), os.O_WRONLY | os.O_CREAT, 0o600)
                try:
                    os.pwrite(fd, line.encode(), 0)
                finally:
                    os.close(fd)
            except OSError:
                pass  # a missed heartbeat reads as a stopped rank: the watchdog's old rule

    def read(self) -> dict[int, Beat | None]:
        """Every rank's latest heartbeat (None: none yet, or unreadable)."""
        return {r: self._read(r) for r in range(self.world)}

    def _read(self, rank: int) -> Beat | None:
        try:
            with open(self.path(rank), "rb") as f:
                data = json.loads(f.read(RECORD_BYTES))
            beat = Beat(**data)
        except (OSError, ValueError, TypeError):
            return None
        return beat if beat.rank == rank else None


def judge(before: dict[int, Beat | None], after: dict[int, Beat | None]) -> Verdict:
    """Compare two readings WINDOW_S apart."""
    stopped: list[int] = []
    working: list[tuple[Beat, float | None]] = []
    idle: list[int] = []
    for rank, new in sorted(after.items()):
        old = before.get(rank)
        if new is None or (old is not None and (old.id, old.seq) == (new.id, new.seq)):
            stopped.append(rank)  # frozen, gone, or not (re)started
        elif new.done:
            idle.append(rank)
        elif old is None or old.id != new.id:
            working.append((new, None))  # a process that has just started
        else:
            share = (new.cpu - old.cpu) / max(new.mono - old.mono, 1e-9)
            if share >= MIN_CPU_SHARE:
                working.append((new, share))
            else:
                idle.append(rank)
    return Verdict(stopped, working, idle)
