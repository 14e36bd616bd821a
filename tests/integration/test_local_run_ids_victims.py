"""`cancel`, `status` and `logs` with a real unrelated process as the victim: a run id outside
the runs folder, or a record naming a reused pid, never signals it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from alchemist_jobs import cli
from alchemist_jobs.rundir import runs_root
from tests.unit.test_local_run_ids import _fake_run, _one_error_line


def _sleeper() -> subprocess.Popen:
    """An unrelated process in its own group: the victim a bad cancel would kill."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)


@pytest.mark.parametrize("command", ["cancel", "status", "logs"])
def test_run_ids_outside_the_runs_folder_are_refused(home, capsys, command):
    victim = _sleeper()
    try:
        _fake_run(home / "decoy", victim.pid)
        (home / "runs").mkdir()
        for ref in ("../decoy", str(home / "decoy"), "..", ".", "runs/../../decoy"):
            assert cli.main([command, ref]) == 2
            assert "run id" in _one_error_line(capsys)
        assert victim.poll() is None, "an unrelated process was signalled"
    finally:
        victim.kill()
        victim.wait()


def test_cancel_of_a_lost_run_never_signals_a_process_that_reused_its_pid(home, capsys):
    victim = _sleeper()
    try:
        # The record names the victim's pid, but the run's agent started at another time
        # (its pid was reused since): cancel must leave the victim alone.
        _fake_run(
            runs_root(home) / "digits-20260101-000000-abcd1234", victim.pid, proc_starts={str(victim.pid): 1}
        )
        assert cli.main(["cancel", "digits-20260101-000000-abcd1234"]) == 0
        assert victim.poll() is None, "cancel signalled a process that is not the run's"
        # A record without start times (an older or forged run.json) signals nothing either.
        _fake_run(runs_root(home) / "other-20260101-000000-abcd1234", victim.pid)
        assert cli.main(["cancel", "other-20260101-000000-abcd1234"]) == 0
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
