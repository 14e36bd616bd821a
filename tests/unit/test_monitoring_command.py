"""`alchemist monitor` without starting anything: bad input is one line and exit 2 with nothing
written; discovery turns run directories into file-SD targets; the config is what Prometheus
needs. (The real Prometheus runs in tests/integration/test_prometheus_local.py.)"""

from __future__ import annotations

import os
import socket
import time

import pytest
import yaml

from alchemist_jobs.cli import main
from alchemist_jobs.commands.monitor import render_config
from alchemist_jobs.rundir import RunDir, write_json_atomic


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """An executable that stands where a prometheus binary would: these tests fail before
    anything is started, and must do so whether or not this machine has Prometheus."""
    exe = tmp_path / "bin" / "prometheus"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\nexit 3\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PROMETHEUS_BIN", str(exe))
    return exe


def _run(args, capsys):
    code = main(["monitor", *args])
    err = capsys.readouterr().err.strip()
    return code, err


def test_no_prometheus_binary_is_one_line_with_the_install_command(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("PROMETHEUS_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    code, err = _run(["--home", str(tmp_path / "home")], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert "no Prometheus binary found" in err
    assert "apt-get install -y --no-install-recommends prometheus" in err and "PROMETHEUS_BIN" in err
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--scrape-interval", "fast"], "--scrape-interval 'fast'"),
        (["--scrape-interval", "0s"], "--scrape-interval '0s'"),
        (["--retention", "forever"], "--retention 'forever'"),
        (["--rules", "/nonexistent/rules"], "--rules '/nonexistent/rules'"),
        (["--port", "70000"], "--port 70000"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag_and_write_nothing(tmp_path, stand_in, capsys, args, words):
    code, err = _run(["--home", str(tmp_path / "home"), *args], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert words in err and "accepted" in err
    assert not (tmp_path / "home").exists()


def test_bad_prometheus_bin_names_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PROMETHEUS_BIN", str(tmp_path / "nope"))
    code, err = _run(["--home", str(tmp_path)], capsys)
    assert code == 2 and "PROMETHEUS_BIN=" in err and "nope" in err


def test_a_port_in_use_is_refused(tmp_path, stand_in, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, err = _run(["--home", str(tmp_path / "home"), "--port", str(port)], capsys)
    assert code == 2 and f"127.0.0.1:{port} is in use" in err
    assert not (tmp_path / "home").exists()


def test_a_second_monitor_on_the_same_home_is_refused(tmp_path, stand_in, capsys):
    (tmp_path / "monitor").mkdir()
    write_json_atomic(
        tmp_path / "monitor" / "monitor.json", dict(pid=os.getppid(), prometheus_url="http://127.0.0.1:9999")
    )
    code, err = _run(["--home", str(tmp_path), "--port", "0"], capsys)
    assert code == 2 and "another monitor" in err and "127.0.0.1:9999" in err


# --- discovery -------------------------------------------------------------------------------


def _run_dir(root, run_id, state, launcher_pid, workers, algorithm="sync"):
    run = RunDir(root / "runs" / run_id)
    run.create()
    run.spec.write_text(yaml.safe_dump({"name": run_id.split("-")[0], "algorithm": {"name": algorithm}}))
    run.update_state(
        run_id=run_id,
        name=run_id.split("-")[0],
        state=state,
        created=time.time(),
        launcher_pid=launcher_pid,
        agents=[],
    )
    for stem, rec in workers.items():
        write_json_atomic(run.workers / f"{stem}.json", rec)
    return run


def test_config_keeps_worker_labels_and_fits_the_timeout_to_the_interval(tmp_path):
    targets = tmp_path / "a dir" / "targets.json"
    cfg = yaml.safe_load(
        render_config(
            scrape_interval="1s",
            rule_glob=str(tmp_path / "r" / "*.yaml"),
            targets_file=targets,
            self_address="127.0.0.1:9090",
            password_file=tmp_path / "a dir" / "password",
        )
    )
    assert cfg["global"]["scrape_interval"] == cfg["global"]["scrape_timeout"] == "1s"
    job = next(j for j in cfg["scrape_configs"] if j["job_name"] == "alchemist")
    assert job["honor_labels"] is True
    assert job["file_sd_configs"][0]["files"] == [str(targets)]
    assert cfg["rule_files"] == [str(tmp_path / "r" / "*.yaml")]
    # Prometheus asks everyone for its login (web.yml), itself included.
    own = next(j for j in cfg["scrape_configs"] if j["job_name"] == "prometheus")
    assert own["basic_auth"] == {
        "username": "alchemist",
        "password_file": str(tmp_path / "a dir" / "password"),
    }
    slow = yaml.safe_load(
        render_config(
            scrape_interval="1m",
            rule_glob="r",
            targets_file=targets,
            self_address="127.0.0.1:1",
            password_file=targets,
        )
    )
    assert slow["global"]["scrape_timeout"] == "10s"


# --- the state folder is the owner's alone (issue 37.3) ---------------------------------------


def test_a_monitor_folder_that_is_a_link_is_refused_and_nothing_is_written_through_it(
    tmp_path, stand_in, capsys
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (home / "monitor").symlink_to(elsewhere)
    code, err = _run(["--home", str(home), "--port", "0"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert str(home / "monitor") in err and "a link" in err and "accepted" in err
    assert list(elsewhere.iterdir()) == []


def test_a_monitor_folder_others_could_write_is_refused(tmp_path, stand_in, capsys):
    home = tmp_path / "home"
    (home / "monitor").mkdir(parents=True)
    (home / "monitor").chmod(0o775)
    code, err = _run(["--home", str(home), "--port", "0"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "mode 0775" in err and "chmod 700" in err
    assert list((home / "monitor").iterdir()) == []
