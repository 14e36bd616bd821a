"""The dashboard's JSON API, endpoint by endpoint, over a real finished local run and cluster
stacks behind the client-boundary fake API server: shapes, filters, bad and traversal ids,
oversized bodies, the token (on loopback too), cross-site changes, and no secret anywhere."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from alchemist_jobs.contract import PROGRESS_LINE_PREFIX
from alchemist_jobs.spec import shown_source
from alchemist_jobs.ui import security
from tests.ui.conftest import AUTH, EXAMPLES, KUBECONFIG_SECRET, REPO, TEST_TOKEN, TOKEN_SECRET, cli, make_app

LOCAL = "http://127.0.0.1:8740"
CHANGE = {security.CSRF_HEADER: security.CSRF_VALUE}
DIGITS = (EXAMPLES / "digits.yaml").read_text()


@pytest.fixture
def client(finished_home):
    app, _ = make_app(finished_home[0])
    with TestClient(app, base_url=LOCAL, headers=AUTH) as c:
        yield c


def one_line(resp) -> str:
    detail = resp.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and "Traceback" not in detail, detail
    return detail


# --- runs, a run, its metrics and logs ---------------------------------------------------------


def test_runs_lists_the_real_run_with_its_numbers(client, finished_home):
    home, run_id = finished_home
    data = client.get("/api/v1/runs").json()
    assert data["total"] == 1 and data["problems"] == []
    r = data["runs"][0]
    result = json.loads((home / "runs" / run_id / "result.json").read_text())
    assert r["run_id"] == run_id and r["stack"] == "local" and r["state"] == "succeeded"
    assert r["workers"] == 2 and r["step"] == r["total_steps"] == result["steps"]
    assert r["progress"] == 1.0
    assert r["loss"] == pytest.approx(result["final_loss"])
    assert r["accuracy"] == pytest.approx(result["test_accuracy"])
    assert r["owner"] and r["created"] < r["ended"]


def test_the_server_is_ready_once_the_runs_are_read(tmp_path, monkeypatch):
    """The dashboard says it is ready (and prints its URL) only once it has read the ended
    local runs, so its first GET /api/v1/runs reads no run: with 10,000 runs that request
    used to read them all again while the start's own reading ran beside it."""
    from alchemist_jobs.local_backend import LocalScheduler
    from alchemist_jobs.ui.app import create_app
    from alchemist_jobs.ui.backends import Backends
    from tests.unit.test_run_listing import _run

    for i in range(40):  # more than the dashboard reads one by one
        _run(tmp_path, i)
    reads: list[str] = []

    def counted(method: str):
        real = getattr(LocalScheduler, method)

        def call(self, *args):
            out = real(self, *args)
            reads.append("list" if method.startswith("list") else args[0])
            return out

        monkeypatch.setattr(LocalScheduler, method, call)

    for method in ("list", "list_json", "status"):
        if hasattr(LocalScheduler, method):
            counted(method)
    ready: list[list[str]] = []
    app = create_app(
        Backends(["local"], home=tmp_path, spec_dir=REPO),
        TEST_TOKEN,
        "127.0.0.1",
        8740,
        on_started=lambda: ready.append(list(reads)),
    )
    with TestClient(app, base_url=LOCAL, headers=AUTH) as c:
        body = c.get("/api/v1/runs").json()
    assert body["total"] == 40
    assert ready == [["list"]] and reads == ["list"], (ready, reads)


def test_run_detail_has_spec_ranks_checkpoints_and_result(client, finished_home):
    home, run_id = finished_home
    d = client.get(f"/api/v1/stacks/local/runs/{run_id}").json()
    assert d["spec"]["name"] == "digits" and d["spec"]["hyper"]["epochs"] == 3
    assert [k["rank"] for k in d["ranks"]] == [0, 1]
    assert all(k["state"] == "finished" for k in d["ranks"])
    on_disk = sorted(p.name for p in (home / "runs" / run_id / "checkpoints").glob("step-*.pt"))
    assert [c["name"] for c in d["checkpoints"]] == on_disk and on_disk
    assert all(c["bytes"] > 0 for c in d["checkpoints"])
    assert d["result"]["steps"] == d["step"]


