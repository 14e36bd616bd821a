"""Listing and status at scale on the local stack: one run's status reads that run's files only,
a listing reads each run's files at most once, and ended runs come from the index of ended
runs until their directory changes (figures for 10,000 runs: bench/run_listing.py)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from alchemist_jobs import rundir, run_index
from alchemist_jobs.local_backend import LocalScheduler
from alchemist_jobs.run_files import Progress, Result, RunRecord
from alchemist_jobs.rundir import RunDir, runs_root, write_json_atomic

N = 40


def _run(root: Path, i: int, state: str = "succeeded") -> RunDir:
    """A run as the launcher and rank 0 leave it: spec, run.json, progress.json, result.json,
    written by the same models and writer the runtime uses."""
    run = RunDir(runs_root(root) / f"digits-20260101-000000-{i:08x}")
    run.create(exclusive=True)
    run.spec.write_text("name: digits\n")
    write_json_atomic(run.state_file, RunRecord(
        run_id=run.run_id, name="digits", state=state, created=1000.0 + i, ended=1001.0 + i,
        workers=2, exit_codes=[0]).model_dump())
    write_json_atomic(run.progress_file, Progress(step=i, total_steps=N, loss=1.0 / (i + 1)).model_dump())
    write_json_atomic(run.result_file, Result(final_loss=0.5, test_accuracy=0.9, steps=N).model_dump())
    return run


@pytest.fixture
def many(tmp_path) -> list[RunDir]:
    return [_run(tmp_path, i) for i in range(N)]


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """Which files `read_json` opened, by path."""
    seen: Counter = Counter()
    real = rundir.read_json

    def counting(path, *a, **kw):
        seen[str(path)] += 1
        return real(path, *a, **kw)

    monkeypatch.setattr(rundir, "read_json", counting)
    monkeypatch.setattr(run_index, "read_json", counting)
    return seen


def test_status_of_one_run_reads_only_that_runs_files(tmp_path, many, reads):
    target = many[N // 2]
    st = LocalScheduler(tmp_path).status(target.run_id)
    assert st.state == "succeeded" and st.step == N // 2
    others = [p for p in reads if not p.startswith(str(target.path) + os.sep)]
    assert others == [], f"status of one run read other runs' files: {others[:3]}"


def test_a_part_of_an_id_reads_only_the_runs_it_matches(tmp_path, many, reads):
    target = many[7]
    st = LocalScheduler(tmp_path).status(target.run_id[-8:])
    assert st.run_id == target.run_id
    assert {Path(p).parent for p in reads} == {target.path}


def test_listing_reads_each_runs_files_at_most_once_then_none_of_an_ended_run(tmp_path, many, reads):
    s = LocalScheduler(tmp_path)
    first = s.list()
    assert [r.run_id for r in first] == [r.run_id for r in many]  # oldest first
    per_file = Counter({p: c for p, c in reads.items() if "/runs/digits-" in p})
    assert max(per_file.values()) == 1, per_file.most_common(3)
    reads.clear()
    second = s.list()
    assert [p for p in reads if "/runs/digits-" in p] == []  # all ended: from the index
    assert [r.as_json() for r in second] == [r.as_json() for r in first]


def test_an_indexed_run_that_changes_is_read_again(tmp_path, many):
    s = LocalScheduler(tmp_path)
    s.list()
    run = many[3]
    write_json_atomic(run.result_file, Result(final_loss=0.25, test_accuracy=0.99, steps=N).model_dump())
    listed = {r.run_id: r for r in s.list()}
    assert listed[run.run_id].result.test_accuracy == 0.99
    assert listed[run.run_id].as_json() == s.status(run.run_id).as_json()


def test_live_runs_are_never_taken_from_the_index(tmp_path, many):
    live = _run(tmp_path, N + 1, state="running")
    s = LocalScheduler(tmp_path)
    s.list()
    assert live.run_id not in run_index.load(runs_root(tmp_path))
    # its launcher (pid None) is gone: shown as lost, read again on every listing
    assert {r.run_id: r.state for r in s.list()}[live.run_id] == "lost"


def test_a_removed_run_leaves_the_listing_and_the_index(tmp_path, many):
    import shutil

    s = LocalScheduler(tmp_path)
    s.list()
    shutil.rmtree(many[0].path)
    assert many[0].run_id not in {r.run_id for r in s.list()}
    assert many[0].run_id not in run_index.load(runs_root(tmp_path))


@pytest.mark.parametrize("damage", ["not json", '{"version": 1, "runs": {"x": [1, {"run_id": "y"}]}}',
                                    '{"version": 99, "runs": {}}', "[]"])
def test_a_damaged_index_is_rebuilt_from_the_runs(tmp_path, many, damage):
    s = LocalScheduler(tmp_path)
    want = [r.as_json() for r in s.list()]
    (runs_root(tmp_path) / run_index.INDEX).write_text(damage)
    assert [r.as_json() for r in s.list()] == want
    assert len(run_index.load(runs_root(tmp_path))) == N


def test_an_index_entry_cannot_speak_for_another_run(tmp_path, many):
    """An entry is trusted only for the run it names and only while its directory's mtime is
    the one recorded: a planted entry with a wrong mtime is ignored."""
    s = LocalScheduler(tmp_path)
    s.list()
    path = runs_root(tmp_path) / run_index.INDEX
    entries = run_index.load(runs_root(tmp_path))
    victim = many[5].run_id
    mtime, doc = entries[victim]
    entries[victim] = (mtime + 1, dict(doc, state="failed", message="planted"))
    run_index.save(runs_root(tmp_path), entries)
    assert path.stat().st_mode & 0o077 == 0  # private, like every run file
    assert {r.run_id: r.state for r in s.list()}[victim] == "succeeded"
