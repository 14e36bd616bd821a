"""A local parameter server's port belongs to its run from the plan to the end: another socket
of the machine taking it meanwhile (a worker's metrics server, an outgoing connection, another
job) must not stop the server, and a killed server's restart finds its port still its own.

The failure this guards against: a port chosen free at the plan and bound only when the server
had started (seconds later) was taken by another socket; every restart of that shard failed
with EADDRINUSE and the job died before training (seen in CI under load)."""

from __future__ import annotations

import errno
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from alchemist_jobs.local_backend import LocalScheduler
from alchemist_jobs.processes import alive
from alchemist_jobs.rundir import read_json
from alchemist_jobs.scheduler import SUCCEEDED
from alchemist_jobs.spec import parse_spec
from tests.integration.paradigm_jobs import REPO, digits_job

pytestmark = pytest.mark.timeout(300)


def _bind(port: int, reuse: bool = False) -> socket.socket:
    s = socket.socket()
    if reuse:  # a finished run's accepted connections may linger in TIME_WAIT on the port
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    return s


def test_a_planned_port_taken_before_the_start_does_not_stop_the_server(tmp_path: Path):
    sched = LocalScheduler(tmp_path / "home")
    job = digits_job("ps-port", {"name": "async", "servers": 1}, hyper={"epochs": 2})
    request = sched.dryrun(parse_spec(job, "<ps-port>", REPO), REPO)
    (planned,) = [s.port for s in request.servers]
    squatter = _bind(planned)  # someone else's socket on the planned port
    try:
        handle = sched.schedule(request)
        status = sched.wait(handle)
    finally:
        squatter.close()
    assert status.state == SUCCEEDED, status.message
    record = read_json(handle.run.workers / "server-0.json")
    assert record["port"] != planned and record["restart"] == 0


def test_a_killed_servers_port_stays_the_runs_until_it_restarts(tmp_path: Path, monkeypatch):
    # In this machine's network (ALCHEMIST_LOCAL_NETNS=0, or where user namespaces are
    # unavailable), where another process could take the port; in the job's own network
    # namespace only the job's processes exist to take it.
    monkeypatch.setenv("ALCHEMIST_LOCAL_NETNS", "0")
    sched = LocalScheduler(tmp_path / "home")
    job = digits_job("ps-restart", {"name": "async", "servers": 1}, hyper={"epochs": 30})
    handle = sched.schedule(sched.dryrun(parse_spec(job, "<ps-restart>", REPO), REPO))
    seen: dict[str, object] = {}

    def tick() -> None:
        record = read_json(handle.run.workers / "server-0.json") or {}
        step = (handle.run.progress() or {}).get("step", 0)
        if "killed" not in seen and record.get("restart") == 0 and step >= 20:
            os.kill(record["pid"], signal.SIGKILL)
            seen["killed"], seen["port"] = record["pid"], record["port"]
            deadline = time.monotonic() + 30
            while alive(record["pid"]) and time.monotonic() < deadline:  # its sockets close
                time.sleep(0.01)
            # While no server runs, nobody else can take the port (SO_REUSEADDR, as servers
            # set it: only a listening socket, not the old connections' TIME_WAIT, refuses).
            with pytest.raises(OSError) as e:
                _bind(record["port"], reuse=True).close()
            seen["bind_errno"] = e.value.errno
        elif "killed" in seen and record.get("restart") == 1 and "restarted_on" not in seen:
            seen["restarted_on"] = record["port"]

    try:
        status = sched.wait(handle, tick=tick)
    except BaseException:
        sched.interrupt(handle)
        raise
    assert status.state == SUCCEEDED, status.message
    assert seen.get("bind_errno") == errno.EADDRINUSE, seen
    assert seen.get("restarted_on") == seen["port"], seen
    server_log = (handle.run.logs / "server-0.log").read_text()
    assert "attempt 2" in server_log
    _bind(seen["port"], reuse=True).close()  # the run's end gives the port back
