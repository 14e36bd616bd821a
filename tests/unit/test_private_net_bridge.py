"""The metrics bridge of a local job's private network (alchemist_jobs/private_net.py): the
one way into the job's namespace answers GET /metrics/<worker> with that worker's own
exposition and nothing else (no other path, no other worker name, no method but GET); and
ALCHEMIST_LOCAL_NETNS=0 says why the job runs in this machine's network."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from alchemist_jobs import private_net

EXPOSITION = b'alchemist_steps_total{rank="0"} 7.0\n'


class _Worker(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = EXPOSITION if self.path == "/metrics" else b"secret"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def bridge(tmp_path: Path):
    worker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Worker)
    threading.Thread(target=worker.serve_forever, args=(0.05,), daemon=True).start()
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "rank-0.json").write_text(
        json.dumps({"metrics_port": worker.server_address[1]}))
    (tmp_path / "workers" / "rank-1.json").write_text(json.dumps({"metrics_port": "x"}))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    port = sock.getsockname()[1]
    server = private_net._bridge(sock, str(tmp_path))
    yield f"http://127.0.0.1:{port}"
    server.shutdown()
    worker.shutdown()
    worker.server_close()
    sock.close()


def _get(url: str, method: str = "GET") -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, method=method), timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def test_the_bridge_serves_a_workers_metrics_and_nothing_else(bridge):
    assert _get(f"{bridge}/metrics/rank-0") == (200, EXPOSITION)
    for path in ("/metrics/rank-1", "/metrics/rank-9", "/metrics/../run.json", "/run.json",
                 "/metrics/rank-0/x", "/metrics/rank-0?x=/", "/metrics/other-0", "/"):
        assert _get(bridge + path)[0] == 404, path
    assert _get(f"{bridge}/metrics/rank-0", method="POST")[0] == 501


def test_local_netns_0_is_the_reason_given(monkeypatch):
    monkeypatch.setenv("ALCHEMIST_LOCAL_NETNS", "0")
    assert private_net.unavailable() == "ALCHEMIST_LOCAL_NETNS=0"


def test_the_monitor_scrapes_a_namespaced_run_through_its_bridge(tmp_path):
    """A run with a metrics bridge (run.json) is scraped there, one target per worker with
    the worker's path; Prometheus takes `__metrics_path__` from a file_sd target's labels."""
    import os

    from alchemist_jobs.commands.monitor import TargetFinder
    from tests.unit.test_monitoring_command import _run_dir

    me = os.getpid()
    run = _run_dir(tmp_path, "digits-a", "running", me, {
        "rank-0": dict(rank=0, node="h0", metrics_port=9101, pid=me),
        "server-0": dict(rank="server-0", node="h0", metrics_port=9201, role="server")},
        algorithm="async")
    run.update_state(metrics_bridge=9555)
    assert TargetFinder(tmp_path).groups() == [
        {"targets": ["127.0.0.1:9555"],
         "labels": dict(__metrics_path__="/metrics/rank-0", job="digits", run="digits-a",
                        rank="0", node="h0", algorithm="async")},
        {"targets": ["127.0.0.1:9555"],
         "labels": dict(__metrics_path__="/metrics/server-0", job="digits", run="digits-a",
                        rank="server-0", node="h0", algorithm="async")},
    ]
