"""`alchemist rm` racing the end of a run the CLI is following (issue 37, item 6): `rm --force`
of a live run, and `rm` in the moment between the launcher recording the outcome and reading
it back. The launching CLI ends with the run's true state in ONE line, no traceback, and the
exit status of the run's true outcome (0 only when it succeeded)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from alchemist_jobs import cli as alchemist
from alchemist_jobs.rundir import RunDir
from tests.conftest import REPO, cli

pytestmark = pytest.mark.timeout(300)

WAITS = "print('ready', flush=True)\nimport time\ntime.sleep(600)\n"


def test_rm_force_of_a_live_run_ends_its_cli_with_one_line(tmp_path, home):
    script = tmp_path / "waits.py"
    script.write_text(WAITS)
    run_id = "waits-20260101-000000-00000001"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "alchemist_jobs", "run", str(script), "--run-id", run_id],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO), "ALCHEMIST_HOME": str(home)})
    try:
        assert launcher.stdout.readline() == "ready\n"  # the worker runs
        removed = cli("rm", "--force", run_id, home=home)
        assert removed.returncode == 0 and removed.stdout == f"removed {run_id} (cancelled)\n", \
            removed.stdout + removed.stderr
        out, err = launcher.communicate(timeout=120)
    finally:
        launcher.kill()
    # (a warning that the job shares this machine's network, where it must, is not ours)
    lines = [line for line in err.strip().splitlines() if not line.startswith("warning:")]
    assert "Traceback" not in err and lines[0].startswith(f"run {run_id}: 1 worker(s)"), err
    assert len(lines) == 2 and "cancelled" in lines[1], err
    # The launcher reads its run back just as rm renames it away: whichever came first, the
    # CLI ends as a cancelled run does, in one line of its own on stderr; where the read came
    # first, with the usual summary above it on stdout.
    if "removed by `alchemist rm`" in lines[1]:
        assert out == ""
    else:
        assert lines[1] == f"error: run {run_id} was cancelled", err
        assert out.startswith(f"run {run_id}: cancelled\n"), out
    assert launcher.returncode == 1
    assert not (home / "runs" / run_id).exists()


@pytest.mark.parametrize("script, state, code", [("print('done')\n", "succeeded", 0),
                                                 ("raise SystemExit(3)\n", "failed", 1)])
def test_rm_just_as_a_run_ends_leaves_its_cli_the_true_outcome(tmp_path, home, monkeypatch,
                                                                capfd, script, state, code):
    """The run's directory is removed by a real `alchemist rm` in the moment the launcher
    has recorded the outcome (rm takes only an ended run), before the launcher reads it back
    for the summary."""
    path = tmp_path / "job.py"
    path.write_text(script)
    run_id = f"job-{state}-20260101-000000-00000001"
    real = RunDir.update_state
    raced = []

    def then_rm(self, **changes):
        data = real(self, **changes)
        if changes.get("state") in ("succeeded", "failed") and not raced:
            raced.append(cli("rm", run_id, home=home))
        return data

    monkeypatch.setattr(RunDir, "update_state", then_rm)
    rc = alchemist.main(["run", str(path), "--run-id", run_id, "--quiet", "--home", str(home)])
    out, err = capfd.readouterr()
    assert raced and raced[0].stdout == f"removed {run_id} ({state})\n", raced
    assert "Traceback" not in out + err
    ours = [line for line in (out + err).strip().splitlines()
            if not line.startswith((f"run {run_id}: 1 worker(s)", "warning:")) and line != "done"]
    assert len(ours) == 1 and state in ours[0] and "removed" in ours[0], out + err
    assert rc == code
