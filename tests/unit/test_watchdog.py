"""The stall watchdog's limit: the first step of an attempt waits for every peer's start, and
`auto` follows the run's own step time; past the limit, the ranks' heartbeats tell a slow run
from a stopped one (issue 24.17). A fake clock drives the real thread."""

from __future__ import annotations

import threading

from alchemist_jobs.runtime.liveness import (MIN_CPU_SHARE, RECORD_BYTES, WINDOW_S, Beat,
                                             Liveness, judge)
from alchemist_jobs.runtime.watchdog import (AUTO_FACTOR, AUTO_FLOOR_S, FIRST_STEP_S, PATIENCE,
                                             StallWatchdog)


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


# --- slow or stopped: the peers' heartbeats (runtime/liveness.py) -----------------------------

class _Rank(Liveness):
    """A real heartbeat file, written when the test says, at the time and with the CPU use
    the test says; `reads` counts the watchdog's readings of the heartbeats."""

    def __init__(self, directory, rank, at=0.0):
        self.at, self.cpu_s, self.last = at, 0.0, at
        super().__init__(directory, rank, world=2, clock=lambda: self.at, cpu=lambda: self.cpu_s)
        self.reads = threading.Semaphore(0)

    def start(self):
        pass  # the test writes each heartbeat itself

    def beat_at(self, t, share=0.0):
        """A heartbeat at time t, having used `share` of a CPU since the last one."""
        self.cpu_s += share * (t - self.last)
        self.at = self.last = t
        self.write()

    def read(self):
        reading = super().read()
        self.reads.release()
        return reading


class _Group:
    """Rank 1's watchdog (fixed 4 s limit) over heartbeats of ranks 0 and 1 in tmp_path.
    Both made step 13 at t = 1.5 and beat then."""

    def __init__(self, tmp_path):
        self.now, self.fired, self.lines, self.said = [0.0], threading.Event(), [], []
        self.peer, self.me = _Rank(tmp_path, 0), _Rank(tmp_path, 1)
        self.dog = StallWatchdog(4.0, rank=1, on_stall=self._stall, clock=lambda: self.now[0],
                                 liveness=self.me, say=self.said.append)
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
    assert ("the step after step 13 has taken 15 s, over the limit of 4 s, but rank 0 "
            "(on step 14 for 15 s, 90% of a CPU) still working" in g.said[0]), g.said
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


def test_heartbeats_round_trip_through_their_files_rewritten_in_place(tmp_path):
    a = _Rank(tmp_path, 0, at=100.0)
    a.stepped(40)
    a.beat_at(103.0, share=1.0)
    got = Liveness(tmp_path, 1, world=3).read()
    assert got[0] == Beat(rank=0, id=a.id, seq=1, step=40, since=3.0, mono=103.0, cpu=3.0)
    assert got[1] is None and got[2] is None  # never written
    assert (tmp_path / "rank-0.heartbeat").stat().st_size == RECORD_BYTES
    a.stepped(41)
    a.write()  # rewritten in place: still one line
    assert (tmp_path / "rank-0.heartbeat").read_text().count("\n") == 1
    (tmp_path / "rank-1.heartbeat").write_text('{"rank": 1, "id": "ab", "se')  # torn: unread
    (tmp_path / "rank-2.heartbeat").write_text((tmp_path / "rank-0.heartbeat").read_text())
    got = Liveness(tmp_path, 1, world=3).read()
    assert got[0].seq == 2 and got[1] is None and got[2] is None  # rank 0's record, misplaced


def test_judge_sorts_ranks_into_stopped_working_and_idle():
    def b(rank, seq, cpu, mono, done=False, id="p1"):
        return Beat(rank=rank, id=id, seq=seq, step=5, since=1.0, mono=mono, cpu=cpu,
                    done=done)
    before = {0: b(0, 3, 1.0, 10.0), 1: b(1, 3, 1.0, 10.0), 2: b(2, 3, 1.0, 10.0),
              3: b(3, 3, 1.0, 10.0), 4: None, 5: None, 6: b(6, 3, 1.0, 10.0),
              7: b(7, 900, 50.0, 10.0), 8: b(8, 3, 1.0, 10.0)}
    after = {0: b(0, 3, 1.0, 10.0),  # no new heartbeat: stopped
             1: b(1, 8, 6.0, 20.0),  # half a CPU: working
             2: b(2, 8, 1.0 + 10 * MIN_CPU_SHARE / 2, 20.0),  # under the share: idle
             3: b(3, 4, 1.0, 12.0, done=True),  # finished
             4: None,  # never heard of: stopped
             5: b(5, 1, 0.5, 3.0),  # its first heartbeat: starting up
             6: None,  # unreadable now: stopped
             7: b(7, 2, 0.5, 3.0, id="p2"),  # a new process (restarted): starting up
             8: b(8, 3, 1.0, 10.0, id="p2")}  # same seq, but another process: starting up
    v = judge(before, after)
    assert v.stopped == [0, 4, 6]
    assert [(beat.rank, share) for beat, share in v.working] == [(1, 0.5), (5, None), (7, None),
                                                                 (8, None)]
    assert v.idle == [2, 3]


def test_the_heartbeat_thread_writes_until_stopped_and_then_says_done(tmp_path):
    live = Liveness(tmp_path, 0, world=1, interval_s=0.05)
    live.start()
    seen = set()
    while len(seen) < 3:  # the thread keeps writing new heartbeats
        beat = live.read()[0]
        if beat is not None:
            seen.add(beat.seq)
    live.stop()
    last = live.read()[0]
    assert last.done and last.seq > max(seen) and live._thread is not None
    assert not live._thread.is_alive()
