"""`script:` tasks get metrics and progress (issue 11.9): every worker serves the process
metrics on its own port; `alchemist_jobs.report.report()` adds step, loss and the script's
own values to Prometheus, TensorBoard and the run's progress."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from alchemist_jobs.ui.series import metrics_url
from tests.conftest import EXAMPLES, REPO, cli
from tests.integration.test_local_runs import no_process_of, only_run, wait_for

pytestmark = pytest.mark.timeout(420)

WAITING_SCRIPT = """
import os, time
from pathlib import Path
from alchemist_jobs.report import report
for step in range(1, 6):
    report(step=step, loss=1.0 / step, total_steps=5, samples=8, accuracy=0.1 * step)
go = Path(os.environ["GO_FILE"])
deadline = time.monotonic() + 300
while not go.exists() and time.monotonic() < deadline:  # until the test has scraped us
    time.sleep(0.05)
"""


def test_a_script_workers_metrics_and_reports_are_served_live(home, tmp_path: Path):
    (tmp_path / "reporting.py").write_text(WAITING_SCRIPT)
    (tmp_path / "job.yaml").write_text(
        "name: rep\ntask: {script: reporting.py}\nprocs_per_node: 2\nmax_restarts: 0\n")
    go = tmp_path / "go"
    p = subprocess.Popen([sys.executable, "-m", "alchemist_jobs", "run", str(tmp_path / "job.yaml"),
                          "--quiet", "--set", f"env.GO_FILE={go}"],
                         cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run = wait_for(lambda: (home / "runs").exists() and only_run(home), 60, "run dir")
        prog = wait_for(lambda: (run.progress() or {}).get("step") == 5 and run.progress(), 120,
                        "rank 0's progress at step 5")
        texts = {}
        for rank in (0, 1):
            url = wait_for(lambda: metrics_url(run.path, f"rank-{rank}"), 60,
                           f"rank {rank}'s metrics endpoint")  # through the run's metrics bridge
            texts[rank] = wait_for(lambda: _scrape_once_reported(url), 60, f"rank {rank} scrape")
        go.write_text("")
        out, _ = p.communicate(timeout=120)
    finally:
        go.write_text("")
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out
    assert prog["loss"] == pytest.approx(0.2) and prog["total_steps"] == 5
    for rank, text in texts.items():
        assert "alchemist_process_memory_bytes{" in text
        assert 'job="rep"' in text and f'rank="{rank}"' in text and 'name="accuracy"' in text
        assert any(ln.startswith("alchemist_steps_total{") and ln.endswith(" 5.0")
                   for ln in text.splitlines())
    assert no_process_of(run) == []


def _scrape_once_reported(url: str) -> str | None:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return text if "alchemist_script_metric{" in text else None


def test_the_report_example_shows_progress_and_tensorboard_scalars(home):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    r = cli("run", str(EXAMPLES / "report.yaml"), "--set", "task.args=[--steps, 60]", home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    run = only_run(home)
    prog = run.progress()
    assert prog["step"] == 60 and prog["total_steps"] == 60 and prog["final"] is True
    acc = EventAccumulator(str(run.tensorboard))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "script/accuracy"} <= tags
    assert [e.step for e in acc.Scalars("train/loss")][-1] == 60


def test_report_outside_alchemist_does_nothing(monkeypatch):
    from alchemist_jobs.report import report
    from alchemist_jobs.runtime import script_report

    monkeypatch.setattr(script_report, "_current", None)
    report(step=1, loss=0.5, accuracy=0.9)  # no run: nothing to do, nothing raised
