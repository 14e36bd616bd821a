"""A user's own model with every algorithm: an entry task and a script with its own loop,
written as a user would (tests/fixtures/user_code/, copied outside the repository), run by
the real CLI on the local stack (torchrun agents, gloo, a parameter-server process)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from alchemist_jobs.rundir import RunDir, read_json
from tests.conftest import REPO, cli
from tests.integration.test_local_runs import only_run, wait_for

pytestmark = pytest.mark.timeout(900)
USER_CODE = REPO / "tests" / "fixtures" / "user_code"
ALGORITHMS = {"sync": {"name": "sync"}, "async": {"name": "async", "servers": 2},
              "bmuf": {"name": "bmuf", "tau": 8}, "easgd": {"name": "easgd", "tau": 8}}


def user_dir(tmp: Path) -> Path:
    """The user's project: their files, outside the repository."""
    d = tmp / "my-project"
    shutil.copytree(USER_CODE, d)
    return d


def write_spec(d: Path, name: str, task: dict, algorithm: dict, **more) -> Path:
    spec = dict(name=name, task=task, procs_per_node=2, algorithm=algorithm,
                hyper={"batch_size": 32, "lr": 0.05, "epochs": 10},
                checkpoint={"every_steps": 50}, **more)
    path = d / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run_ok(spec: Path, home: Path) -> RunDir:
    out = cli("run", str(spec), "--quiet", home=home, cwd=spec.parent, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    (run,) = (home / "runs").glob(f"{spec.stem}-*")
    return RunDir(run)


@pytest.fixture(scope="module")
def entry_runs(tmp_path_factory) -> dict[str, RunDir]:
    """The user's CNN (digits_cnn.py:make_task) under each algorithm, 2 workers."""
    tmp = tmp_path_factory.mktemp("entry")
    d, home = user_dir(tmp), tmp / "home"
    # sync also snapshots its model for a learning curve every 46 steps (2 epochs)
    return {a: run_ok(write_spec(d, f"cnn-{a}", {"entry": "digits_cnn.py:make_task"}, algo,
                                 **({"curve": {"every_steps": 46}} if a == "sync" else {})), home)
            for a, algo in ALGORITHMS.items()}


def test_an_entry_task_trains_with_every_algorithm_to_syncs_quality(entry_runs):
    acc = {a: run.result()["test_accuracy"] for a, run in entry_runs.items()}
    assert acc["sync"] >= 0.95, acc
    for a in ("async", "bmuf", "easgd"):
        assert acc[a] >= acc["sync"] - 0.02, acc
    # Each ran its algorithm: two servers for async, exchanges every 8 steps for bmuf/easgd
    # (bmuf closes the partial last block too: 230 steps are 29 blocks).
    servers = sorted(p.name for p in entry_runs["async"].workers.glob("server-*.json"))
    assert servers == ["server-0.json", "server-1.json"]
    for a, rounds in (("bmuf", 29), ("easgd", 28)):
        res = entry_runs[a].result()
        assert (res["algorithm"], res["steps"], res["communication"]["rounds"]) == (a, 230, rounds)
    # The task's own files ran from the run's copy of the user's directory.
    assert (entry_runs["sync"].path / "code" / "digits_cnn.py").is_file()


def test_an_entry_tasks_learning_curve_is_evaluated_from_its_own_code(entry_runs):
    """The curve is evaluated after the run, in another process, by building the user's task
    from the run's own copy of their code."""
    from alchemist_jobs.runtime.curve import evaluate_snapshots

    run = entry_runs["sync"]
    points = evaluate_snapshots(run, run.path.parent.parent)
    assert [p["step"] for p in points] == [0, 46, 92, 138, 184, 230]
    assert points[0]["accuracy"] < 0.5 < points[-1]["accuracy"]
    assert points[-1]["accuracy"] == pytest.approx(run.result()["test_accuracy"])


def test_an_entry_runs_steps_and_metrics_show_in_status(entry_runs):
    run = entry_runs["bmuf"]
    st = json.loads(cli("status", run.run_id, "--json", home=run.path.parent.parent).stdout)
    assert st["state"] == "succeeded" and st["step"] == 230 == st["progress"]["total_steps"]
    assert st["result"]["test_accuracy"] == run.result()["test_accuracy"]
    assert set(st["result"]["test_metrics"]) == {"loss", "accuracy"}
    human = cli("status", run.run_id, home=run.path.parent.parent).stdout
    assert "accuracy" in human and "230/230" in human


def test_an_entry_runs_steps_and_accuracy_show_in_the_dashboard(entry_runs):
    from fastapi.testclient import TestClient

    from tests.ui.conftest import AUTH, make_app

    run = entry_runs["easgd"]
    app, _ = make_app(run.path.parent.parent)
    with TestClient(app, base_url="http://127.0.0.1:8740", headers=AUTH) as client:
        listed = {r["run_id"]: r for r in client.get("/api/v1/runs").json()["runs"]}
    r = listed[run.run_id]
    assert r["state"] == "succeeded" and r["step"] == r["total_steps"] == 230
    assert r["accuracy"] == pytest.approx(run.result()["test_accuracy"])


def test_a_killed_worker_of_an_entry_task_resumes_from_its_checkpoint(tmp_path):
    d, home = user_dir(tmp_path), tmp_path / "home"
    spec = write_spec(d, "cnn-resume", {"entry": "digits_cnn.py:make_task"}, ALGORITHMS["bmuf"],
                      max_restarts=2)
    p = subprocess.Popen([sys.executable, "-m", "alchemist_jobs", "run", str(spec), "--quiet",
                          # every 45 steps: checkpoints fall mid-block (tau 8), where each
                          # bmuf rank holds its own model
                          "--set", "hyper.epochs=30", "--set", "checkpoint.every_steps=45"],
                         cwd=d, env=dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home)),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run = wait_for(lambda: (home / "runs").exists() and only_run(home), 120, "run dir")
        wait_for(lambda: len(list(run.checkpoints.glob("step-*.pt"))) >= 2, 300, "checkpoints")
        os.kill(read_json(run.worker_file(1))["pid"], signal.SIGKILL)
        out, _ = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out
    res = run.result()
    assert res["restarts"] >= 1 and res["resumed_from_step"] >= 90, res
    assert res["resumed_from_step"] % 8, res  # resumed mid-block
    assert res["steps"] == 30 * 23 and res["test_accuracy"] >= 0.95, res


