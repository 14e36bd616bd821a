"""The ranks' heartbeats (runtime/liveness.py) in process: their files round-trip, rewritten in
place; `judge` sorts ranks into stopped, working and idle; the heartbeat thread writes until
stopped. (The watchdog's real thread over its poll intervals is an integration test.)"""

from __future__ import annotations

import threading

from alchemist_jobs.runtime.liveness import MIN_CPU_SHARE, RECORD_BYTES, Beat, Liveness, judge

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
        return Beat(rank=rank, id=id, seq=seq, step=5, since=1.0, mono=mono, cpu=cpu, done=done)

    before = {
        0: b(0, 3, 1.0, 10.0),
        1: b(1, 3, 1.0, 10.0),
        2: b(2, 3, 1.0, 10.0),
        3: b(3, 3, 1.0, 10.0),
        4: None,
        5: None,
        6: b(6, 3, 1.0, 10.0),
        7: b(7, 900, 50.0, 10.0),
        8: b(8, 3, 1.0, 10.0),
    }
    after = {
        0: b(0, 3, 1.0, 10.0),  # no new heartbeat: stopped
        1: b(1, 8, 6.0, 20.0),  # half a CPU: working
        2: b(2, 8, 1.0 + 10 * MIN_CPU_SHARE / 2, 20.0),  # under the share: idle
        3: b(3, 4, 1.0, 12.0, done=True),  # finished
        4: None,  # never heard of: stopped
        5: b(5, 1, 0.5, 3.0),  # its first heartbeat: starting up
        6: None,  # unreadable now: stopped
        7: b(7, 2, 0.5, 3.0, id="p2"),  # a new process (restarted): starting up
        8: b(8, 3, 1.0, 10.0, id="p2"),
    }  # same seq, but another process: starting up
    v = judge(before, after)
    assert v.stopped == [0, 4, 6]
    assert [(beat.rank, share) for beat, share in v.working] == [(1, 0.5), (5, None), (7, None), (8, None)]
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
