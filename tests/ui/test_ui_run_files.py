"""A run's page from its files (issue 35.4): the parameter servers among the ranks, the
checkpoints of every rank and server, a header that agrees with the charts, and an ended
run's communication chart from the figures its ranks left."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from fastapi.testclient import TestClient

from tests.ui.conftest import AUTH, make_app

LOCAL = "http://127.0.0.1:8740"


def _client(home):
    app, _ = make_app(home)
    return TestClient(app, base_url=LOCAL, headers=AUTH)


def test_an_async_run_lists_its_parameter_servers_beside_its_ranks(async_home):
    home, run_id = async_home
    record = json.loads((home / "runs" / run_id / "workers" / "server-0.json").read_text())
    with _client(home) as c:
        d = c.get(f"/api/v1/stacks/local/runs/{run_id}").json()
    assert [k["rank"] for k in d["ranks"]] == [0, 1]
    assert [(s["shard"], s["state"]) for s in d["servers"]] == [(0, "finished")]
    server = d["servers"][0]
    assert server["pid"] == record["pid"] and server["node"] == record["node"]
    assert server["restarts"] == record["restart"] and server["updates"] == record["version"]


def test_a_sync_run_has_no_servers(finished_home):
    home, run_id = finished_home
    with _client(home) as c:
        assert c.get(f"/api/v1/stacks/local/runs/{run_id}").json()["servers"] == []


def test_the_checkpoints_of_every_rank_and_server_are_listed(async_home):
    home, run_id = async_home
    folder = home / "runs" / run_id / "checkpoints"
    on_disk = sorted(p.name for p in folder.glob("*.pt"))
    assert any(n.startswith("rank0-") for n in on_disk)
    assert any(n.startswith("rank1-") for n in on_disk)
    assert any(n.startswith("server0-") for n in on_disk)
    with _client(home) as c:
        d = c.get(f"/api/v1/stacks/local/runs/{run_id}").json()
    assert sorted(k["name"] for k in d["checkpoints"]) == on_disk
    for k in d["checkpoints"]:
        prefix, step = re.fullmatch(r"([a-z]+\d*)-(\d+)\.pt", k["name"]).groups()
        assert k["step"] == int(step) and k["bytes"] == (folder / k["name"]).stat().st_size
        assert k["holder"] == {"rank0": "rank 0", "rank1": "rank 1",
                               "server0": "server 0"}[prefix]


def test_a_collective_runs_checkpoints_are_every_ranks(finished_home):
    home, run_id = finished_home
    with _client(home) as c:
        d = c.get(f"/api/v1/stacks/local/runs/{run_id}").json()
    assert d["checkpoints"] and {k["holder"] for k in d["checkpoints"]} == {"every rank"}


def test_an_ended_runs_communication_chart_shows_its_figures(finished_home):
    """It used to be sampled only from rank 0's /metrics while the page was open: an ended
    run's chart said "no data yet" forever."""
    home, run_id = finished_home
    run_dir = home / "runs" / run_id
    rank0 = json.loads((run_dir / "workers" / "rank-0.json").read_text())
    result = json.loads((run_dir / "result.json").read_text())
    with _client(home) as c:
        s = c.get(f"/api/v1/stacks/local/runs/{run_id}/metrics").json()
    assert s["communication"], "an ended run's communication chart is empty"
    step, seconds = s["communication"][-1]
    assert step == result["steps"]
    assert seconds == pytest.approx(
        rank0["final_metrics"]["alchemist_communication_seconds_total"])


def test_the_header_accuracy_is_the_charts_when_the_result_has_none(finished_home, tmp_path):
    """An ended run whose result.json names no test_accuracy (a script's own loop) while its
    events hold test/accuracy: the header said `accuracy -` beside a chart at 0.97."""
    home, run_id = finished_home
    copy = tmp_path / "home"
    shutil.copytree(home / "runs" / run_id, copy / "runs" / run_id)
    result_file = copy / "runs" / run_id / "result.json"
    result = json.loads(result_file.read_text())
    result.pop("test_accuracy")
    result["test_metrics"].pop("accuracy", None)
    result_file.write_text(json.dumps(result))
    with _client(copy) as c:
        d = c.get(f"/api/v1/stacks/local/runs/{run_id}").json()
        s = c.get(f"/api/v1/stacks/local/runs/{run_id}/metrics").json()
    assert s["accuracy"]
    assert d["accuracy"] == pytest.approx(s["accuracy"][-1][1])


def test_the_header_accuracy_is_the_results_when_it_has_one(finished_home):
    home, run_id = finished_home
    result = json.loads((home / "runs" / run_id / "result.json").read_text())
    with _client(home) as c:
        d = c.get(f"/api/v1/stacks/local/runs/{run_id}").json()
        s = c.get(f"/api/v1/stacks/local/runs/{run_id}/metrics").json()
    assert d["accuracy"] == pytest.approx(result["test_accuracy"])
    assert s["accuracy"][-1][1] == pytest.approx(result["test_accuracy"])
