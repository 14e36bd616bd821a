"""The stall watchdog's real thread over its poll intervals (seconds each): the first step of an
attempt waits for every peer's start, `auto` follows the run's own step time; past the limit,
the ranks' heartbeats tell a slow run from a stopped one (issue 24.17). A fake clock drives the
real thread; proving it stays quiet takes two real polls."""

from __future__ import annotations

import threading

from alchemist_jobs.runtime.liveness import MIN_CPU_SHARE, WINDOW_S
from alchemist_jobs.runtime.watchdog import AUTO_FACTOR, AUTO_FLOOR_S, FIRST_STEP_S, PATIENCE, StallWatchdog
from tests.unit.test_watchdog import _Rank


class _Dog:
    def __init__(self, timeout_s):
        self.now, self.fired, self.lines = [0.0], threading.Event(), []
        self.dog = StallWatchdog(timeout_s, rank=1, on_stall=self._stall, clock=lambda: self.now[0])

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


class _Group:
    """Rank 1's watchdog (fixed 4 s limit) over heartbeats of ranks 0 and 1 in tmp_path.
    Both made step 13 at t = 1.5 and beat then."""

    def __init__(self, tmp_path):
        self.now, self.fired, self.lines, self.said = [0.0], threading.Event(), [], []
        self.peer, self.me = _Rank(tmp_path, 0), _Rank(tmp_path, 1)
        self.dog = StallWatchdog(
            4.0,
            rank=1,
            on_stall=self._stall,
            clock=lambda: self.now[0],
            liveness=self.me,
            say=self.said.append,
        )
        self.dog.start()
        for step in range(11, 14):
            self.now[0] += 0.5
            self.me.at = self.peer.at = self.now[0]
            self.dog.beat(step)  # rank 1's heartbeat learns of its steps through its watchdog
            self.peer.stepped(step)
        for r in (self.peer, self.me):
            r.beat_at(self.now[0])

    def _stall(self, line):
        self.lines.append(line)
        self.fired.set()

    def window(self, peer=0.0, me=0.0, ranks=(0, 1)):
        """Past the limit the watchdog reads once; the ranks in `ranks` beat once more, using
        `peer` and `me` of a CPU; a window later it reads again and decides."""
        self.now[0] += 4.5
        assert self.me.reads.acquire(timeout=30)
        self.next_window(peer, me, ranks)

    def next_window(self, peer=0.0, me=0.0, ranks=(0, 1)):
        t = self.now[0] + WINDOW_S + 0.5
        for r, share in ((self.peer, peer), (self.me, me)):
            if r.rank in ranks:
                r.beat_at(t, share)
        self.now[0] = t
        assert self.me.reads.acquire(timeout=30)


def test_a_rank_still_working_is_waited_for_and_named_once(tmp_path):
    g = _Group(tmp_path)
    g.window(peer=0.9)  # rank 0 computes; rank 1 waits for it
    assert not g.fired.wait(2.5), g.lines
    assert len(g.said) == 1
    assert (
        "the step after step 13 has taken 15 s, over the limit of 4 s, but rank 0 "
        "(on step 14 for 15 s, 90% of a CPU) still working" in g.said[0]
    ), g.said
    assert f"at most {PATIENCE * 4} s" in g.said[0]
    g.next_window(peer=0.5)  # still working: still waited for, and said only once
    assert not g.fired.wait(2.5) and len(g.said) == 1
    g.dog.stop()


def test_past_the_hard_limit_a_working_rank_is_no_longer_waited_for(tmp_path):
    g = _Group(tmp_path)
    g.window(peer=0.9)
    for _ in range(2):
        g.next_window(peer=0.9)  # the last at t = 37.5: 36 s after the last step
    assert not g.fired.wait(2.5)
    g.next_window(peer=0.9)  # t = 48: past 40 s
    assert g.fired.wait(30)
    g.dog.stop()
    assert "rank 0 (on step 14" in g.lines[0] and f"hard limit of {PATIENCE * 4} s" in g.lines[0]
    assert "made no optimizer step for 46 s after step 13" in g.lines[0], g.lines


def test_a_rank_with_no_new_heartbeat_is_named_as_stopped(tmp_path):
    g = _Group(tmp_path)
    g.window(ranks=(1,))  # rank 0 frozen: no heartbeat over the window
    assert g.fired.wait(30)
    g.dog.stop()
    line = g.lines[0]
    assert "rank 1 made no optimizer step" in line and "stall_timeout_s=4" in line
    assert f"rank 0 stopped (no heartbeat for {WINDOW_S:g} s" in line, line
    assert g.said == []


def test_a_stopped_rank_wins_over_a_working_one(tmp_path):
    g = _Group(tmp_path)
    g.window(me=1.0, ranks=(1,))  # rank 1 computes, but rank 0 is gone: it cannot finish
    assert g.fired.wait(30)
    g.dog.stop()
    assert "rank 0 stopped" in g.lines[0]


def test_every_rank_alive_but_none_working_is_a_deadlock(tmp_path):
    g = _Group(tmp_path)
    g.window(peer=MIN_CPU_SHARE / 2, me=MIN_CPU_SHARE / 2)  # heartbeats, but barely any CPU
    assert g.fired.wait(30)
    g.dog.stop()
    assert "no rank is working (ranks 0, 1 are alive but use no CPU" in g.lines[0], g.lines


def test_a_new_step_ends_the_wait(tmp_path):
    g = _Group(tmp_path)
    g.now[0] += 4.5
    assert g.me.reads.acquire(timeout=30)  # over the limit: the first reading
    g.dog.beat(14)  # the step came: a new limit, and the next overrun starts a new window
    g.now[0] += 3.0
    assert not g.fired.wait(2.5)
    g.dog.stop()