def test_metrics_come_from_the_runs_tensorboard_events(client, finished_home):
    home, run_id = finished_home
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(home / "runs" / run_id / "tensorboard"))
    acc.Reload()
    want = {e.step: e.value for e in acc.Scalars("train/loss")}
    s = client.get(f"/api/v1/stacks/local/runs/{run_id}/metrics").json()
    got = dict(s["loss"])
    assert len(want) >= 2 and set(want) <= {int(k) for k in got}
    assert all(got[float(k)] == pytest.approx(v, rel=1e-6) for k, v in want.items())
    assert [p[1] for p in s["accuracy"]] == pytest.approx([e.value for e in acc.Scalars("test/accuracy")])
    assert s["throughput"]


def test_logs_come_in_chunks_from_an_offset(client, finished_home):
    home, run_id = finished_home
    text = (home / "runs" / run_id / "logs" / "rank-1.log").read_text()
    base = f"/api/v1/stacks/local/runs/{run_id}/logs"
    first = client.get(base, params={"rank": 1}).json()
    assert first["text"] == text and first["finished"] and first["next_offset"] == len(text.encode())
    rest = client.get(base, params={"rank": 1, "offset": 10}).json()
    assert rest["text"] == text[10:]
    end = client.get(base, params={"rank": 1, "offset": first["next_offset"]}).json()
    assert end["text"] == "" and end["finished"]
    r = client.get(base, params={"rank": 2})
    assert r.status_code == 400 and "ranks 0..1" in one_line(r)
    assert client.get(base, params={"rank": -1}).status_code == 400
    assert client.get(base, params={"offset": -5}).status_code == 400


def test_filter_and_sort(client, finished_home):
    _, run_id = finished_home
    assert client.get("/api/v1/runs", params={"state": "running"}).json()["total"] == 0
    assert client.get("/api/v1/runs", params={"state": "succeeded"}).json()["total"] == 1
    assert client.get("/api/v1/runs", params={"q": "digits"}).json()["total"] == 1
    assert client.get("/api/v1/runs", params={"q": "nothing-like-it"}).json()["total"] == 0
    assert client.get("/api/v1/runs", params={"sort": "loss", "order": "asc"}).status_code == 200
    for column in ("algorithm", "duration_s", "reason"):  # the table's columns sort too
        r = client.get("/api/v1/runs", params={"sort": column, "order": "desc"})
        assert r.status_code == 200 and r.json()["runs"][0]["run_id"] == run_id, column
    for bad in ({"sort": "__class__"}, {"order": "up"}, {"limit": 0}, {"stack": "nope"}):
        r = client.get("/api/v1/runs", params=bad)
        assert r.status_code in (400, 404), bad
        one_line(r)


def test_cancel_of_a_finished_run_changes_nothing(client, finished_home):
    _, run_id = finished_home
    r = client.post(f"/api/v1/stacks/local/runs/{run_id}/cancel", headers=CHANGE)
    assert r.status_code == 200 and r.json()["state"] == "succeeded"


# --- ids -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        "..",
        "...",
        "-x",
        "A1",
        "digits*",
        "dig%3Fts",
        "[d]igits",
        "a" * 81,
        "a b",
        "%2e%2e",
        "..%2f..%2fetc",
        "digits%00",
        "..%5c..",
    ],
)
@pytest.mark.parametrize("tail", ["", "/metrics", "/logs"])
def test_bad_and_traversal_run_ids_are_refused(client, bad, tail):
    r = client.get(f"/api/v1/stacks/local/runs/{bad}{tail}")
    assert r.status_code in (400, 404), (bad, r.status_code)
    assert "accepted" in one_line(r) or r.status_code == 404
    r = client.post(f"/api/v1/stacks/local/runs/{bad}/cancel", headers=CHANGE)
    assert r.status_code in (400, 404)


def test_a_traversal_never_reaches_a_run_outside_the_runs_folder(tmp_path):
    # A spec.yaml one level up, where `runs/..` would find it.
    (tmp_path / "runs").mkdir()
    (tmp_path / "spec.yaml").write_text(DIGITS)
    app, _ = make_app(tmp_path)
    with TestClient(app, base_url=LOCAL, headers=AUTH) as c:
        for ref in ("..", "..%2f", "%2e%2e"):
            assert c.get(f"/api/v1/stacks/local/runs/{ref}").status_code in (400, 404)


def test_unknown_run_and_stack_are_404(client):
    r = client.get("/api/v1/stacks/local/runs/nope-20260101-000000-0000")
    assert r.status_code == 404 and "no such run" in one_line(r)
    r = client.get("/api/v1/stacks/prod/runs/x")
    assert r.status_code == 404 and "not served" in one_line(r)


