"""Issue 41.5's start-up cost, on real local runs: a one-node TensorFlow or JAX job's workers are
started by alchemist_jobs/light_agent.py, which loads no torch and holds no rendezvous, and
which keeps what torchrun's agent gave: a group restart when a worker fails, a stop that
SIGKILLs a worker ignoring SIGTERM after a short grace (torchrun waited 30 s), a cancel that
leaves no process behind, workers that die with their agent, and the root cause of a failed
run in its record."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from alchemist_jobs import light_agent
from alchemist_jobs.processes import alive
from alchemist_jobs.rundir import RunDir, read_json
from tests.conftest import cli, cli_background
from tests.integration.test_local_runs import no_process_of, only_run, wait_for

pytestmark = pytest.mark.timeout(600)

# What a user writes: jax.distributed across the workers, then (attempt 1) hold until the
# test acts. HOLD=ignore-term: the worker ignores SIGTERM, as a program with its own handler
# that never exits may. Attempt 2 ends at once.
HOLD = """
import os, signal, sys, time
from pathlib import Path
import jax
jax.distributed.initialize()
me = jax.process_index()
out = Path(os.environ["OUT_DIR"])
if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) > 0:
    (out / f"again-{me}").write_text("")
    sys.exit(0)
if os.environ.get("HOLD") == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
(out / f"ready-{me}").write_text(str(os.getppid()))
deadline = time.monotonic() + 600
while time.monotonic() < deadline:
    time.sleep(0.05)  # until the test has acted
"""


def start(tmp_path: Path, max_restarts: int, hold: str = "") -> tuple[subprocess.Popen, Path]:
    (tmp_path / "hold.py").write_text(HOLD)
    (tmp_path / "job.yaml").write_text(
        "name: light\ntask: {script: hold.py, framework: jax}\nprocs_per_node: 2\n"
        f"max_restarts: {max_restarts}\nenv: {{JAX_PLATFORMS: cpu}}\n"
    )
    out = tmp_path / "out"
    out.mkdir()
    p = cli_background(
        "run",
        str(tmp_path / "job.yaml"),
        "--quiet",
        "--set",
        f"env.OUT_DIR={out}",
        "--set",
        f"env.HOLD={hold}",
    )
    return p, out


def ready(home: Path, out: Path, p: subprocess.Popen) -> tuple[RunDir, dict[int, int]]:
    """The run, once both workers of attempt 1 are initialized: each rank's pid."""

    def both() -> bool:
        assert p.poll() is None, p.communicate()[0]
        return len(list(out.glob("ready-*"))) == 2

    wait_for(both, 300, "both workers initialized")
    run = only_run(home)
    return run, {r: read_json(run.worker_file(r))["pid"] for r in (0, 1)}


def finish(p: subprocess.Popen) -> str:
    try:
        return p.communicate(timeout=300)[0]
    finally:
        if p.poll() is None:
            p.kill()


def test_a_jax_run_s_agent_loads_no_torch_and_is_the_light_agent(home, tmp_path):
    p, out = start(tmp_path, max_restarts=0)
    try:
        run, pids = ready(home, out, p)
        (agent,) = run.state()["agents"]
        parents = {int((out / f"ready-{r}").read_text()) for r in (0, 1)}
        maps = Path(f"/proc/{agent}/maps").read_text()
        cmdline = Path(f"/proc/{agent}/cmdline").read_bytes().split(b"\0")
        for pid in pids.values():
            os.kill(pid, signal.SIGTERM)  # the workers' SIGTERM is fatal: each exits -15
    finally:
        stdout = finish(p)
    assert parents == {agent}, (parents, agent)  # the workers are the recorded agent's children
    assert "libtorch" not in maps, "the agent of a JAX job loaded torch"
    assert b"torch.distributed.run" not in cmdline and b"alchemist_jobs.agent" not in cmdline, cmdline
    assert p.returncode != 0, stdout  # its workers were killed: the run failed
    failure = run.state()["failure"]
    assert failure["exit_code"] == -signal.SIGTERM and failure["signal"] == "SIGTERM", failure
    assert failure["rank"] in (0, 1), failure
    assert no_process_of(run) == []


def test_a_worker_that_ignores_sigterm_is_killed_and_the_group_is_back_within_the_grace(home, tmp_path):
    """torchrun's agent gave such a worker 30 s before SIGKILL, at every group restart."""
    p, out = start(tmp_path, max_restarts=1, hold="ignore-term")
    try:
        run, pids = ready(home, out, p)
        os.kill(pids[1], signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: not alive(pids[0]), 60, "the worker that ignores SIGTERM to end")
        stopped = time.monotonic() - killed
        wait_for(lambda: len(list(out.glob("again-*"))) == 2, 300, "the group's second attempt")
    finally:
        stdout = finish(p)
    print(f"the worker ignoring SIGTERM ended {stopped:.1f} s after its peer was killed")
    assert stopped < light_agent.STOP_GRACE_S + 3.0, stopped
    assert p.returncode == 0, stdout
    st = run.state()
    assert st["state"] == "succeeded" and st["restarts"] == 1, st
    assert st["restart_events"][0].startswith("rank 1 failed"), st["restart_events"]
    assert no_process_of(run) == []


