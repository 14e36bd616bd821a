"""One `alchemist monitor` per home (issue 35, item 5): a second one started while the first
is still bringing Prometheus up refuses in one line, instead of starting a second Prometheus
on the same data directory. The Prometheus here is a stand-in that never becomes ready, so
the first monitor stays in exactly that window for as long as the test needs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.test_local_runs import wait_for

pytestmark = pytest.mark.timeout(240)

SLOW_PROMETHEUS = """#!{python}
import os, sys, time
from pathlib import Path
Path(os.environ["STARTED_DIR"], str(os.getpid())).write_text(" ".join(sys.argv[1:]))
while True:  # never answers /-/ready
    time.sleep(1)
"""


def test_a_second_monitor_on_one_home_refuses_in_one_line(tmp_path: Path):
    fake = tmp_path / "prometheus"
    fake.write_text(SLOW_PROMETHEUS.format(python=sys.executable))
    fake.chmod(0o755)
    started = tmp_path / "started"
    started.mkdir()
    home = tmp_path / "home"
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home),
               PROMETHEUS_BIN=str(fake), STARTED_DIR=str(started))
    argv = [sys.executable, "-m", "alchemist_jobs", "monitor", "--port", "0"]
    first = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: list(started.iterdir()), 60, "the first monitor's Prometheus")
        second = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                                timeout=45)
        assert second.returncode == 2, second.stdout + second.stderr
        err = second.stderr.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert err.startswith("error: alchemist monitor: another monitor") and str(home) in err
        assert len(list(started.iterdir())) == 1  # no second Prometheus on the same data
        assert first.poll() is None
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    for pid in (int(p.name) for p in started.iterdir()):  # the monitor stopped its Prometheus
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"the first monitor left its Prometheus (pid {pid}) running")
