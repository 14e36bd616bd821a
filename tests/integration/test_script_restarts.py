"""A failure is shown when it happens (issue 35, item 2): when a rank of a script job fails and
torchrun restarts the group, `alchemist run` says so at once ("rank 1 failed (ValueError:
...); restarting 1/3"), `status` and `list` count the restart while the run goes on, and a
failure that repeats identically (same exception line, same step) stops retrying after the
second attempt with one line saying so. The job is a torch script as a user writes one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, cli
from tests.integration.test_local_runs import no_process_of, only_run

pytestmark = pytest.mark.timeout(420)

# Rank 1 reads a truncated shard at step 3, on every attempt. On the second attempt it first
# waits until the test lets it fail, so the test sees the first failure reported while the
# job still runs.
TRAIN = """
import os, time
from pathlib import Path
import torch.distributed as dist
from alchemist_jobs.report import report

dist.init_process_group("gloo")
rank = dist.get_rank()
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) + 1
for step in range(1, 10):
    report(step=step, loss=1.0 / step, total_steps=9)
    if step == 3 and rank == 1:
        go = Path(os.environ["GO_FILE"])
        deadline = time.monotonic() + 300
        while attempt > 1 and not go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        raise ValueError("shard 7 is truncated")
    dist.barrier()
"""


class Lines:
    """A command's merged output, read line by line in a thread as it comes."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()

    def until(self, pred, timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                hit = next((ln for ln in self.lines if pred(ln)), None)
                if hit is not None:
                    return hit
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and not self.changed.wait(1.0):
                    raise AssertionError(f"timed out waiting for {what}:\n"
                                         + "\n".join(self.lines[-40:]))
                self.changed.wait(min(left, 1.0))


def test_a_restart_is_shown_at_once_and_an_identical_repeat_stops_retrying(home, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    (project / "job.yaml").write_text("name: shards\ntask: {script: train.py}\n"
                                      "procs_per_node: 2\nmax_restarts: 3\n")
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home))
    out = Lines([sys.executable, "-m", "alchemist_jobs", "run", str(project / "job.yaml"),
                 "--set", f"env.GO_FILE={go}"], env)
    try:
        line = out.until(lambda ln: "restarting 1/3" in ln, 240, "the first failure's line")
        assert line.strip() == "rank 1 failed (ValueError: shard 7 is truncated); restarting 1/3"
        # Shown while the job goes on: the second attempt waits for `go`.
        assert out.proc.poll() is None and not go.exists()
        st = cli("status", only_run(home).run_id, "--json", home=home)
        assert st.returncode == 0, st.stderr
        doc = json.loads(st.stdout)
        assert doc["state"] in ("restarting", "running") and doc["restarts"] == 1, doc
        listed = json.loads(cli("list", "--json", home=home).stdout)
        assert [(d["state"] in ("restarting", "running"), d["restarts"]) for d in listed] == \
            [(True, 1)], listed
    finally:
        go.write_text("")
    code = out.proc.wait(timeout=240)
    shown = "\n".join(out.lines)
    assert code == 1, shown
    stop = ("rank 1 failed the same way on attempts 1 and 2 (ValueError: shard 7 is truncated, "
            "at step 3); not restarting again")
    assert sum(1 for ln in out.lines if ln.strip() == stop) == 1, shown
    assert "restarting 2/3" not in shown, shown
    run = only_run(home)
    rec = run.state()
    assert rec["state"] == "failed" and rec["message"] == stop, rec
    assert rec["failure"]["rank"] == 1, rec["failure"]
    # The third attempt never got to fail: two tracebacks in rank 1's log, not three.
    assert run.rank_log(1).read_text().count("ValueError: shard 7 is truncated") == 2
    status = cli("status", run.run_id, home=home)
    assert "restarts   1" in status.stdout and stop in status.stdout, status.stdout
    assert no_process_of(run) == []
