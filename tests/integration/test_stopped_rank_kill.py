"""A SIGSTOPped rank, once its peers' stall watchdog has named it, is gone within seconds
(issue 37.6): a stopped process acts on no SIGTERM until it is continued, so torchrun's stop
(SIGTERM, then SIGKILL after its 30 s close timeout) and the launcher's (SIGTERM, then SIGKILL
after its grace) waited out their whole timeout for it. Now every stop sends SIGCONT after the
SIGTERM. A real 2-worker local run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from alchemist_jobs.processes import alive
from alchemist_jobs.rundir import read_json
from tests.conftest import EXAMPLES, REPO
from tests.integration.test_local_runs import only_run, wait_for

pytestmark = pytest.mark.timeout(600)

NAMED = "rank 1 stopped (no heartbeat for"
PROMPT_S = 12.0  # the watchdog's exit and torchrun's stop, on a loaded machine; 30 s before


def test_a_stopped_rank_is_killed_promptly_once_named(home):
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
        wait_for(lambda: len(list(run.checkpoints.glob("step-*.pt"))) >= 1, 240, "a checkpoint")
        victim = read_json(run.worker_file(1))["pid"]
        os.kill(victim, signal.SIGSTOP)  # frozen: alive, holding its sockets, never stepping
        wait_for(lambda: NAMED in run.rank_log(0).read_text(errors="replace"), 240,
                 "rank 0 to name the stopped rank", interval=0.05)
        named = time.monotonic()
        wait_for(lambda: not alive(victim), 120, "the stopped rank to end", interval=0.05)
        took = time.monotonic() - named
        assert took < PROMPT_S, f"the stopped rank lived {took:.1f} s after it was named"
    finally:
        if victim is not None:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        p.communicate(timeout=120)