# --- submit and check ----------------------------------------------------------------------------


def test_a_bad_spec_gets_the_clis_one_line_error(client, tmp_path, finished_home):
    bad = DIGITS.replace("epochs: 10", "epochs: -3")
    (tmp_path / "bad.yaml").write_text(bad)
    proc = cli("run", str(tmp_path / "bad.yaml"), "--dry-run", home=finished_home[0])
    assert proc.returncode == 2
    # the CLI names the file as errors show one (its end, where the path is long)
    cli_line = (
        proc.stderr.strip()
        .removeprefix("error: ")
        .replace(shown_source(str(tmp_path / "bad.yaml")), "bad.yaml")
    )
    for path in ("/api/v1/check", "/api/v1/runs"):
        r = client.post(path, json={"spec": bad, "filename": "bad.yaml"}, headers=CHANGE)
        assert r.status_code == 400 and one_line(r) == cli_line
    r = client.post("/api/v1/check", json={"spec": "name: [unclosed"}, headers=CHANGE)
    assert r.status_code == 400 and one_line(r).startswith("spec: line 1")
    runs = list((finished_home[0] / "runs").iterdir())
    assert len(runs) == 1  # nothing was written


def test_check_shows_the_plan_and_starts_nothing(client, finished_home):
    r = client.post("/api/v1/check", json={"spec": DIGITS}, headers=CHANGE)
    assert r.status_code == 200
    c = r.json()
    assert c["name"] == "digits" and c["workers"] == 2 and "alchemist_jobs.agent" in c["plan"]
    assert len(list((finished_home[0] / "runs").iterdir())) == 1


def test_submit_runs_a_local_job_to_the_end(tmp_path):
    app, backends = make_app(tmp_path)
    spec = DIGITS.replace("epochs: 10", "epochs: 1")
    with TestClient(app, base_url=LOCAL, headers=AUTH) as c:
        r = c.post("/api/v1/runs", json={"spec": spec}, headers=CHANGE)
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        deadline = time.time() + 600  # a deadline for failure, not a measurement
        while (d := c.get(f"/api/v1/stacks/local/runs/{run_id}").json())["state"] in (
            "pending",
            "running",
        ) and time.time() < deadline:
            time.sleep(0.2)
    assert d["state"] == "succeeded" and d["result"]["steps"] > 0
    assert d["owner"] and [k["state"] for k in d["ranks"]] == ["finished", "finished"]


# --- cluster stacks ------------------------------------------------------------------------------


@pytest.fixture
def cluster_client(fake, finished_home, outputs_dir):
    app, _ = make_app(finished_home[0], outputs_dir, stacks=("local", "dev", "aws-us-west-2"))
    with TestClient(app, base_url=LOCAL, headers=AUTH) as c:
        yield c


def test_submit_to_a_cluster_stack_creates_the_job_and_shows_it_queued(cluster_client, fake):
    r = cluster_client.post("/api/v1/runs", json={"stack": "dev", "spec": DIGITS}, headers=CHANGE)
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    assert ("JobSet", run_id) in fake.creates()
    runs = cluster_client.get("/api/v1/runs", params={"stack": "dev"}).json()["runs"]
    (mine,) = [x for x in runs if x["run_id"] == run_id]
    assert mine["state"] == "queued" and "Kueue" in mine["reason"]
    d = cluster_client.get(f"/api/v1/stacks/dev/runs/{run_id}").json()
    assert d["links"]["grafana"] and d["links"]["tensorboard"]
    r = cluster_client.post(f"/api/v1/stacks/dev/runs/{run_id}/cancel", headers=CHANGE)
    assert r.json()["state"] == "cancelled" and ("JobSet", run_id) in fake.deletes()


