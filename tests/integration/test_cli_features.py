"""What users of SkyPilot, TorchX and Ray Jobs expect from the CLI, on the local stack:
`run --detach` (survives SIGHUP), `submit --stack local`, --json shapes, list order and
filters, --version, unique-part ids, `run train.py -- ARGS`, --env."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from alchemist_jobs import cli as cli_mod
from alchemist_jobs.rundir import RunDir
from tests.conftest import EXAMPLES, cli
from tests.integration.test_local_runs import no_process_of

pytestmark = pytest.mark.timeout(420)


def wait_finished(home: Path, run_id: str, timeout: float = 300) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = cli("status", run_id, "--json", home=home)
        st = json.loads(r.stdout)
        if st["state"] not in ("pending", "running", "restarting"):  # not ended yet
            return st
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not finish")


def test_a_detached_run_survives_sighup_and_is_followed_by_id(home):
    r = cli("run", str(EXAMPLES / "digits.yaml"), "--detach", "--set", "hyper.epochs=3",
            "--env", "ALCHEMIST_TEST_MARK=5", home=home)
    assert r.returncode == 0, r.stderr
    run_id = r.stdout.strip()
    assert run_id.startswith("digits-") and "alchemist status" in r.stderr
    run = RunDir(home / "runs" / run_id)
    launcher = run.state()["launcher_pid"]
    os.kill(launcher, signal.SIGHUP)  # as a closed terminal would
    st = wait_finished(home, run_id[-8:])  # any unique part of the id finds it
    assert st["state"] == "succeeded", st
    assert st["result"]["test_accuracy"] > 0.8 and st["run_dir"] == str(run.path)
    assert "ALCHEMIST_TEST_MARK: '5'" in run.spec.read_text()
    assert no_process_of(run) == []


def test_submit_on_the_local_stack_runs_detached(home):
    r = cli("submit", str(EXAMPLES / "digits.yaml"), "--stack", "local", "--set",
            "hyper.epochs=1", home=home)
    assert r.returncode == 0, r.stderr
    assert wait_finished(home, r.stdout.strip())["state"] == "succeeded"


def test_a_script_runs_without_a_spec(home, tmp_path):
    (tmp_path / "train.py").write_text(
        "import sys, os\nprint('args', sys.argv[1:], os.environ['WORLD_SIZE'], flush=True)\n")
    r = cli("run", str(tmp_path / "train.py"), "--set", "procs_per_node=2", "--quiet", "--",
            "--epochs", "3", home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    log = next((home / "runs").iterdir()) / "logs" / "rank-1.log"
    assert "args ['--epochs', '3'] 2" in log.read_text()


def _fake_run(home: Path, run_id: str, state: str, created: float) -> None:
    d = home / "runs" / run_id
    (d / "logs").mkdir(parents=True)
    (d / "spec.yaml").write_text("name: x\n")
    (d / "run.json").write_text(json.dumps(dict(run_id=run_id, name="digits", state=state,
                                                created=created, workers=2)))


def test_list_is_newest_first_with_limit_state_and_json(home, capsys):
    _fake_run(home, "digits-20260101-000000-0000aaaa", "succeeded", 100.0)
    _fake_run(home, "digits-20260101-000100-0000bbbb", "failed", 200.0)
    _fake_run(home, "digits-20260101-000200-0000cccc", "succeeded", 300.0)
    assert cli_mod.main(["list", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["run_id"][-4:] for r in runs] == ["cccc", "bbbb", "aaaa"]
    assert set(runs[0]) == {"run_id", "name", "stack", "state", "created", "ended", "workers",
                            "restarts", "step", "total_steps", "message", "run_dir",
                            "exit_codes", "restarts_counted", "stuck_pods", "failure",
                            "progress", "result", "algorithm", "metrics", "duration_s",
                            "requirements"}
    assert cli_mod.main(["list", "--state", "succeeded", "--limit", "1"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == 1 and rows[0].startswith("digits-20260101-000200-0000cccc")
    # any unique part of an id; an ambiguous part says which runs it matches
    assert cli_mod.main(["status", "bbbb", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "failed"
    assert cli_mod.main(["status", "digits-2026"]) == 2
    err = capsys.readouterr().err
    assert "3 runs match" in err and err.count("\n") == 1


def test_version_and_dry_run_json(home, capsys):
    with pytest.raises(SystemExit) as e:
        cli_mod.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("alchemist ")
    assert cli_mod.main(["run", str(EXAMPLES / "digits.yaml"), "--dry-run", "--json",
                         "--set", "env.X=5"]) == 0
    req = json.loads(capsys.readouterr().out)
    assert req["stack"] == "local" and req["processes"][0]["role"] == "agent"
    assert req["processes"][0]["env"]["X"] == "5"
    assert not home.exists()


def test_run_json_means_json_in_the_foreground_and_detached(home):
    """`run --json`: no progress display, one JSON document (the finished run's status, as
    `status --json` gives it, plus wall_s); `run --detach --json`: {"run_id", "stack"}."""
    r = cli("run", str(EXAMPLES / "digits.yaml"), "--json", "--set", "hyper.epochs=1", home=home)
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout)
    assert done["state"] == "succeeded" and done["result"]["test_accuracy"] > 0.5
    assert done["wall_s"] > 0
    status = json.loads(cli("status", done["run_id"], "--json", home=home).stdout)
    assert {k: v for k, v in done.items() if k != "wall_s"} == status

    r = cli("run", str(EXAMPLES / "digits.yaml"), "--detach", "--json", "--set", "hyper.epochs=1",
            home=home)
    assert r.returncode == 0, r.stderr
    started = json.loads(r.stdout)
    assert set(started) == {"run_id", "stack"} and started["stack"] == "local"
    assert wait_finished(home, started["run_id"])["state"] == "succeeded"


def test_run_json_with_follow_is_refused(home):
    r = cli("run", str(EXAMPLES / "digits.yaml"), "--json", "--follow", home=home)
    assert r.returncode == 2 and "--json with --follow" in r.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_a_failed_detached_run_says_which_rank_failed_how_and_why(home, tmp_path):
    """Issue 24.3: after the CLI has exited, `status`, its `--json` and the dashboard's API
    name the rank whose failure ended the run, its exit code and its last lines; the group's
    restarts are counted. They were an empty message, 0 restarts and rank 0's log."""
    (tmp_path / "shard.py").write_text(
        "import os, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    raise ValueError('shard 7 is truncated at byte 4096')\n"
        "time.sleep(300)\n")
    (tmp_path / "job.yaml").write_text(
        "name: shard\ntask: {script: shard.py}\nprocs_per_node: 2\nmax_restarts: 1\n")
    r = cli("run", str(tmp_path / "job.yaml"), "--detach", home=home)
    assert r.returncode == 0, r.stderr
    run_id = r.stdout.strip()
    st = wait_finished(home, run_id)
    assert st["state"] == "failed" and st["restarts"] == 1, st
    f = st["failure"]
    assert f["rank"] == 1 and f["exit_code"] == 1 and f["signal"] is None, f
    assert "rank 1 failed: exit 1" in st["message"] and "shard 7 is truncated" in st["message"]
    assert any("ValueError: shard 7 is truncated at byte 4096" in line for line in f["lines"])
    text = cli("status", run_id, home=home).stdout
    assert "restarts   1" in text and "why it failed:" in text and "shard 7 is truncated" in text
    for _ in range(2):  # read the run's files, then the index of ended runs
        listed = json.loads(cli("list", "--json", home=home).stdout)
        assert [r["failure"] for r in listed] == [f] and listed[0]["restarts"] == 1

    from fastapi.testclient import TestClient

    from tests.ui.conftest import AUTH, make_app

    app, _ = make_app(home)
    with TestClient(app, base_url="http://127.0.0.1:8740", headers=AUTH) as c:
        d = c.get(f"/api/v1/stacks/local/runs/{run_id}").json()
    assert d["failed_rank"] == 1 and d["restarts"] == 1 and "shard 7" in d["reason"], d
    assert any("shard 7 is truncated" in line for line in d["failure_lines"])


