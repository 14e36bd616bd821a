"""Several hosts on one machine (tests/netns.py): a job across two network
namespaces over a rate-limited link, the limit itself, and clean-up on failure."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import netns
from alchemist_jobs.rundir import read_json
from alchemist_jobs.scheduler import SUCCEEDED
from tests.integration.paradigm_jobs import digits_job, run_job

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(netns.unavailable() is not None,
                       reason=f"network namespaces unavailable: {netns.unavailable()}"),
]


def _ours(token: str) -> tuple[list[str], str]:
    names = [n for n in netns._netns_names() if token in n]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return names, links


def test_hosts_are_deleted_even_when_the_body_fails():
    with pytest.raises(RuntimeError, match="boom"):
        with netns.Hosts(2, rate_mbit=50) as hosts:
            token = hosts.token
            assert len(_ours(token)[0]) == 3  # two hosts and the switch
            # a process left running inside a host must not keep it alive
            subprocess.Popen([*hosts[1].exec_prefix, "sleep", "600"])
            raise RuntimeError("boom")
    names, links = _ours(token)
    assert names == [] and token not in links
    assert not (netns.OWNERS / f"{token}.pid").exists()


def test_stale_namespaces_of_a_killed_owner_are_swept():
    # A child process creates hosts and is SIGKILLed: its `finally` never runs.
    code = textwrap.dedent("""
        import os, signal, sys
        from tests.netns import Hosts
        h = Hosts(2).__enter__()
        print(h.token, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2])
    token = out.stdout.strip()
    assert token and len(_ours(token)[0]) == 3, out.stderr
    assert token in netns.sweep_stale()
    assert _ours(token)[0] == []


def test_rate_limit_holds_on_the_link():
    """1 MB from host 0 to host 1 through a 20 Mbit/s limit. Without the limit a veth moves
    it at several Gbit/s; the bound (40 Mbit/s, twice the limit) can only fail if the
    limit is not applied, however slow the machine."""
    recv = ("import socket,time;s=socket.socket();s.bind(('10.231.0.2',5001));s.listen();"
            "c,_=s.accept();n=0;t=None\n"
            "while True:\n b=c.recv(65536)\n if not b: break\n"
            " t=t or time.perf_counter();n+=len(b)\n"
            "print(n*8/(time.perf_counter()-t)/1e6)")
    send = ("import socket,time\nfor i in range(100):\n try: s=socket.create_connection("
            "('10.231.0.2',5001));break\n except OSError: time.sleep(0.05)\n"
            "s.sendall(b'x'*1_000_000);s.close()")
    with netns.Hosts(2, rate_mbit=20) as hosts:
        rx = subprocess.Popen([*hosts[1].exec_prefix, sys.executable, "-c", recv],
                              stdout=subprocess.PIPE, text=True)
        subprocess.run([*hosts[0].exec_prefix, sys.executable, "-c", send], check=True, timeout=60)
        mbit = float(rx.communicate(timeout=60)[0])
    assert 0 < mbit < 40, mbit


def test_async_job_across_two_hosts(tmp_path: Path):
    """Two nodes in two namespaces over a 100 Mbit/s link; the parameter server in host 0,
    the worker of host 1 reaching it across the link."""
    job = digits_job("p-hosts", {"name": "async"}, nodes=2, procs_per_node=1,
                     hyper={"epochs": 5})
    with netns.Hosts(2, rate_mbit=100) as hosts:
        sched = netns.NetnsScheduler(tmp_path, hosts)
        status, run = run_job(tmp_path, job, scheduler=sched, timeout=240)
        token = hosts.token
    assert status.state == SUCCEEDED, [p.read_text()[-2000:] for p in run.logs.glob("*.log")]
    workers = [read_json(run.worker_file(r)) for r in (0, 1)]
    assert {w["node"] for w in workers} == {f"alc-{token}-h0", f"alc-{token}-h1"}
    assert read_json(run.workers / "server-0.json")["node"] == f"alc-{token}-h0"
    assert run.result()["test_accuracy"] >= 0.90
    assert _ours(token)[0] == []