def test_a_cluster_runs_ranks_and_live_charts_come_from_its_pods(cluster_client, fake):
    spec = DIGITS.replace("nodes: 1", "nodes: 2")
    r = cluster_client.post("/api/v1/runs", json={"stack": "dev", "spec": spec}, headers=CHANGE)
    run_id = r.json()["run_id"]
    fake.set_job(run_id, spec={"suspend": False}, status={"active": 2})
    pods = [fake.add_pod(run_id, i, "Running")["metadata"]["name"] for i in (0, 1)]
    d = cluster_client.get(f"/api/v1/stacks/dev/runs/{run_id}").json()
    assert d["state"] == "running"
    # 2 nodes x 2 processes: ranks 0-1 on pod 0, ranks 2-3 on pod 1
    assert [(k["rank"], k["node"]) for k in d["ranks"]] == [
        (0, pods[0]),
        (1, pods[0]),
        (2, pods[1]),
        (3, pods[1]),
    ]
    # rank 0's progress lines in its pod log, read through the API server (pods/log: the
    # platform's NetworkPolicies keep the API server's pod proxy off job pods)
    path = f"/api/v1/stacks/dev/runs/{run_id}/metrics"
    log = ""
    for step, loss in ((10, 2.25), (20, 1.5)):
        log += f'[rank0]: {PROGRESS_LINE_PREFIX}{{"step": {step}, "loss": {loss}}}\n'
        fake.pod_logs[pods[0]] = log
        series = cluster_client.get(path).json()
    assert series["loss"] == [[10.0, 2.25], [20.0, 1.5]]


def test_gpus_beyond_the_stack_are_refused_before_anything_is_created(cluster_client, fake):
    spec = DIGITS.replace("gpu: 0", "gpu: 64")
    r = cluster_client.post("/api/v1/runs", json={"stack": "dev", "spec": spec}, headers=CHANGE)
    assert r.status_code == 400 and one_line(r).startswith("resources.gpu")
    assert fake.creates() == []


def test_an_unreachable_cluster_is_one_line_and_hides_no_other_stack(finished_home, outputs_dir):
    # No fake here: the dev stack's kubeconfig names a kind API server that is not running.
    app, _ = make_app(finished_home[0], outputs_dir, stacks=("local", "dev"))
    with TestClient(app, base_url=LOCAL, headers=AUTH) as c:
        data = c.get("/api/v1/runs").json()
        assert {r["stack"] for r in data["runs"]} == {"local"}
        assert [p["stack"] for p in data["problems"]] == ["dev"]
        detail = data["problems"][0]["detail"]
        assert "\n" not in detail and KUBECONFIG_SECRET not in detail and TOKEN_SECRET not in detail
        r = c.get("/api/v1/stacks/dev/runs/digits-20260101-120000-ab12")
        assert r.status_code in (400, 502) and TOKEN_SECRET not in r.text
        one_line(r)


def test_no_response_holds_a_secret(cluster_client, fake, finished_home):
    """Every endpoint, on a stack whose output holds a kubeconfig with a token."""
    _, local_run = finished_home
    r = cluster_client.post("/api/v1/runs", json={"stack": "dev", "spec": DIGITS}, headers=CHANGE)
    run_id = r.json()["run_id"]
    fake.add_pod(run_id, 0, log="hello\n")
    bodies = [r.text, cluster_client.get("/api/v1/openapi.json").text]
    for path in [
        "/api/v1/stacks",
        "/api/v1/runs",
        f"/api/v1/stacks/dev/runs/{run_id}",
        f"/api/v1/stacks/dev/runs/{run_id}/metrics",
        f"/api/v1/stacks/dev/runs/{run_id}/logs",
        f"/api/v1/stacks/local/runs/{local_run}",
        "/api/v1/stacks/aws-us-west-2/runs/x",
        "/",
        "/static/app.js",
    ]:
        bodies.append(cluster_client.get(path).text)
    for stack in ("dev", "local"):
        bodies.append(
            cluster_client.post("/api/v1/check", json={"stack": stack, "spec": DIGITS}, headers=CHANGE).text
        )
    bodies.append(cluster_client.post(f"/api/v1/stacks/dev/runs/{run_id}/cancel", headers=CHANGE).text)
    facts = {s["name"]: s for s in cluster_client.get("/api/v1/stacks").json()}
    assert facts["dev"]["provider"] == "kind" and facts["dev"]["queue"]
    # the cluster and its fabric in the provider's own words (the contract's auth.label, gpu.fabric.name)
    aws = facts["aws-us-west-2"]
    assert (aws["cluster_label"], aws["cluster"], aws["region"]) == (
        "EKS cluster",
        "alchemist-aws-us-west-2",
        "us-west-2",
    )
    assert (aws["fabric"], aws["fabric_per_node"]) == ("EFA", 1)
    assert facts["dev"]["cluster"] is None and facts["dev"]["fabric"] is None
    for body in bodies:
        assert KUBECONFIG_SECRET not in body and TOKEN_SECRET not in body
        assert "kubeconfig" not in body.lower().replace("kubeconfigs", "") or body.startswith('{"openapi')


