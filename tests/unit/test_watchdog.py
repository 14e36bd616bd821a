"""The stall watchdog's limit: the first step of an attempt waits for every peer's start, and
`auto` follows the run's own step time (issue 24.17). A fake clock drives the real thread."""

from __future__ import annotations

import threading

from alchemist_jobs.runtime.watchdog import AUTO_FACTOR, AUTO_FLOOR_S, FIRST_STEP_S, StallWatchdog


class _Dog:
    def __init__(self, timeout_s):
        self.now, self.fired, self.lines = [0.0], threading.Event(), []
        self.dog = StallWatchdog(timeout_s, rank=1, on_stall=self._stall,
                                 clock=lambda: self.now[0])

    def _stall(self, line: str) -> None:
        self.lines.append(line)
        self.fired.set()

    def steps(self, first: int, n: int, every_s: float) -> None:
        for step in range(first, first + n):
            self.now[0] += every_s
            self.dog.beat(step)

    def quiet_until(self, t: float) -> bool:
        """Moves the clock to t; True when the watchdog stayed quiet over two polls."""
        self.now[0] = t
        return not self.fired.wait(2.5)


def test_the_first_step_of_an_attempt_waits_for_the_peers_start_even_under_a_short_limit():
    # A peer importing its libraries, restoring a checkpoint or building the model delays
    # everyone's first collective: under an 8 s limit on the first step, rank 1 would give up
    # on rank 0 at every start, and the run fail after max_restarts without one step.
    d = _Dog(8.0)
    d.dog.start()
    assert d.quiet_until(FIRST_STEP_S - 1)
    assert not d.quiet_until(FIRST_STEP_S + 1)
    d.dog.stop()
    assert "before its first step" in d.lines[0] and "300 s" in d.lines[0]


def test_a_fixed_limit_applies_between_steps():
    d = _Dog(4.0)
    d.dog.start()
    d.steps(11, 3, 0.5)
    base = d.now[0]
    assert d.quiet_until(base + 3.9)
    d.now[0] = base + 11
    assert d.fired.wait(30)
    d.dog.stop()
    assert len(d.lines) == 1 and "rank 1" in d.lines[0] and "after step 13" in d.lines[0]
    assert "stall_timeout_s=4" in d.lines[0]


def test_auto_waits_for_a_slower_run_and_never_less_than_the_floor():
    fast = _Dog("auto")
    fast.dog.start()
    fast.steps(1, 20, 0.1)
    base = fast.now[0]
    assert fast.quiet_until(base + AUTO_FLOOR_S - 1)  # 100 x 0.1 s is under the floor
    assert not fast.quiet_until(base + AUTO_FLOOR_S + 1)
    fast.dog.stop()
    line = fast.lines[0]
    assert "after step 20" in line and "steps took 0.1 s" in line and "within 60 s" in line

    slow = _Dog("auto")
    slow.dog.start()
    slow.steps(1, 20, 3.0)  # a machine 30 times slower: waited for 300 s, not 60
    base = slow.now[0]
    assert slow.quiet_until(base + AUTO_FACTOR * 3.0 - 5)
    assert not slow.quiet_until(base + AUTO_FACTOR * 3.0 + 1)
    slow.dog.stop()
    assert "within 300 s" in slow.lines[0]


def test_null_turns_the_watchdog_off():
    d = _Dog(None)
    d.dog.start()
    assert d.dog._thread is None
    assert d.quiet_until(10 * FIRST_STEP_S)
