"""Reported metrics are part of a run's state (issue 35, item 3): what a script passes to
`alchemist_jobs.report.report(accuracy=...)` shows in the run's summary, `status` (and
`--json`), `list` (its default columns and `--columns`) and the dashboard's rows and charts,
and an ended run keeps its series, one point per step, in its run directory. The job is a
torch script as a user writes one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.integration.test_local_runs import only_run

pytestmark = pytest.mark.timeout(420)

STEPS = 24
TRAIN = f"""
import torch
import torch.distributed as dist
from alchemist_jobs.report import report

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
x = torch.randn(128, 4)
y = (x[:, 0] > 0).long()
for step in range(1, {STEPS} + 1):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    extra = dict(f1=step / 100) if step % 6 == 0 else {{}}
    report(step=step, loss=loss.item(), total_steps={STEPS}, samples=128, accuracy=accuracy,
           **extra)
print(f"rank {{rank}} final accuracy {{accuracy:.4f}}")
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> tuple[Path, object, str]:
    base = tmp_path_factory.mktemp("metrics")
    home = base / "home"
    project = base / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    (project / "job.yaml").write_text("name: mine\ntask: {script: train.py}\nprocs_per_node: 2\n"
                                      "max_restarts: 0\nalgorithm: {name: sync}\n")
    r = cli("run", str(project / "job.yaml"), home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    return home, only_run(home), r.stdout


def _final_accuracy(out: str) -> float:
    line = next(ln for ln in out.splitlines() if ln.startswith("rank 0 final accuracy "))
    return float(line.split()[-1])


def test_the_summary_and_status_show_the_reported_metrics(ran):
    home, run, out = ran
    acc = _final_accuracy(out)
    summary = out[out.index(f"run {run.run_id}: succeeded"):]
    assert f"  accuracy        {acc:.4f}" in summary, summary
    assert "  f1              0.2400" in summary, summary
    status = cli("status", run.run_id, home=home)
    assert status.returncode == 0, status.stderr
    assert f"accuracy   {acc:.4f}" in status.stdout and "f1         0.2400" in status.stdout
    assert "algorithm  sync" in status.stdout, status.stdout
    doc = json.loads(cli("status", run.run_id, "--json", home=home).stdout)
    assert doc["metrics"]["accuracy"] == pytest.approx(acc, abs=1e-4)
    assert doc["metrics"]["f1"] == pytest.approx(0.24)
    assert doc["algorithm"] == "sync" and doc["duration_s"] > 0
    assert doc["progress"]["metrics"]["accuracy"] == pytest.approx(acc, abs=1e-4)


def test_list_shows_algorithm_accuracy_duration_and_reason_and_takes_columns(ran):
    home, run, out = ran
    acc = _final_accuracy(out)
    listed = cli("list", home=home)
    assert listed.returncode == 0, listed.stderr
    head, row = listed.stdout.splitlines()[:2]
    assert head.split() == ["RUN", "STATE", "ALGORITHM", "WORKERS", "STEP", "ACCURACY",
                            "DURATION", "CREATED", "REASON"], head
    assert row.split()[:6] == [run.run_id, "succeeded", "sync", "2", f"{STEPS}/{STEPS}",
                               f"{acc:.4f}"], row
    chosen = cli("list", "--columns", "run,state,algorithm,accuracy,f1,duration,reason",
                 home=home)
    assert chosen.returncode == 0, chosen.stderr
    head, row = chosen.stdout.splitlines()[:2]
    assert head.split() == ["RUN", "STATE", "ALGORITHM", "ACCURACY", "F1", "DURATION", "REASON"]
    assert row.split()[:5] == [run.run_id, "succeeded", "sync", f"{acc:.4f}", "0.2400"], row
    assert row.split()[5].endswith("s"), row
    doc = json.loads(cli("list", "--json", home=home).stdout)[0]
    assert doc["metrics"]["f1"] == pytest.approx(0.24) and doc["algorithm"] == "sync"


def test_a_column_that_is_none_is_one_line(ran):
    home, _, _ = ran
    r = cli("list", "--columns", "run,acuracy", home=home)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: --columns: 'acuracy'"), \
        r.stderr
    assert "did you mean accuracy?" in r.stderr and "f1" in r.stderr, r.stderr


def test_the_dashboard_has_the_metrics_and_the_ended_runs_series_at_step_resolution(ran):
    from alchemist_jobs.ui.backends import Backends

    home, run, out = ran
    acc = _final_accuracy(out)
    b = Backends(["local"], home=home)
    row = next(r for r in b.runs("local") if r.run_id == run.run_id)
    assert row.algorithm == "sync" and row.accuracy == pytest.approx(acc, abs=1e-4)
    assert row.metrics["f1"] == pytest.approx(0.24) and row.duration_s > 0
    series = b.metrics("local", run.run_id)
    assert [p[0] for p in series.loss] == list(range(1, STEPS + 1))
    assert [p[0] for p in series.accuracy] == list(range(1, STEPS + 1))
    assert series.accuracy[-1][1] == pytest.approx(acc, abs=1e-4)
    assert [p[0] for p in series.metrics["f1"]] == [6, 12, 18, 24]
    assert all(p[1] > 0 for p in series.throughput)
    # A fresh dashboard (nothing sampled while the run went on) reads the same from the
    # run directory.
    again = Backends(["local"], home=home).metrics("local", run.run_id)
    assert again.loss == series.loss and again.metrics == series.metrics
