"""Listing and status at scale on the local stack: one run's status reads that run's files only,
a listing reads each run's files at most once, and ended runs come from the index of ended
runs until their directory changes (figures for 10,000 runs: bench/run_listing.py)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from alchemist_jobs import run_index, rundir
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
    write_json_atomic(
        run.state_file,
        RunRecord(
            run_id=run.run_id,
            name="digits",
            state=state,
            created=1000.0 + i,
            ended=1001.0 + i,
            workers=2,
            exit_codes=[0],
        ).model_dump(),
    )
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


@pytest.mark.parametrize(
    "damage",
    [
        "not json",
        '{"version": 2, "runs": {"x": [1, {"run_id": "y"}]}}',
        '{"version": 99, "runs": {}}',
        "[]",
        '{"version": 3}\n[["x", 1, 2.0, "succeeded"]]\n',  # a run without its document
        '{"version": 3}\n[["x", 1, 2.0, "succeeded"]]\n{"run_id": "x", ',  # cut short
        '{"version": 3}\n[["x", 1]]\n{"run_id": "x", "state": "failed"}\n',  # a foreign entry
        '{"version": 3}\n{"x": 1}\n{"run_id": "x", "state": "failed"}\n',
    ],
)
def test_a_damaged_index_is_rebuilt_from_the_runs(tmp_path, many, damage):
    s = LocalScheduler(tmp_path)
    want = [r.as_json() for r in s.list()]
    (runs_root(tmp_path) / run_index.INDEX).write_text(damage)
    assert [r.as_json() for r in s.list()] == want
    assert len(run_index.load(runs_root(tmp_path))) == N


def test_the_previous_index_file_is_replaced(tmp_path, many):
    old = runs_root(tmp_path) / run_index.OLD_INDEX
    old.write_text('{"version": 2, "runs": {}}')
    s = LocalScheduler(tmp_path)
    s.list()
    assert not old.exists() and len(run_index.load(runs_root(tmp_path))) == N


def test_an_index_entry_cannot_speak_for_another_run(tmp_path, many):
    """An entry is trusted only for the run it names and only while its directory's mtime is
    the one recorded: a planted entry with a wrong mtime, or one whose document is another
    run's, is ignored."""
    s = LocalScheduler(tmp_path)
    s.list()
    path = runs_root(tmp_path) / run_index.INDEX
    entries = run_index.load(runs_root(tmp_path))
    victim, other = many[5].run_id, many[6].run_id
    planted = json.dumps(dict(json.loads(entries[victim].text), state="failed", message="planted"))
    entries[victim] = entries[victim]._replace(mtime=entries[victim].mtime + 1, state="failed", text=planted)
    entries[other] = entries[other]._replace(state="failed", text=planted)
    run_index.save(runs_root(tmp_path), entries)
    assert path.stat().st_mode & 0o077 == 0  # private, like every run file
    for listed in (s.list(), s.list_json()):
        states = {r.run_id: r.state for r in listed}
        assert states[victim] == states[other] == "succeeded"
    assert "planted" not in "".join(r.json_text for r in s.list_json())


def test_list_json_prints_the_statuses_as_they_are(tmp_path, many, capsys):
    """`list --json` (newest first, --state, --limit) is each run's `status RUN --json`
    document, byte for byte what encoding the listed statuses gives."""
    from alchemist_jobs import cli

    _run(tmp_path, N + 1, state="failed")
    s = LocalScheduler(tmp_path)
    for _ in range(2):  # the first listing reads the runs and writes the index, the second reads it
        assert cli.main(["list", "--json", "--home", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        newest_first = sorted(s.list(), key=lambda r: r.created or 0, reverse=True)
        assert out == json.dumps([r.as_json() for r in newest_first]) + "\n"
        assert json.loads(out) == [s.status(r.run_id).as_json() for r in newest_first]
    assert cli.main(["list", "--json", "--state", "failed", "--home", str(tmp_path)]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [
        f"digits-20260101-000000-{N + 1:08x}"
    ]
    assert cli.main(["list", "--json", "--limit", "2", "--home", str(tmp_path)]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [r.run_id for r in newest_first[:2]]


def test_list_json_of_indexed_runs_decodes_and_validates_none(tmp_path, many, capsys, monkeypatch):
    """An ended run's document goes from the index to `list --json` as text: decoding and
    re-encoding (and validating) 10,000 of them was most of such a listing."""
    from alchemist_jobs import cli

    s = LocalScheduler(tmp_path)
    s.list()  # writes the index
    decoded = []
    real_loads = json.loads
    monkeypatch.setattr(
        json,
        "loads",
        lambda text, *a, **kw: (
            decoded.append(text.decode() if isinstance(text, bytes) else text) or real_loads(text, *a, **kw)
        ),
    )

    def no_validation(*a, **kw):
        raise AssertionError("a listed run was validated")

    monkeypatch.setattr(Progress, "model_validate", no_validation)
    monkeypatch.setattr(Result, "model_validate", no_validation)
    assert cli.main(["list", "--json", "--home", str(tmp_path)]) == 0
    during = list(decoded)
    assert len(json.loads(capsys.readouterr().out)) == N
    assert not [t for t in during if '"progress"' in t], "the listing decoded run documents"


def test_list_with_a_limit_decodes_only_the_runs_it_shows(tmp_path, many, capsys, monkeypatch):
    """`list --limit 2` (the table) decodes two runs' documents, not every indexed one, and
    prints what the statuses hold."""
    from alchemist_jobs import cli

    s = LocalScheduler(tmp_path)
    newest = sorted(s.list(), key=lambda r: r.created or 0, reverse=True)[:2]  # writes the index
    decoded = []
    real_loads = json.loads
    monkeypatch.setattr(
        json,
        "loads",
        lambda text, *a, **kw: (
            decoded.append(text.decode() if isinstance(text, bytes) else text) or real_loads(text, *a, **kw)
        ),
    )
    assert cli.main(["list", "--limit", "2", "--home", str(tmp_path)]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert sum(t.count('"progress"') for t in decoded) == 2, "the listing decoded runs it does not show"
    assert [row.split()[:5] for row in rows] == [
        [r.run_id, r.state, r.algorithm, str(r.workers), f"{r.step}/{r.total_steps}"] for r in newest
    ]
    assert {r.algorithm for r in newest} == {"sync"}  # from spec.yaml: run.json has none
