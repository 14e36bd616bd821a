"""A local job in its private network reaches out (slirp4netns), and nothing reaches in.

Before, the job's namespace had only `lo`: a user's script that downloaded anything, and a
worker staging `data.source: s3://...`, failed with "Network is unreachable". Played here
with a real HTTP server on another host (a network namespace routed from this machine's,
tests/netns.py) and one on this machine's loopback, which the job reaches at 10.0.2.2 (and
through AWS_ENDPOINT_URL, which names 127.0.0.1 and is rewritten for the job). The
slirp4netns process of a run is followed by pid: it ends with the run, with a cancel, and
with a launcher killed outright."""

from __future__ import annotations

import http.server
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests import netns
from tests.integration.test_private_net import descendants, start, stop, the_run, wait_for

from tests.conftest import REPO

pytestmark = [pytest.mark.timeout(600)]
needs_slirp = pytest.mark.skipif(shutil.which("slirp4netns") is None,
                                 reason="slirp4netns is not installed (scripts/setup installs it)")

FETCH = """
import json, os, sys, time, urllib.request
from pathlib import Path
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
urls = sys.argv[1:] + [os.environ["AWS_ENDPOINT_URL"]]
got = {u: opener.open(u, timeout=60).read().decode() for u in urls}
run = Path(os.environ["ALCHEMIST_RUN_DIR"])
(run / "fetched.json").write_text(json.dumps(dict(got=got, endpoint=os.environ["AWS_ENDPOINT_URL"])))
while not (run / "stop").exists():
    time.sleep(0.1)
"""

# Serves its token on GET /; prints its port once listening (the test waits on that line).
SERVE = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = sys.argv[2].encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.HTTPServer((sys.argv[1], 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def fetch_job(tmp_path: Path, *urls: str) -> Path:
    (tmp_path / "fetch.py").write_text(FETCH)
    job = tmp_path / "fetch.yaml"
    job.write_text(f"name: fetch\ntask: {{script: fetch.py, args: {json.dumps(list(urls))}}}\n"
                   "procs_per_node: 1\nmax_restarts: 0\n")
    return job


def slirp_of(cli: subprocess.Popen) -> int:
    (pid,) = [p for p in descendants(cli.pid)
              if Path(f"/proc/{p}/comm").exists() and Path(f"/proc/{p}/comm").read_text().strip()
              == "slirp4netns"]
    return pid


def ends_within(pid: int, timeout: float) -> bool:
    """Whether process `pid` (not our child) exits within `timeout`: its pidfd turns readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


@pytest.fixture
def loopback_server():
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = b"host-loopback"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, args=(0.1,), name="test-loopback-http")
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    t.join()
    srv.server_close()


@needs_slirp
@pytest.mark.skipif(netns.unavailable() is not None,
                    reason=f"no other host to play: {netns.unavailable()}")
def test_a_jobs_script_reaches_another_host_and_this_machines_loopback(
        tmp_path: Path, loopback_server: int, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{loopback_server}/")
    with netns.Hosts(1) as hosts:
        # This machine's network routes to the hosts' subnet through a veth on their switch
        # (deleted with the switch namespace).
        here, there = f"{netns.PREFIX}{hosts.token}-r", f"{netns.PREFIX}{hosts.token}-q"
        netns._ip("link", "add", here, "type", "veth", "peer", "name", there,
                  "netns", hosts.switch)
        netns._ip("-n", hosts.switch, "link", "set", there, "master", hosts.bridge)
        netns._ip("-n", hosts.switch, "link", "set", there, "up")
        netns._ip("addr", "add", f"{netns.SUBNET}.254/24", "dev", here)
        netns._ip("link", "set", here, "up")
        server = subprocess.Popen([*hosts[0].exec_prefix, sys.executable, "-c", SERVE,
                                   hosts[0].addr, "another-host"], stdout=subprocess.PIPE,
                                  text=True)
        cli = run = None
        try:
            port = int(server.stdout.readline())
            other = f"http://{hosts[0].addr}:{port}/"
            mine = f"http://10.0.2.2:{loopback_server}/"
            home = tmp_path / "home"
            cli = start(home, fetch_job(tmp_path, other, mine))
            run = wait_for(lambda: the_run(home), "the run directory", cli)
            fetched = wait_for(lambda: (run.path / "fetched.json").exists()
                               and json.loads((run.path / "fetched.json").read_text()),
                               "the script's downloads", cli)
            slirp = slirp_of(cli)
        finally:
            out = stop(cli, run) if cli is not None else ""
            server.kill()
            server.wait()
    assert cli.returncode == 0, out
    endpoint = f"http://10.0.2.2:{loopback_server}/"  # the launcher's 127.0.0.1, from inside
    assert fetched == dict(endpoint=endpoint, got={other: "another-host", mine: "host-loopback",
                                                    endpoint: "host-loopback"}), fetched
    assert ends_within(slirp, 0.0), "slirp4netns outlived its run"
    assert "no outbound" not in out and "this machine's network" not in out, out


@needs_slirp
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["cancel", "launcher-killed"])
def test_no_slirp4netns_outlives_a_cancel_or_its_launcher(tmp_path: Path, loopback_server: int,
                                                         monkeypatch: pytest.MonkeyPatch, how):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://localhost:{loopback_server}")
    home = tmp_path / "home"
    cli = start(home, fetch_job(tmp_path))
    try:
        run = wait_for(lambda: the_run(home), "the run directory", cli)
        wait_for(lambda: (run.path / "fetched.json").exists(), "the script's download", cli)
        slirp = slirp_of(cli)
        cli.send_signal(how)
        assert ends_within(slirp, 120.0), "slirp4netns outlived its launcher"
    finally:
        if cli.poll() is None:
            cli.kill()
        cli.communicate(timeout=120)
    got = json.loads((run.path / "fetched.json").read_text())
    assert got["endpoint"] == f"http://10.0.2.2:{loopback_server}", got


@pytest.mark.parametrize("source", [None, "s3://some-bucket/datasets/x"], ids=["plain", "s3-source"])
def test_without_slirp4netns_one_line_says_what_the_job_gets(tmp_path: Path, source):
    """No slirp4netns on PATH: a job keeps its private network, without outbound, and one
    line says so and how to get it; a job whose data.source is s3:// (its workers download
    it) runs in this machine's network instead, with the fallback's one warning line."""
    (tmp_path / "ok.py").write_text("print('ok')\n")
    job = tmp_path / "ok.yaml"
    data = f"data: {{source: '{source}'}}\n" if source else ""
    job.write_text(f"name: ok\ntask: {{script: ok.py}}\n{data}procs_per_node: 1\n"
                   "max_restarts: 0\n")
    home = tmp_path / "home"
    path = str(Path(sys.executable).parent)  # the interpreter's directory, no slirp4netns
    r = subprocess.run([sys.executable, "-m", "alchemist_jobs", "run", str(job), "--quiet"],
                       cwd=REPO, timeout=500, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home),
                                PATH=path))
    assert r.returncode == 0, r.stdout + r.stderr
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 1, r.stderr
    state = the_run(home).state()
    if source is None:
        assert "has no outbound network: slirp4netns is not installed" in warned[0], warned
        assert "install slirp4netns" in warned[0] and "ALCHEMIST_LOCAL_NETNS=0" in warned[0]
        assert "metrics_bridge" in state  # still in a network of its own
    else:
        assert "uses this machine's network: slirp4netns is not installed and data.source " \
               f"{source} needs the network" in warned[0], warned
        assert "reachable by other accounts" in warned[0], warned
        assert "metrics_bridge" not in state
    assert state["state"] == "succeeded", state