# --- the gate: token, origin, host, body size ----------------------------------------------------


@pytest.fixture
def exposed(finished_home):
    token = security.new_token()
    app, _ = make_app(finished_home[0], host="0.0.0.0", port=8740, token=token)
    with TestClient(app, base_url="http://10.1.2.3:8740") as c:
        yield c, token


def test_beyond_loopback_every_api_call_needs_the_token(exposed, finished_home):
    c, token = exposed
    _, run_id = finished_home
    wrong = "x" * len(token)
    calls = [
        ("get", "/api/v1/stacks"),
        ("get", "/api/v1/runs"),
        ("get", f"/api/v1/stacks/local/runs/{run_id}"),
        ("get", f"/api/v1/stacks/local/runs/{run_id}/metrics"),
        ("get", f"/api/v1/stacks/local/runs/{run_id}/logs"),
        ("get", "/api/v1/openapi.json"),
        ("post", f"/api/v1/stacks/local/runs/{run_id}/cancel"),
        ("post", "/api/v1/check"),
        ("post", "/api/v1/runs"),
    ]
    for method, path in calls:
        for auth in (
            {},
            {"Authorization": f"Bearer {wrong}"},
            {"Authorization": token},
            {"Authorization": f"Bearer {token[:-1]}"},
        ):
            r = getattr(c, method)(path, headers={**auth, **CHANGE})
            assert r.status_code == 401, (method, path, auth)
            assert token not in r.text and "token" in one_line(r)
    ok = {"Authorization": f"Bearer {token}"}
    assert c.get("/api/v1/runs", headers=ok).json()["total"] == 1
    r = c.post("/api/v1/check", json={"spec": DIGITS}, headers={**ok, **CHANGE})
    assert r.status_code == 200
    page = c.get("/")  # the page itself holds no data; it asks for the token
    assert page.status_code == 200 and token not in page.text


