"""Run ids, run ownership and run files on the local stack: `cancel`, `status` and `logs`
act only on runs under the runs folder, signal only processes that are still the run's,
never share a run directory, and keep run files private."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from alchemist_jobs import cli
from alchemist_jobs.local_backend import LocalScheduler
from alchemist_jobs.rundir import RunDir, runs_root
from alchemist_jobs.spec import load_spec
from tests.conftest import EXAMPLES


def _fake_run(dir_: Path, pid: int, **state) -> None:
    dir_.mkdir(parents=True)
    (dir_ / "spec.yaml").write_text("name: decoy\n")
    (dir_ / "run.json").write_text(
        json.dumps(
            dict(
                run_id=dir_.name,
                state="running",
                launcher_pid=pid,
                agents=[pid],
                servers=[],
                workers=1,
                created=time.time(),
                **state,
            )
        )
    )


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("error: ") and len(err) <= 300, err
    return err


@pytest.mark.parametrize("ref", ["digits-*", "dig[its", "a?b", "x" * 300, "a\nb", "", "-rf", "a\0b", "é"])
def test_junk_run_ids_get_one_line(home, capsys, ref):
    (home / "runs").mkdir(parents=True)
    assert cli.main(["status", "--", ref]) == 2
    err = _one_error_line(capsys)
    assert "run id" in err


def test_two_runs_never_share_a_run_directory(home):
    sched = LocalScheduler(home)
    spec = load_spec(EXAMPLES / "digits.yaml")
    first = sched.dryrun(spec, EXAMPLES, run_id="digits-20260101-000000-00000000")
    second = sched.dryrun(spec, EXAMPLES, run_id="digits-20260101-000000-00000000")
    first.run.create(exclusive=True)
    with pytest.raises(FileExistsError):
        second.run.create(exclusive=True)
    ids = {sched.dryrun(spec, EXAMPLES).run_id for _ in range(200)}
    assert len(ids) == 200


def test_run_directories_and_files_are_private(home):
    run = RunDir(runs_root(home) / "digits-20260101-000000-00000000")
    run.create(exclusive=True)
    run.update_state(state="running")
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for p in [home / "runs", run.path, run.logs, run.workers, run.checkpoints]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    assert stat.S_IMODE(run.state_file.stat().st_mode) == 0o600


def test_the_code_snapshot_never_holds_the_alchemist_home(tmp_path):
    """A spec whose directory holds ALCHEMIST_HOME (a project folder with its own home, or a
    spec kept in ~ with the default ~/.alchemist) ships its code, not earlier runs: else each
    run copies every earlier run's snapshot, checkpoints and data, and grows without end."""
    project = tmp_path / "project"
    home = project / "home"
    (project / "train.py").parent.mkdir(parents=True)
    (project / "train.py").write_text("print('hi')\n")
    (project / "job.yaml").write_text("name: snap\ntask: {script: train.py}\n")
    earlier = home / "runs" / "snap-20260101-000000-00000000"
    (earlier / "code").mkdir(parents=True)
    (earlier / "code" / "train.py").write_text("print('hi')\n")
    (earlier / "checkpoints").mkdir()
    (earlier / "checkpoints" / "step-000000005.pt").write_bytes(b"\0" * 100)
    (home / "data" / "digits").mkdir(parents=True)
    (home / "data" / "digits" / "digits-v1-seed0.pt").write_bytes(b"\0" * 100)
    request = LocalScheduler(home).dryrun(load_spec(project / "job.yaml"), project)
    assert request.code_files == ["job.yaml", "train.py"]
    # The same through a relative or symlinked way to the home.
    (tmp_path / "link").symlink_to(project)
    request = LocalScheduler(tmp_path / "link" / "home").dryrun(load_spec(project / "job.yaml"), project)
    assert request.code_files == ["job.yaml", "train.py"]


class _AgentDyingBetweenPolls:
    """An agent that is alive at the loop's first poll and dead (SIGKILL) at the next."""

    pid = 2**22 + 1  # no such process: nothing may signal it

    def __init__(self):
        self.polls = 0

    def poll(self):
        self.polls += 1
        return None if self.polls == 1 else -9

    def wait(self, timeout=None):
        return -9


def test_an_agent_that_dies_between_two_polls_is_reported(home):
    """The wait loop reads every agent's code, then picks a live one to wait on: an agent
    killed in between left no live one (StopIteration, a traceback instead of the summary)."""
    from alchemist_jobs.local_backend import LocalRequest, LocalRun

    run = RunDir(runs_root(home) / "digits-20260101-000000-00000000")
    run.create(exclusive=True)
    run.spec.write_text((EXAMPLES / "digits.yaml").read_text())
    run.update_state(run_id=run.run_id, name="digits", stack="local", state="running")
    spec = load_spec(EXAMPLES / "digits.yaml")
    # The backend's own handle (a hand-made one went stale when the handle gained `net`).
    handle = LocalRun(
        LocalRequest(run_id=run.run_id, run=run, spec=spec, processes=[]), procs=[_AgentDyingBetweenPolls()]
    )
    status = LocalScheduler(home).wait(handle)
    assert status.state == "failed" and "killed by SIGKILL" in status.message, status
