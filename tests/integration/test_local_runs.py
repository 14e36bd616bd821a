"""`alchemist run` on the local stack: real torchrun agents, real worker processes, real gloo
collectives. Each test launches the CLI as a user would and inspects the run directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alchemist_jobs.rundir import RunDir, read_json
from tests.conftest import EXAMPLES, REPO, cli

pytestmark = pytest.mark.timeout(420)


def only_run(home: Path) -> RunDir:
    runs = [p for p in (home / "runs").iterdir()]
    assert len(runs) == 1, runs
    return RunDir(runs[0])


def no_process_of(run: RunDir) -> list[int]:
    """Pids of this run's live processes (should be none once it ended): its agents, as
    recorded in run.json, and every process whose environment names the run (workers)."""
    alive = [p for p in run.state().get("agents", []) if _live(p)]
    needle = f"ALCHEMIST_RUN_DIR={run.path}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if needle in env and stat.split(")")[-1].split()[0] != "Z":
            alive.append(int(d.name))
    return sorted(set(alive))


def _live(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(pred, timeout: float, what: str, interval: float = 0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_worker_digits_converges_with_identical_replicas(home):
    r = cli("run", str(EXAMPLES / "digits.yaml"), "--set", "checkpoint.every_steps=40", home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    run = only_run(home)
    res = run.result()
    assert res["test_accuracy"] >= 0.90, res
    assert res["world_size"] == 2 and res["restarts"] == 0 and res["resumed_from_step"] is None
    # The summary the user sees.
    assert "succeeded" in r.stdout and "test accuracy" in r.stdout and "samples/s" in r.stdout
    # Every rank's final parameters, hashed by that rank's own process, are identical.
    digests = {w["rank"]: w["final_param_sha256"] for w in run.worker_records()}
    assert set(digests) == {0, 1} and len(set(digests.values())) == 1, digests
    # Per-rank logs, metrics endpoints, checkpoints (keep 3), TensorBoard events, the spec.
    assert run.rank_log(0).exists() and run.rank_log(1).exists()
    assert all(isinstance(w["metrics_port"], int) for w in run.worker_records())
    ckpts = sorted(p.name for p in run.checkpoints.glob("step-*.pt"))
    assert ckpts == ["step-000000120.pt", "step-000000160.pt", "step-000000200.pt"], ckpts
    assert list(run.tensorboard.glob("events.out.tfevents.*"))
    assert "name: digits" in run.spec.read_text()
    # Gradients really travelled: 230 all-reduce rounds of the 4,810-parameter model.
    comm = res["communication"]
    assert comm["rounds"] == res["steps"] == 230
    assert comm["sent_bytes"] == pytest.approx(230 * 4810 * 4, rel=0.01)
    assert no_process_of(run) == []

    # list / status / logs see the finished run.
    out = cli("list", home=home).stdout
    assert run.run_id in out and "succeeded" in out
    out = cli("status", run.run_id[:12], home=home).stdout
    assert "succeeded" in out and "accuracy" in out
    out = cli("logs", run.run_id, "--rank", "1", home=home).stdout
    assert out.startswith("=== rank 1 attempt 1")
    bad = cli("logs", run.run_id, "--rank", "5", home=home)
    assert bad.returncode == 2 and "ranks 0..1" in bad.stderr


def test_killed_worker_restarts_and_resumes_from_checkpoint(home):
    """SIGKILL rank 1 mid-run: torchrun restarts the group, which resumes from the newest
    checkpoint (not step 0), and the job completes."""
    p = subprocess.Popen(
        [sys.executable, "-m", "alchemist_jobs", "run", str(EXAMPLES / "digits.yaml"),
         "--set", "hyper.epochs=40", "--set", "hyper.batch_size=16",
         "--set", "checkpoint.every_steps=25", "--quiet"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        run = wait_for(lambda: (home / "runs").exists() and only_run(home), 60, "run dir")
        wait_for(lambda: len(list(run.checkpoints.glob("step-*.pt"))) >= 2, 180, "checkpoints")
        victim = read_json(run.worker_file(1))
        os.kill(victim["pid"], signal.SIGKILL)
        out, _ = p.communicate(timeout=360)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out
    res = run.result()
    assert res["restarts"] >= 1, res
    assert res["resumed_from_step"] and res["resumed_from_step"] >= 50, res
    assert res["steps"] == 40 * 45  # ceil(1437/2/16) = 45 steps per epoch, all done
    assert res["test_accuracy"] >= 0.90
    log0 = run.rank_log(0).read_text()
    assert "attempt 2" in log0 and f"resumed from checkpoint at step {res['resumed_from_step']}" in log0
    assert "restarts        1" in out or "restarts        2" in out
    assert no_process_of(run) == []


def test_two_jobs_at_once_do_not_collide(home):
    procs = [subprocess.Popen(
        [sys.executable, "-m", "alchemist_jobs", "run", str(EXAMPLES / "digits.yaml"),
         "--set", "hyper.epochs=3", "--quiet"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=360)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runs = sorted((home / "runs").iterdir())
    assert len(runs) == 2
    for path in runs:
        res = RunDir(path).result()
        assert res["steps"] == 3 * 23 and res["world_size"] == 2
    ports = [w["metrics_port"] for path in runs for w in RunDir(path).worker_records()]
    assert len(set(ports)) == 4


def test_user_script_runs_unmodified(home):
    r = cli("run", str(EXAMPLES / "script.yaml"), "--set", "task.args=[--epochs, 3]", home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    run = only_run(home)
    log = run.rank_log(0).read_text()
    assert "test accuracy" in log and "steps 69" in log  # 3 epochs x 23 batches, rank 0 prints
    assert "test accuracy" not in run.rank_log(1).read_text()  # rank 1 is silent by design


def test_failing_script_fails_the_job_with_its_traceback(home, tmp_path):
    (tmp_path / "boom.py").write_text("raise SystemExit('boom: bad data')\n")
    (tmp_path / "job.yaml").write_text(
        "name: boom\ntask: {script: boom.py}\nprocs_per_node: 2\nmax_restarts: 0\n")
    r = cli("run", str(tmp_path / "job.yaml"), home=home)
    assert r.returncode == 1
    assert "failed" in r.stdout and "boom: bad data" in r.stdout
    assert read_json(only_run(home).state_file)["state"] == "failed"


def test_ctrl_c_stops_every_process(home):
    p = subprocess.Popen(
        [sys.executable, "-m", "alchemist_jobs", "run", str(EXAMPLES / "digits.yaml"),
         "--set", "hyper.epochs=500", "--quiet"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    run = wait_for(lambda: (home / "runs").exists() and only_run(home), 60, "run dir")
    wait_for(lambda: (run.progress() or {}).get("step", 0) > 5, 180, "training to start")
    assert len(no_process_of(run)) >= 3  # the agent and two workers
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 130, out
    assert "cancelled" in out
    assert run.state()["state"] == "cancelled"
    wait_for(lambda: no_process_of(run) == [], 15, "all processes to exit")


def test_cancel_from_another_terminal(home):
    p = subprocess.Popen(
        [sys.executable, "-m", "alchemist_jobs", "run", str(EXAMPLES / "digits.yaml"),
         "--set", "hyper.epochs=500", "--quiet"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    run = wait_for(lambda: (home / "runs").exists() and only_run(home), 60, "run dir")
    wait_for(lambda: (run.progress() or {}).get("step", 0) > 5, 180, "training to start")
    assert "running" in cli("list", home=home).stdout
    r = cli("cancel", run.run_id, home=home)
    assert r.returncode == 0 and "cancelled" in r.stdout
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 1 and "cancelled" in out
    wait_for(lambda: no_process_of(run) == [], 15, "all processes to exit")


def test_two_simulated_nodes(home):
    """nodes=2 starts two torchrun agents that meet through c10d rendezvous in a file store
    of the run's private directory (no port: another account could reach one)."""
    r = cli("run", str(EXAMPLES / "digits.yaml"), "--set", "nodes=2", "--set", "procs_per_node=1",
            "--set", "hyper.epochs=3", home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    run = only_run(home)
    nodes = {w["node"] for w in run.worker_records()}
    assert len(nodes) == 2, nodes
    assert run.agent_log(0).exists() and run.agent_log(1).exists()
    assert json.loads(run.result_file.read_text())["world_size"] == 2


def test_two_simulated_nodes_meet_whatever_other_sockets_hold(home, monkeypatch):
    """The rendezvous port is the kernel's pick at node 0's own bind, never a port chosen
    "free" ahead and bound seconds later: by then any socket of the machine can hold it, and
    torch's c10d backend, failing to host its store there, connects to whatever does
    (c10d_rendezvous_backend._create_tcp_store retries as a client) and the run fails. Here
    every port the launcher could pick ahead is one this test already holds."""
    import socket

    from alchemist_jobs import local_backend, processes
    from tests.integration.paradigm_jobs import digits_job, run_job

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    try:
        taken = held.getsockname()[1]
        monkeypatch.setattr(processes, "free_port", lambda: taken)
        monkeypatch.setattr(local_backend, "free_port", lambda: taken, raising=False)
        job = digits_job("held-port", {"name": "sync"}, nodes=2, procs_per_node=1,
                         hyper={"epochs": 1}, max_restarts=0)
        status, run = run_job(home, job, timeout=240)
    finally:
        held.close()
    assert status.state == "succeeded", (status, run.agent_log(0).read_text()[-3000:])
    assert len({w["node"] for w in run.worker_records()}) == 2