def test_rm_removes_ended_runs_by_id_state_and_age_and_a_live_one_only_when_told(home, tmp_path):
    """Issue 24.2: `alchemist rm` and the dashboard's DELETE, over real runs: one that
    succeeded, one that failed, one still running."""
    (tmp_path / "ok.py").write_text("print('fine', flush=True)\n")
    (tmp_path / "bad.py").write_text("raise SystemExit('broken')\n")
    (tmp_path / "long.py").write_text("import time\ntime.sleep(600)\n")
    ids = {}
    for name in ("ok", "bad", "long"):
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\ntask: {{script: {name}.py}}\nmax_restarts: 0\n")
        r = cli("run", str(tmp_path / f"{name}.yaml"), "--detach", home=home)
        assert r.returncode == 0, r.stderr
        ids[name] = r.stdout.strip()
    for name in ("ok", "bad"):
        wait_finished(home, ids[name])
    live = RunDir(home / "runs" / ids["long"])
    deadline = time.time() + 120
    while not live.worker_records() and time.time() < deadline:
        time.sleep(0.2)  # its worker has started
    assert live.worker_records(), "the long run's worker never started"

    def runs() -> set[str]:
        return {r["run_id"] for r in json.loads(cli("list", "--json", home=home).stdout)}

    r = cli("rm", ids["long"], home=home)  # running: refused, one line, nothing removed
    assert r.returncode == 2 and "running" in r.stderr and "--force" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and runs() == set(ids.values())
    for bad, field in ((["--older-than", "soon"], "--older-than"), ([], "nothing named")):
        r = cli("rm", *bad, home=home)
        assert r.returncode == 2 and field in r.stderr, r.stderr
    r = cli("rm", "--older-than", "1h", home=home)  # every run is younger
    assert r.returncode == 0 and runs() == set(ids.values()), r.stderr
    r = cli("rm", "--state", "failed", "--dry-run", home=home)
    assert f"would remove {ids['bad']}" in r.stdout and runs() == set(ids.values())
    r = cli("rm", "--state", "failed", home=home)
    assert r.returncode == 0 and f"removed {ids['bad']}" in r.stdout, r.stderr
    assert runs() == {ids["ok"], ids["long"]} and not (home / "runs" / ids["bad"]).exists()

    from fastapi.testclient import TestClient

    from alchemist_jobs.ui import security
    from tests.ui.conftest import AUTH, make_app

    app, _ = make_app(home)
    change = dict(AUTH, **{security.CSRF_HEADER: security.CSRF_VALUE})
    with TestClient(app, base_url="http://127.0.0.1:8740", headers=change) as c:
        assert c.delete(f"/api/v1/stacks/local/runs/{ids['long']}").status_code == 409
        assert c.delete(f"/api/v1/stacks/local/runs/{ids['ok']}").status_code == 200
        assert c.delete(f"/api/v1/stacks/local/runs/{ids['ok']}").status_code == 404
    assert runs() == {ids["long"]}

    r = cli("rm", ids["long"], "--force", home=home)  # cancelled, its processes gone, removed
    assert r.returncode == 0 and "cancelled" in r.stdout, r.stdout + r.stderr
    assert runs() == set() and not [p for p in (home / "runs").iterdir()
                                    if not p.name.startswith(".ended-runs")]
    assert no_process_of(live) == []