@pytest.fixture(scope="module")
def loop_runs(tmp_path_factory) -> dict[str, tuple[RunDir, Path]]:
    """The user's own loop (own_loop.py) under each algorithm, tracing every rank's
    parameter digest after every optimizer step."""
    tmp = tmp_path_factory.mktemp("loop")
    d, home = user_dir(tmp), tmp / "home"
    out = {}
    for a, algo in ALGORITHMS.items():
        trace = tmp / f"trace-{a}"
        spec = write_spec(d, f"loop-{a}", {"script": "own_loop.py",
                                           "args": ["--epochs", "10", "--trace", str(trace)]}, algo)
        out[a] = (run_ok(spec, home), trace)
    return out


def traces(trace: Path) -> list[tuple[int, str, str]]:
    """(step, rank 0's digest, rank 1's digest) after every step."""
    r0, r1 = ([ln.split() for ln in Path(f"{trace}.rank{r}").read_text().splitlines()]
              for r in (0, 1))
    assert [s for s, _ in r0] == [s for s, _ in r1] and len(r0) == 230
    return [(int(a[0]), a[1], b[1]) for a, b in zip(r0, r1)]


def final_accuracy(run: RunDir) -> float:
    lines = [ln for ln in run.rank_log(0).read_text().splitlines()
             if ln.startswith("final test accuracy")]
    return float(lines[-1].split()[-1])


def test_own_loop_under_sync_holds_identical_replicas_after_every_step(loop_runs):
    rows = traces(loop_runs["sync"][1])
    assert all(a == b for _, a, b in rows)


def test_own_loop_under_bmuf_holds_identical_replicas_after_every_block(loop_runs):
    """The ranks start from different seeds in the script: prepare() evens them out, and each
    block's exchange makes them identical again; in between they train apart."""
    rows = traces(loop_runs["bmuf"][1])
    same = {s for s, a, b in rows if a == b}
    assert same == {s for s, _, _ in rows if s % 8 == 0}


def test_own_loop_trains_to_syncs_quality_under_every_algorithm(loop_runs):
    acc = {a: final_accuracy(run) for a, (run, _) in loop_runs.items()}
    assert acc["sync"] >= 0.95, acc
    for a in ("async", "bmuf", "easgd"):
        assert acc[a] >= acc["sync"] - 0.02, acc
    async_run = loop_runs["async"][0]
    assert len(list(async_run.workers.glob("server-*.json"))) == 2
    for shard in (0, 1):  # every push reached the servers: 230 steps of each of 2 workers
        rec = read_json(async_run.workers / f"server-{shard}.json")
        assert rec["version"] == 2 * 230, rec


def test_a_script_that_asks_for_bmuf_without_prepare_stops_with_one_line(tmp_path):
    d, home = user_dir(tmp_path), tmp_path / "home"
    spec = write_spec(d, "no-prepare", {"script": "own_loop.py", "args": ["--no-prepare"]},
                      ALGORITHMS["bmuf"])
    out = cli("run", str(spec), "--quiet", home=home, cwd=d, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    line = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and "algorithm bmuf was never applied" in line[0] \
        and "alchemist_jobs.prepare(model, optimizer)" in line[0], out.stderr
    state = only_run(home).state()
    assert state["state"] == "failed" and state["restarts"] == 0  # no retry of a config error


def test_a_general_dataset_is_batched_alike_by_dataloader_worker_processes():
    """data.loader_workers > 0 on a dataset read sample by sample: DataLoader processes
    collate the same batches, in the same order, as the loop reading it itself."""
    from tests.unit.test_task_api import test_a_general_dataset_is_batched_like_the_same_tensors

    test_a_general_dataset_is_batched_like_the_same_tensors(workers=2)


def test_own_loop_refuses_the_trainers_grad_accum_in_one_line(tmp_path):
    """grad_accum is the built-in trainer's: a loop under prepare() cannot honour it, so the
    run stops with one line instead of silently stepping once per micro-batch."""
    d, home = user_dir(tmp_path), tmp_path / "home"
    spec = write_spec(d, "accum", {"script": "own_loop.py", "args": ["--epochs", "1"]},
                      {"name": "sync", "grad_accum": 4})
    out = cli("run", str(spec), "--quiet", home=home, cwd=d, timeout=300)
    assert out.returncode == 1 and "algorithm.grad_accum: 4 is the built-in trainer's" in out.stderr
    assert only_run(home).state()["restarts"] == 0
