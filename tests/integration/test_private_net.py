"""A running local job listens for itself alone (issue 37, items 1 and 2): played as another
account on this machine (uid nobody) and as another host (a second network namespace).

Every listening socket of every process of the run (agents, workers, parameter servers, the
namespace holder) is found through /proc, as root: each process's own view of TCP
(/proc/PID/net/tcp, its network namespace's) names the sockets it holds. The attacker then
tries each of those ports from where it stands. Before the job had a network of its own,
gloo's pairs, the parameter server, each rank's /metrics, TensorFlow's gRPC servers (on every
interface) and JAX's coordinator all answered: a pair taken over, a foreign task registered, a
file of the job's user read over gRPC. Now the one listener this machine's network reaches
is the metrics bridge, which only reads each worker's /metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alchemist_jobs.rundir import RunDir
from alchemist_jobs.ui.series import scrape_rank0
from tests import another_user, netns
from tests.conftest import EXAMPLES, REPO

pytestmark = [pytest.mark.timeout(600)]

# Connect to each port; print what each attempt met (also test_local_isolation.py's probe).
PROBE = """
import json, socket, sys
out = {}
for port in map(int, sys.argv[2:]):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((sys.argv[1], port))
        out[port] = "connected"
    except OSError as e:
        out[port] = type(e).__name__
    finally:
        s.close()
print(json.dumps(out))
"""


# A script that holds its framework's servers open until the test says stop: TensorFlow's
# gRPC servers (MultiWorkerMirroredStrategy), JAX's coordinator (jax.distributed), torch's
# gloo pairs (a process group).
HOLD = """
import os, sys, time
from pathlib import Path
fw = sys.argv[1]
if fw == "tensorflow":
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    tf.constant(1.0)
elif fw == "jax":
    import jax
    jax.distributed.initialize()
else:
    import torch.distributed as dist
    dist.init_process_group("gloo")
    dist.barrier()
run = Path(os.environ["ALCHEMIST_RUN_DIR"])
(run / f"ready-{os.environ['RANK']}").write_text("")
while not (run / "stop").exists():
    time.sleep(0.1)
"""


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (agents start their own sessions, not their own
    parents)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _listen_table(path: str) -> dict[int, int]:
    """{socket inode: port} of the LISTEN sockets in a /proc net/tcp table."""
    out = {}
    try:
        lines = Path(path).read_text().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        f = line.split()
        if f[3] == "0A":
            out[int(f[9])] = int(f[1].rsplit(":", 1)[1], 16)
    return out


def run_listeners(pids: list[int]) -> dict[int, tuple[int, int]]:
    """{socket inode: (port, pid)} of every listening TCP socket these processes hold."""
    out = {}
    for pid in pids:
        try:
            inodes = {int(os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1])
                      for fd in os.listdir(f"/proc/{pid}/fd")
                      if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")}
        except OSError:
            continue
        for table in ("tcp", "tcp6"):
            for inode, port in _listen_table(f"/proc/{pid}/net/{table}").items():
                if inode in inodes:
                    out[inode] = (port, pid)
    return out


def host_listeners() -> dict[int, int]:
    """{inode: port} of the LISTEN sockets of this machine's own network (the test's)."""
    return {**_listen_table("/proc/net/tcp"), **_listen_table("/proc/net/tcp6")}


def wait_for(pred, what: str, proc: subprocess.Popen, timeout: float = 500):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()[0][-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def start(home: Path, job: Path, *extra: str, prefix: list[str] = ()) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home))
    return subprocess.Popen([*prefix, sys.executable, "-m", "alchemist_jobs", "run", str(job),
                             "--quiet", *extra], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def the_run(home: Path) -> RunDir | None:
    runs = list((home / "runs").glob("*")) if (home / "runs").exists() else []
    return RunDir(runs[0]) if runs else None


def hold_job(tmp_path: Path, framework: str) -> Path:
    (tmp_path / "hold.py").write_text(HOLD)
    job = tmp_path / "hold.yaml"
    fw = "" if framework == "torch" else f", framework: {framework}"
    job.write_text(f"name: hold\ntask: {{script: hold.py, args: [{framework}]{fw}}}\n"
                   "procs_per_node: 2\nmax_restarts: 0\n")
    return job


def stop(cli: subprocess.Popen, run: RunDir | None) -> str:
    if run is not None:
        (run.path / "stop").write_text("")
    try:
        out, _ = cli.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        cli.send_signal(signal.SIGINT)
        out, _ = cli.communicate(timeout=120)
    return out


def attack_from_loopback(cli: subprocess.Popen, run: RunDir, least: int) -> None:
    """As uid nobody: every listener of the run that this machine's loopback reaches."""
    found = run_listeners(descendants(cli.pid))
    assert len(found) >= least, found  # the job's own listeners exist: the attack has targets
    host = host_listeners()
    bridge = run.state().get("metrics_bridge")
    exposed = sorted(port for inode, (port, _) in found.items() if inode in host)
    probe = another_user.run_python(PROBE, "127.0.0.1", *map(str, exposed))
    assert probe.returncode == 0, probe.stderr
    reached = {int(p) for p, r in json.loads(probe.stdout).items() if r == "connected"}
    # The metrics bridge is the one way in, and it serves GET /metrics/<worker> only.
    assert reached <= {bridge}, (found, reached, bridge)