def test_on_loopback_too_every_api_call_needs_the_token(finished_home):
    """Any account of the machine reaches loopback (issue 25, finding 2)."""
    _, run_id = finished_home
    app, _ = make_app(finished_home[0])
    with TestClient(app, base_url=LOCAL) as c:
        for method, path in [
            ("get", "/api/v1/runs"),
            ("get", "/api/v1/stacks"),
            ("get", f"/api/v1/stacks/local/runs/{run_id}/logs"),
            ("post", "/api/v1/runs"),
            ("post", "/api/v1/check"),
        ]:
            r = getattr(c, method)(path, headers=CHANGE)
            assert r.status_code == 401 and "token" in one_line(r), (method, path)
        assert c.get("/api/v1/runs", headers=AUTH).json()["total"] == 1
        page = c.get("/")  # the page holds no data: it takes the token from the one-time URL
        assert page.status_code == 200 and TEST_TOKEN not in page.text


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_real_server_shows_its_token_once_and_requires_it(tmp_path, host):
    import httpx

    from tests.ui.conftest import UiServer

    server = UiServer(tmp_path, "--host", host)
    try:
        url_line = next(line for line in server.banner if "#token=" in line)
        login = url_line.split("#token=")[1].split()[0]
        token = server.token  # the scripts' one, on the next line
        assert len(login) >= 40 and len(token) >= 40
        port = server.url.rsplit(":", 1)[1].strip("/")
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/api/v1/runs").status_code == 401
        r = httpx.get(f"{url}/api/v1/runs", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.json()["total"] == 0
    finally:
        assert server.stop() == 0
    # Each once, at start (the URL's, the scripts'); never again, not even at the end.
    shown = "".join(server.banner)
    assert shown.count(token) == 1 and shown.count(login) == 1


def test_changes_need_the_header_and_the_same_origin(client, finished_home):
    _, run_id = finished_home
    path = f"/api/v1/stacks/local/runs/{run_id}/cancel"
    r = client.post(path)
    assert r.status_code == 403 and security.CSRF_HEADER in one_line(r)
    r = client.post(path, headers={**CHANGE, "Origin": "http://evil.example"})
    assert r.status_code == 403
    r = client.post(path, headers={**CHANGE, "Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403
    r = client.post(path, headers={**CHANGE, "Origin": LOCAL})
    assert r.status_code == 200


def test_a_loopback_bind_answers_only_its_own_host_names(client):
    assert client.get("/api/v1/runs", headers={"Host": "127.0.0.1:8740"}).status_code == 200
    assert client.get("/api/v1/runs", headers={"Host": "localhost:8740"}).status_code == 200
    # kubectl port-forward 9000:8740 to the in-cluster dashboard
    assert client.get("/api/v1/runs", headers={"Host": "127.0.0.1:9000"}).status_code == 200
    for host in (
        "evil.example:8740",
        "127.0.0.1.evil.example:8740",
        "evil.example",
        "[::1].evil.example",
        "",
    ):
        r = client.get("/api/v1/runs", headers={"Host": host})
        assert r.status_code == 421 and "runs" not in r.json()


def test_oversized_bodies_are_refused(client):
    big = "x" * (70 * 1024)
    r = client.post("/api/v1/check", json={"spec": big}, headers=CHANGE)
    assert r.status_code == 413 and "bytes" in one_line(r)

    def chunks():  # no Content-Length: the cap holds while the body streams
        for _ in range(80):
            yield b"x" * 1024

    r = client.post("/api/v1/check", content=chunks(), headers={**CHANGE, "Content-Type": "application/json"})
    assert r.status_code == 413
    r = client.post(
        "/api/v1/check", content=b"{not json", headers={**CHANGE, "Content-Type": "application/json"}
    )
    assert r.status_code == 400
    one_line(r)


def test_security_headers_on_every_answer(client):
    for path in ("/", "/api/v1/runs", "/static/app.js"):
        h = client.get(path).headers
        assert "default-src 'self'" in h["content-security-policy"]
        assert h["x-frame-options"] == "DENY" and h["x-content-type-options"] == "nosniff"


def test_the_openapi_schema_lists_every_endpoint(client):
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    assert set(paths) == {
        "/api/v1/stacks",
        "/api/v1/runs",
        "/api/v1/check",
        "/api/v1/session",
        "/api/v1/stacks/{stack}/runs/{run_id}",
        "/api/v1/stacks/{stack}/runs/{run_id}/metrics",
        "/api/v1/stacks/{stack}/runs/{run_id}/logs",
        "/api/v1/stacks/{stack}/runs/{run_id}/cancel",
    }


def test_the_page_loads_nothing_from_elsewhere():
    static = REPO / "alchemist_jobs" / "ui" / "static"
    for f in static.iterdir():
        text = f.read_text()
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text, (
            f.name
        )


# --- the command ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, field",
    [
        (["--stack", "no such"], "--stack"),
        (["--port", "70000"], "--port"),
        (["--outputs", "dev"], "--outputs"),
        (["--stack", "dev", "--outputs", "dev=/nonexistent.json"], "--outputs"),
        (["--host", "no.such.host.invalid"], "--host"),
        (["--tensorboard-url", "javascript:alert(1)"], "--tensorboard-url"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(tmp_path, args, field):
    proc = cli("ui", "--home", str(tmp_path), *args, home=tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert field in proc.stderr and "Traceback" not in proc.stderr


def test_the_cli_does_not_load_the_web_stack_for_other_commands():
    code = (
        "import sys; from alchemist_jobs.cli import build_parser; build_parser(None); "
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules))"
    )
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "[]", out.stderr


def test_stopping_the_dashboard_cancels_the_local_runs_it_started(tmp_path):
    import httpx

    from alchemist_jobs.processes import alive
    from tests.ui.conftest import UiServer

    server = UiServer(tmp_path)
    try:
        spec = DIGITS.replace("epochs: 10", "epochs: 400")
        r = httpx.post(
            f"{server.url}api/v1/runs", json={"spec": spec}, headers={**CHANGE, **server.auth}, timeout=120
        )
        assert r.status_code == 201, r.text
        run_dir = tmp_path / "runs" / r.json()["run_id"]
        deadline = time.time() + 600  # a deadline for failure, not a measurement
        while (
            len(list((run_dir / "workers").glob("rank-*.json"))) < 2
            or not (run_dir / "progress.json").exists()
        ):
            assert time.time() < deadline and server.proc.poll() is None
            time.sleep(0.2)
        state = json.loads((run_dir / "run.json").read_text())
        pids = state["agents"] + [
            json.loads(p.read_text())["pid"] for p in (run_dir / "workers").glob("rank-*.json")
        ]
        assert all(alive(p) for p in pids)
    finally:
        assert server.stop() == 0
    assert [p for p in pids if alive(p)] == []
    assert json.loads((run_dir / "run.json").read_text())["state"] == "cancelled"
