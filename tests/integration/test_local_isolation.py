"""A local run trusts only its own machine: from another host (a second network namespace)
nothing of a running local job accepts a connection: not the parameter server, not a
metrics endpoint, not gloo's pairs; the c10d stores (the agent's rendezvous, rank 0's worker
store) do not listen at all: they are files in the run's private directory (store_bind.py).

torch's TCPStore binds every interface whatever host name it is given (c10d
TCPStoreLibUvBackend binds the wildcard address), and torch's dynamic rendezvous unpickles
the store's state: a reachable store is remote code execution in the agent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import netns
from tests.integration.test_private_net import PROBE, descendants, run_listeners
from alchemist_jobs.rundir import RunDir
from tests.conftest import EXAMPLES, REPO

pytestmark = [
    pytest.mark.netns, pytest.mark.timeout(420),
    pytest.mark.skipif(netns.unavailable() is not None,
                       reason=f"network namespaces unavailable: {netns.unavailable()}"),
]



def listening(host: netns.Host) -> list[tuple[str, int]]:
    """Every listening TCP socket in the host's namespace: (address, port)."""
    out = subprocess.run([*host.exec_prefix, "ss", "-ltnH"], capture_output=True, text=True,
                         check=True).stdout
    socks = []
    for line in out.splitlines():
        local = line.split()[3]
        addr, port = local.rsplit(":", 1)
        socks.append((addr.strip("[]"), int(port)))
    return socks


def wait_for(pred, what: str, proc: subprocess.Popen, timeout: float = 300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        assert proc.poll() is None, f"the run ended before {what}: exit {proc.returncode}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("algorithm", ["async"])
def test_no_port_of_a_local_run_is_reachable_from_another_host(tmp_path: Path, algorithm: str):
    home = tmp_path / "home"
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home))
    with netns.Hosts(2) as hosts:
        run_host, other = hosts[0], hosts[1]
        cli = subprocess.Popen(
            [*run_host.exec_prefix, sys.executable, "-m", "alchemist_jobs", "run",
             str(EXAMPLES / "digits.yaml"), "--quiet", "--set", f"algorithm.name={algorithm}",
             "--set", "hyper.epochs=100000"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            run = wait_for(lambda: next((RunDir(p) for p in (home / "runs").glob("*")), None)
                           if (home / "runs").exists() else None, "the run directory", cli)
            # Both ranks have stepped: the parameter server and the metrics endpoints are up.
            wait_for(lambda: (run.progress() or {}).get("step", 0) > 0
                     and len(run.worker_records()) == 2, "training to start", cli)
            # Every listener of the run's processes (in the run's own network, private_net.py)
            # and every one of the run host's own network (the metrics bridge).
            found = run_listeners(descendants(cli.pid))
            assert len(found) >= 3, found  # the server, two ranks' metrics
            socks = listening(run_host)
            ports = sorted({port for port, _ in found.values()} | {port for _, port in socks})
            probe = subprocess.run([*other.exec_prefix, sys.executable, "-c", PROBE,
                                    run_host.addr, *map(str, ports)],
                                   capture_output=True, text=True, check=True)
            reached = {int(p): r for p, r in json.loads(probe.stdout).items()}
            assert all(r == "ConnectionRefusedError" for r in reached.values()), (socks, reached)
            assert {addr for addr, _ in socks} == {"127.0.0.1"}, socks
        finally:
            if cli.poll() is None:
                cli.send_signal(signal.SIGINT)
            out, _ = cli.communicate(timeout=120)
        assert "cancelled; no process left running" in out, out
