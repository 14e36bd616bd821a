"""A stopped worker no longer hangs a job: its peers' stall watchdogs notice that no step
comes, say so, and exit; torchrun restarts the group from the newest checkpoint (issue 11.6).
A real 2-worker local run, one worker frozen with SIGSTOP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from alchemist_jobs.rundir import read_json
from tests.conftest import EXAMPLES, REPO
from tests.integration.test_local_runs import no_process_of, only_run, wait_for

pytestmark = pytest.mark.timeout(600)


def test_sigstopped_worker_restarts_the_group_from_the_newest_checkpoint(home):
    p = subprocess.Popen(
        [sys.executable, "-m", "alchemist_jobs", "run", str(EXAMPLES / "digits.yaml"),
         "--set", "hyper.epochs=30", "--set", "hyper.batch_size=16",
         "--set", "checkpoint.every_steps=25", "--set", "checkpoint.stall_timeout_s=8",
         "--quiet"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    victim = None
    try:
        run = wait_for(lambda: (home / "runs").exists() and only_run(home), 60, "run dir")
        wait_for(lambda: len(list(run.checkpoints.glob("step-*.pt"))) >= 2, 240, "checkpoints")
        victim = read_json(run.worker_file(1))["pid"]
        os.kill(victim, signal.SIGSTOP)  # frozen: alive, holding its sockets, never stepping
        out, _ = p.communicate(timeout=480)
    finally:
        if victim is not None:
            try:
                os.kill(victim, signal.SIGKILL)  # a no-op once torchrun has killed it
            except ProcessLookupError:
                pass
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out
    res = run.result()
    assert res["restarts"] >= 1 and res["resumed_from_step"] >= 50, res
    assert res["steps"] == 30 * 45 and res["test_accuracy"] >= 0.90, res
    log0 = run.rank_log(0).read_text()
    assert "made no optimizer step" in log0 and "checkpoint.stall_timeout_s=8" in log0, log0[-2000:]
    assert f"resumed from checkpoint at step {res['resumed_from_step']}" in log0
    assert no_process_of(run) == []
