"""A local run's group restarts as they happen (issue 35, item 2), from the run's own files:
torchrun's failure lines read as the agent's log grows, the rank's exception line of that
attempt, `restarting` while the new attempt's workers start, and what counts as the same
failure again. The job itself: tests/integration/test_script_restarts.py."""

from __future__ import annotations

import os
from pathlib import Path

from alchemist_jobs.failures import GroupFailures, attempt_failure
from alchemist_jobs.local_backend import LocalScheduler
from alchemist_jobs.processes import start_time
from alchemist_jobs.run_files import RunRecord
from alchemist_jobs.rundir import RunDir, runs_root, write_json_atomic

AGENT_LINE = ("E1203 13:24:55.323000 27562 torch/distributed/elastic/multiprocessing/api.py:1002]"
              " failed (exitcode: 1) local_rank: 1 (pid: {pid}) of binary: /usr/bin/python\n")
RANK_LOG = """=== rank 1 attempt 1 pid 100 at 2026-12-03 13:24:50 ===
Traceback (most recent call last):
  File "train.py", line 9, in <module>
    raise ValueError("shard 7 is truncated")
ValueError: shard 7 is truncated
=== rank 1 attempt 2 pid 200 at 2026-12-03 13:25:00 ===
Traceback (most recent call last):
  File "train.py", line 12, in <module>
    raise KeyError("label")
KeyError: 'label'
"""


def _run(tmp_path: Path) -> RunDir:
    run = RunDir(runs_root(tmp_path) / "shards-20261203-132441-cbef319c")
    run.create(exclusive=True)
    run.spec.write_text("name: shards\n")
    run.logs.mkdir(exist_ok=True)
    run.workers.mkdir(exist_ok=True)
    return run


def test_failures_are_read_as_the_agent_log_grows(tmp_path: Path):
    run = _run(tmp_path)
    log = run.agent_log(0)
    watch = GroupFailures(run.logs)
    assert watch.new() == []
    line = AGENT_LINE.format(pid=100)
    log.write_text("W1203 Sending process 99 closing signal SIGTERM\n" + line[:40])
    assert watch.new() == []  # a line still being written is not read yet
    with open(log, "a") as f:
        f.write(line[40:])
    assert watch.new() == [(0, 1, 1, 100)]
    assert watch.new() == []  # each failure once
    with open(log, "a") as f:
        f.write(AGENT_LINE.format(pid=200))
    assert watch.new() == [(0, 1, 1, 200)]


def test_each_attempt_says_its_own_exception_line(tmp_path: Path):
    run = _run(tmp_path)
    run.rank_log(1).write_text(RANK_LOG)
    first = attempt_failure(run.logs, 1, 1, 1, 3)
    assert first.describe() == "rank 1 failed (ValueError: shard 7 is truncated)"
    second = attempt_failure(run.logs, 2, 1, 1, 3)
    assert second.said == "KeyError: 'label'"
    assert not second.same_as(first)
    assert attempt_failure(run.logs, 1, 1, 1, 3).same_as(first)
    assert not attempt_failure(run.logs, 1, 1, 1, 4).same_as(first)  # another step
    killed = attempt_failure(run.logs, 3, 1, -9, None)  # no line of its own: how it ended
    assert killed.describe() == "rank 1 failed (exit -9 (SIGKILL))"


def test_status_says_restarting_until_the_new_attempts_workers_started(tmp_path: Path):
    run = _run(tmp_path)
    me = os.getpid()
    write_json_atomic(run.state_file, RunRecord(
        run_id=run.run_id, name="shards", state="running", created=1.0, launcher_pid=me,
        launcher_start=start_time(me), workers=2).model_dump())
    for rank in (0, 1):
        write_json_atomic(run.worker_file(rank), dict(rank=rank, pid=me, role="worker", restart=0))
    sched = LocalScheduler(tmp_path)
    assert (sched.status(run.run_id).state, sched.status(run.run_id).restarts) == ("running", 0)
    line = "rank 1 failed (ValueError: shard 7 is truncated); restarting 1/3"
    run.update_state(restarts=1, restart_events=[line], message=line)
    st = sched.status(run.run_id)
    assert (st.state, st.restarts, st.message) == ("restarting", 1, line)
    assert st.as_json()["state"] == "restarting"
    assert [r.state for r in sched.list()] == ["restarting"]
    write_json_atomic(run.worker_file(0), dict(rank=0, pid=me, role="worker", restart=1))
    assert sched.status(run.run_id).state == "restarting"  # rank 1 has not started again
    write_json_atomic(run.worker_file(1), dict(rank=1, pid=me, role="worker", restart=1))
    st = sched.status(run.run_id)
    assert (st.state, st.restarts) == ("running", 1)


def test_a_failure_read_after_the_next_attempt_started_keeps_its_step(tmp_path: Path, monkeypatch):
    """Under load the launcher may read attempt 1's failure line only after torchrun has
    started attempt 2, whose bootstrap rewrote the rank's record (a new pid, no step yet).
    The step attempt 1 reached stays in the record the bootstrap writes, so two identical
    failures are still seen as one failing twice. The records here are written by the
    bootstrap's own _record and the step as the script reporter writes it at exit."""
    import yaml

    from alchemist_jobs.local_backend import GroupRestarts
    from alchemist_jobs.runtime.bootstrap import _record
    from alchemist_jobs.spec import parse_spec

    run = _run(tmp_path)
    (tmp_path / "train.py").write_text("")
    spec = parse_spec(yaml.safe_load("name: shards\ntask: {script: train.py}\nprocs_per_node: 2\n"
                                     "max_restarts: 3\n"), "job.yaml", tmp_path)
    write_json_atomic(run.state_file, RunRecord(
        run_id=run.run_id, name="shards", state="running", created=1.0, launcher_pid=os.getpid(),
        launcher_start=start_time(os.getpid()), workers=2).model_dump())
    monkeypatch.setenv("LOCAL_RANK", "1")

    def attempt_reaches(restart: int, step: int) -> None:
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(restart))
        _record(run.path, 1, "script")
        rec = run.worker_file(1)
        write_json_atomic(rec, dict(__import__("json").loads(rec.read_text()), step=step))

    same = RANK_LOG.replace("raise KeyError(\"label\")", "raise ValueError(\"shard 7 is truncated\")")
    run.rank_log(1).write_text(same.replace("KeyError: 'label'", "ValueError: shard 7 is truncated"))
    restarts = GroupRestarts(run, spec)
    attempt_reaches(0, 3)
    attempt_reaches(1, 3)  # attempt 2 failed too; only now is attempt 1's line read
    with open(run.agent_log(0), "a") as f:
        f.write(AGENT_LINE.format(pid=100))  # attempt 1's worker: not the record's pid
    assert restarts.poll() == ""
    assert restarts.failures[-1].step == 3, restarts.failures
    with open(run.agent_log(0), "a") as f:
        f.write(AGENT_LINE.format(pid=os.getpid()))  # attempt 2's, whose record it is
    assert restarts.poll() == ("rank 1 failed the same way on attempts 1 and 2 (ValueError: shard 7 "
                               "is truncated, at step 3); not restarting again")
