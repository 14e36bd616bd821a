"""`alchemist monitor` when it starts a process: a stand-in Prometheus that exits at start is
reported and leaves nothing, signal handlers are restored, a folder others could read is made
private; discovery follows running runs only (a real exited process is a dead launcher); and
the command imports nothing heavy in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

from alchemist_jobs.cli import main
from alchemist_jobs.commands.monitor import TargetFinder
from tests.unit.test_monitoring_command import _run_dir, stand_in  # noqa: F401 (the fixture)


def test_prometheus_that_fails_to_start_is_reported_and_nothing_is_left(tmp_path, stand_in, capsys):  # noqa: F811 (the fixture)
    code = main(["monitor", "--home", str(tmp_path), "--port", "0"])
    err = capsys.readouterr().err
    assert code == 1 and "Prometheus exited at start (code 3)" in err
    assert not (tmp_path / "monitor" / "monitor.json").exists()


def test_targets_follow_running_runs_only(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me = os.getpid()
    _run_dir(
        tmp_path,
        "digits-a",
        "running",
        me,
        {
            "rank-0": dict(rank=0, node="h0", metrics_port=9101, pid=me),
            "rank-1": dict(rank=1, node="h1", metrics_port=9102, pid=me),
            "rank-2": dict(rank=2, node="h1", metrics_port=9103, pid=me, finished=1.0),
            "rank-3": dict(rank=3, node="h1", pid=me),  # a user script: no endpoint
            "server-0": dict(rank="server-0", node="h0", metrics_port=9201, role="server"),
        },
        algorithm="async",
    )
    _run_dir(tmp_path, "digits-b", "succeeded", me, {"rank-0": dict(rank=0, node="h0", metrics_port=9301)})
    _run_dir(
        tmp_path, "digits-c", "running", dead.pid, {"rank-0": dict(rank=0, node="h0", metrics_port=9401)}
    )
    groups = TargetFinder(tmp_path).groups()
    assert groups == [
        {
            "targets": ["127.0.0.1:9101"],
            "labels": dict(job="digits", run="digits-a", rank="0", node="h0", algorithm="async"),
        },
        {
            "targets": ["127.0.0.1:9102"],
            "labels": dict(job="digits", run="digits-a", rank="1", node="h1", algorithm="async"),
        },
        {
            "targets": ["127.0.0.1:9201"],
            "labels": dict(job="digits", run="digits-a", rank="server-0", node="h0", algorithm="async"),
        },
    ]


def test_monitor_command_imports_nothing_heavy():
    code = (
        "import sys, alchemist_jobs.cli as c; c.build_parser(); "
        "import alchemist_jobs.commands.monitor; "
        "print(sorted(m for m in ('torch', 'kubernetes', 'pulumi', 'boto3', 'grafana_foundation_sdk',"
        " 'tensorboard') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_signal_handlers_are_restored_after_the_command(tmp_path, stand_in, capsys):  # noqa: F811 (the fixture)
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    main(["monitor", "--home", str(tmp_path), "--port", "0"])
    capsys.readouterr()
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_monitor_folder_others_could_only_read_is_made_private(tmp_path, stand_in, capsys):  # noqa: F811 (the fixture)
    home = tmp_path / "home"
    (home / "monitor").mkdir(parents=True)
    (home / "monitor").chmod(0o755)
    (home / "monitor" / "prometheus.log").write_text("from an older monitor\n")
    (home / "monitor" / "prometheus.log").chmod(0o644)
    code = main(["monitor", "--home", str(home), "--port", "0"])
    capsys.readouterr()
    assert code == 1  # the stand-in Prometheus exits at start
    assert (home / "monitor").stat().st_mode & 0o777 == 0o700
    for path in (home / "monitor").iterdir():
        assert path.lstat().st_mode & 0o077 == 0, path
