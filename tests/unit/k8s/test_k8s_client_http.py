"""The real `kubernetes` client, as the backend drives it, against a recording HTTP server on
127.0.0.1 that answers like the API server (the far edge: no API server can run here). It
checks what the fake client cannot: the kubeconfig is loaded, requests carry its bearer
token, go to the right URLs with the right verbs and content types, and streamed logs and
JSON bodies come back through `_preload_content=False` as the backend expects."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

import pytest

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack
from tests.unit.k8s.conftest import EXAMPLES

RUN = "digits-20260101-120000-ab12"
TOKEN = "fake-secret-token-dev-0123456789"


class _Recorder(BaseHTTPRequestHandler):
    requests: list[dict] = []
    log_payloads: list[bytes] = []  # successive answers to pods/log (then the default)
    # "on_log": called after each pods/log answer (tests move the run along);
    # "clock": when set, each request records clock() as "at".
    hooks: dict = {}
    stamps: list[bytes] = []  # every log line sent: its place is its timestamp

    def log_message(self, *args):  # quiet
        pass

    def _answer(self):
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        # The API server decodes the path (`pod%3A9400` is `pod:9400`).
        self.requests.append(
            {
                "method": self.command,
                "path": unquote(url.path),
                "query": parse_qs(url.query),
                "body": body,
                "content_type": self.headers.get("Content-Type"),
                "auth": self.headers.get("Authorization"),
                "at": self.hooks["clock"]() if "clock" in self.hooks else None,
            }
        )
        if url.path.endswith("/log"):
            payload = (
                self.log_payloads.pop(0)
                if self.log_payloads
                else b"[rank0]: first\n[rank1]: other\n[rank0]: second\n"
            )
            # The client sends `True`; the API server parses booleans with Go's ParseBool.
            if parse_qs(url.query).get("timestamps", [""])[0].lower() == "true":
                stamped = []  # as the kubelet: an RFC3339Nano stamp and a space, in order
                for line in payload.splitlines(keepends=True):
                    self.stamps.append(line)
                    stamped.append(b"2026-01-01T12:00:00.%09dZ %s" % (len(self.stamps), line))
                payload = b"".join(stamped)
            if "on_log" in self.hooks:
                self.hooks["on_log"]()
            ctype = "text/plain"
        elif self.command == "GET" and url.path.endswith("/jobsets"):
            job = _JOB
            if len(self.requests) > 200:  # a follow that never reattaches: end the run
                job = {
                    **_JOB,
                    "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "TestGaveUp"}]},
                }
            payload = json.dumps({"kind": "JobSetList", "items": [job]}).encode()
            ctype = "application/json"
        elif self.command == "GET" and url.path.endswith("/workloads"):
            payload = json.dumps({"kind": "WorkloadList", "items": []}).encode()
            ctype = "application/json"
        elif self.command == "GET" and url.path.endswith(_POD["metadata"]["name"]):
            payload, ctype = json.dumps(_POD).encode(), "application/json"
        elif self.command == "GET" and url.path.endswith("/pods"):
            payload = json.dumps({"kind": "PodList", "items": [_POD]}).encode()
            ctype = "application/json"
        else:
            obj = dict(body) if isinstance(body, dict) else {"metadata": {}}
            obj.setdefault("metadata", {})["uid"] = "0000-uid"
            payload, ctype = json.dumps(obj).encode(), "application/json"
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer


_JOB = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {
        "name": RUN,
        "namespace": "research",
        "uid": "js-uid",
        "creationTimestamp": "2026-01-01T12:00:00Z",
        "labels": {"alchemist.io/run": RUN, "alchemist.io/name": "digits"},
        "annotations": {
            "alchemist.io/workers": "2",
            "alchemist.io/nodes": "1",
            "alchemist.io/procs-per-node": "2",
        },
    },
    "spec": {"suspend": False},
    "status": {"restarts": 0},
}
_POD = {
    "metadata": {
        "name": f"{RUN}-worker-0-0-abcde",
        "creationTimestamp": "2026-01-01T12:00:01Z",
        "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
        "labels": {"alchemist.io/run": RUN, "jobset.sigs.k8s.io/replicatedjob-name": "worker"},
    },
    "status": {"phase": "Running"},
}


@pytest.fixture
def api_server():
    _Recorder.requests, _Recorder.log_payloads, _Recorder.hooks = [], [], {}
    _Recorder.stamps = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    # A short poll: shutdown() waits for it (0.5 s by default, half of a unit test's second).
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.requests
    server.shutdown()


def _out(url: str) -> StackOutput:
    data = stack("dev").output.model_dump(mode="json")
    data["kubeconfig"] = (
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: '" + url + "'}\n"
        "contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n"
        f"users:\n- name: u\n  user: {{token: {TOKEN}}}\n"
    )
    return StackOutput.parse(data, "test")


def test_the_real_client_sends_what_the_api_server_expects(api_server):
    url, requests = api_server
    sched = KubernetesScheduler(_out(url))  # the real connect(): kubeconfig -> kubernetes client
    spec = load_spec(EXAMPLES / "digits.yaml")
    sched.schedule(sched.dryrun(spec, EXAMPLES, run_id=RUN))
    assert [(r["method"], r["path"]) for r in requests] == [
        ("POST", "/api/v1/namespaces/research/configmaps"),
        ("POST", "/apis/networking.k8s.io/v1/namespaces/research/networkpolicies"),
        ("POST", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets"),
        ("PATCH", f"/api/v1/namespaces/research/configmaps/{RUN}"),
        ("PATCH", f"/apis/networking.k8s.io/v1/namespaces/research/networkpolicies/{RUN}"),
    ]
    assert all(r["auth"] == f"Bearer {TOKEN}" for r in requests)
    assert requests[2]["body"]["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] == "Indexed"
    patch = requests[3]
    assert patch["content_type"] == "application/json-patch+json"
    assert patch["body"][0]["path"] == "/metadata/ownerReferences"
    assert patch["body"][0]["value"][0]["uid"] == "0000-uid"

    requests.clear()
    assert list(sched.logs(RUN, rank=0, follow=False)) == ["first\n", "second\n"]
    log = requests[-1]
    assert log["path"] == f"/api/v1/namespaces/research/pods/{RUN}-worker-0-0-abcde/log"
    assert log["query"]["container"] == ["train"]
    assert requests[0]["query"]["labelSelector"] == [f"alchemist.io/run={RUN}"]

    requests.clear()
    sched.progress(sched.status(RUN))  # rank 0's pod log tail, through the API server
    assert requests[-1]["path"] == f"/api/v1/namespaces/research/pods/{RUN}-worker-0-0-abcde/log"
    assert requests[-1]["query"]["tailLines"] == ["200"]

    requests.clear()
    assert sched.cancel(RUN).state == "cancelled"
    assert [(r["method"], r["path"]) for r in requests if r["method"] == "DELETE"] == [
        ("DELETE", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/{RUN}"),
        ("DELETE", f"/apis/networking.k8s.io/v1/namespaces/research/networkpolicies/{RUN}"),
        ("DELETE", f"/api/v1/namespaces/research/configmaps/{RUN}"),
    ]
    job_delete = next(r for r in requests if r["method"] == "DELETE")
    assert (
        job_delete["query"].get("propagationPolicy") == ["Background"]
        or (job_delete["body"] or {}).get("propagationPolicy") == "Background"
    )


def test_an_unreachable_cluster_is_one_line(tmp_path, run_cli):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = _out(f"http://127.0.0.1:{port}")
    path = tmp_path / "dev.json"
    data = out.model_dump(mode="json")
    data["kubeconfig"] = out.kubeconfig.get_secret_value()
    path.write_text(json.dumps(data))
    code, stdout, stderr = run_cli("list", "--stack", "dev", "--outputs", path)
    assert code == 1
    assert stderr == "error: stack dev: cannot reach the cluster (MaxRetryError)\n"
    assert TOKEN not in stdout + stderr