@pytest.mark.skipif(another_user.unavailable() is not None,
                    reason=f"cannot act as another user: {another_user.unavailable()}")
def test_no_listener_of_an_async_job_answers_another_account(tmp_path: Path):
    """gloo's pairs, the parameter server and both ranks' /metrics of a training async job."""
    home = tmp_path / "home"
    cli = start(home, EXAMPLES / "digits.yaml", "--set", "algorithm.name=async",
                "--set", "hyper.epochs=100000")
    run = None
    try:
        run = wait_for(lambda: the_run(home), "the run directory", cli)
        wait_for(lambda: (run.progress() or {}).get("step", 0) > 0
                 and len(run.worker_records()) == 2
                 and (run.workers / "server-0.json").exists(), "training to start", cli)
        # the server, two ranks' /metrics, the server's /metrics, gloo's pairs
        attack_from_loopback(cli, run, least=5)
        bridge = run.state()["metrics_bridge"]
        read = another_user.run_python(
            "import sys, urllib.request as u\n"
            "o = u.build_opener(u.ProxyHandler({}))\n"
            "print(o.open(f'http://127.0.0.1:{sys.argv[1]}/metrics/rank-0', timeout=30).read()"
            ".decode())\n"
            "try:\n"
            "    o.open(f'http://127.0.0.1:{sys.argv[1]}/run.json', timeout=30)\n"
            "except u.HTTPError as e:\n"
            "    print('refused', e.code)\n", str(bridge))
        assert read.returncode == 0, read.stderr
        assert "alchemist_" in read.stdout and "refused 404" in read.stdout, read.stdout[-2000:]
        # The dashboard's live figures come through the bridge too.
        live = wait_for(lambda: scrape_rank0(run.path, timeout=10), "rank 0's live metrics", cli)
        assert "communication_s" in live, live
    finally:
        if cli.poll() is None:
            cli.send_signal(signal.SIGINT)
        out, _ = cli.communicate(timeout=120)
    assert "cancelled" in out, out


@pytest.mark.skipif(another_user.unavailable() is not None,
                    reason=f"cannot act as another user: {another_user.unavailable()}")
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_gloo_pairs_and_the_jax_coordinator_answer_no_other_account(tmp_path: Path, framework):
    """A foreign 'task 1' cannot reach the JAX coordinator, nor a stranger gloo's pairs."""
    pytest.importorskip({"torch": "torch", "jax": "jax"}[framework])
    home = tmp_path / "home"
    cli = start(home, hold_job(tmp_path, framework))
    run = None
    try:
        run = wait_for(lambda: the_run(home), "the run directory", cli)
        wait_for(lambda: all((run.path / f"ready-{r}").exists() for r in (0, 1)),
                 "both ranks to meet", cli)
        attack_from_loopback(cli, run, least=2)
    finally:
        out = stop(cli, run)
    assert cli.returncode == 0, out


@pytest.mark.netns
@pytest.mark.skipif(netns.unavailable() is not None,
                    reason=f"network namespaces unavailable: {netns.unavailable()}")
def test_tensorflow_grpc_servers_are_unreachable_from_another_host(tmp_path: Path):
    """TensorFlow's servers bind every interface: from a second host, none may answer."""
    pytest.importorskip("tensorflow")
    home = tmp_path / "home"
    with netns.Hosts(2) as hosts:
        run_host, other = hosts[0], hosts[1]
        cli = start(home, hold_job(tmp_path, "tensorflow"), prefix=run_host.exec_prefix)
        run = None
        try:
            run = wait_for(lambda: the_run(home), "the run directory", cli)
            wait_for(lambda: all((run.path / f"ready-{r}").exists() for r in (0, 1)),
                     "both TensorFlow workers to meet", cli, timeout=550)
            found = run_listeners(descendants(cli.pid))
            assert len(found) >= 2, found  # each worker's gRPC server
            ports = sorted({port for port, _ in found.values()})
            probe = subprocess.run([*other.exec_prefix, sys.executable, "-c", PROBE,
                                    run_host.addr, *map(str, ports)],
                                   capture_output=True, text=True, check=True)
            reached = {int(p) for p, r in json.loads(probe.stdout).items() if r == "connected"}
            assert reached == set(), (found, reached)
        finally:
            out = stop(cli, run)
        assert cli.returncode == 0, out


def test_without_a_namespace_a_job_runs_in_this_network_with_one_warning(tmp_path: Path):
    """ALCHEMIST_LOCAL_NETNS=0 (as where user namespaces are unavailable): the job runs as
    before, and one line says so and what it leaves reachable."""
    home = tmp_path / "home"
    r = subprocess.run([sys.executable, "-m", "alchemist_jobs", "run",
                        str(EXAMPLES / "script.yaml"), "--quiet"], cwd=REPO, timeout=500,
                       env=dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home),
                                ALCHEMIST_LOCAL_NETNS="0"), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    warned = [ln for ln in r.stderr.splitlines() if "this machine's network" in ln]
    assert len(warned) == 1 and "ALCHEMIST_LOCAL_NETNS=0" in warned[0], r.stderr
    assert "reachable by other accounts" in warned[0], warned
    run = the_run(home)
    assert "metrics_bridge" not in run.state() and run.state()["state"] == "succeeded"