def test_sigterm_to_the_agent_stops_a_worker_that_ignores_it_within_the_grace(home, tmp_path):
    p, out = start(tmp_path, max_restarts=3, hold="ignore-term")
    try:
        run, pids = ready(home, out, p)
        (agent,) = run.state()["agents"]
        os.kill(agent, signal.SIGTERM)
        sent = time.monotonic()
        wait_for(lambda: not any(alive(pid) for pid in pids.values()), 60, "the workers to end")
        took = time.monotonic() - sent
        wait_for(lambda: not alive(agent), 60, "the agent to end")
    finally:
        stdout = finish(p)
    assert took < light_agent.STOP_GRACE_S + 3.0, took
    assert "Received SIGTERM death signal, shutting down workers" in run.agent_log(0).read_text()
    assert list(out.glob("again-*")) == []  # stopped, not restarted
    assert p.returncode != 0, stdout
    assert no_process_of(run) == []


def test_cancel_leaves_no_process(home, tmp_path):
    p, out = start(tmp_path, max_restarts=3)
    try:
        run, pids = ready(home, out, p)
        r = cli("cancel", run.run_id, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        finish(p)
    assert run.state()["state"] == "cancelled", run.state()
    assert no_process_of(run) == []
    assert list(out.glob("again-*")) == []


def test_the_workers_die_with_a_killed_agent(home, tmp_path):
    p, out = start(tmp_path, max_restarts=3)
    try:
        run, pids = ready(home, out, p)
        (agent,) = run.state()["agents"]
        os.kill(agent, signal.SIGKILL)
        wait_for(lambda: not any(alive(pid) for pid in pids.values()), 60, "the workers to die")
    finally:
        stdout = finish(p)
    assert p.returncode != 0, stdout
    st = run.state()
    assert st["state"] == "failed" and "killed by SIGKILL" in st["message"], st
    # the agent that died is named as what it was, not as torchrun's
    assert (
        st["message"].startswith(f"the agent of node 0 (pid {agent})") and "torchrun" not in st["message"]
    ), st
    assert no_process_of(run) == []


FAIL = """
import os, jax
jax.distributed.initialize()
if jax.process_index() == 1:
    raise ValueError("shard 7 is truncated")
"""


def test_a_failed_rank_is_the_run_s_root_cause_after_its_restarts(home, tmp_path):
    (tmp_path / "fail.py").write_text(FAIL)
    (tmp_path / "job.yaml").write_text(
        "name: fails\ntask: {script: fail.py, framework: jax}\nprocs_per_node: 2\n"
        "max_restarts: 1\nenv: {JAX_PLATFORMS: cpu}\n"
    )
    r = cli("run", str(tmp_path / "job.yaml"), "--quiet", timeout=300)
    assert r.returncode != 0, r.stdout + r.stderr
    run = only_run(home)
    st = run.state()
    # Both attempts failed alike: the backend stopped retrying after the repeat, or the agent
    # ran out of restarts; either way rank 1 and its exception are the cause.
    assert st["failure"]["rank"] == 1 and st["failure"]["exit_code"] == 1, st["failure"]
    assert "ValueError: shard 7 is truncated" in st["failure"]["summary"], st["failure"]
    assert no_process_of(run) == []


SUM = """
import os, sys, jax, jax.numpy as jnp, numpy as np
from pathlib import Path
from jax.sharding import NamedSharding, PartitionSpec as P
jax.distributed.initialize()
me = jax.process_index()
mesh = jax.make_mesh((jax.device_count(),), ("w",))
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("w")), np.array([me + 1.0], np.float32))
total = float(jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x))
Path(os.environ["OUT_DIR"], f"sum-{me}").write_text(f"{jax.process_count()} {total} {'torch' in sys.modules}")
"""


def test_several_simulated_nodes_keep_torchrun_s_agents(home, tmp_path):
    """nodes > 1 meet in torchrun's rendezvous; the early interpreter, which skipped torch's
    import for a JAX spec, imports it itself as node 0's agent."""
    (tmp_path / "sum.py").write_text(SUM)
    (tmp_path / "job.yaml").write_text(
        "name: nodes\ntask: {script: sum.py, framework: jax}\nnodes: 2\nprocs_per_node: 1\n"
        "max_restarts: 0\nenv: {JAX_PLATFORMS: cpu}\n"
    )
    out = tmp_path / "out"
    out.mkdir()
    r = cli("run", str(tmp_path / "job.yaml"), "--quiet", "--set", f"env.OUT_DIR={out}", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.read_text() for p in out.glob("sum-*")) == ["2 3.0 False"] * 2
    run = only_run(home)
    assert (run.stores / "rendezvous").stat().st_size > 0  # the agents' c10d rendezvous was held
    assert "light_agent" not in run.agent_log(0).read_text() + run.agent_log(1).read_text()
    assert no_process_of(run) == []
