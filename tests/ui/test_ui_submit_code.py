"""Submit from the dashboard runs the run's own copy of the code: an empty spec directory and a
script outside it are one-line 4xx answers that leave nothing behind; a script named by an
absolute path inside it runs from the copy. The outside script is another account's (`alc-other`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fastapi.testclient import TestClient

from alchemist_jobs.ui import security
from alchemist_jobs.ui.app import create_app
from alchemist_jobs.ui.backends import Backends
from tests.another_user import as_other, other_account, shared_dir  # noqa: F401

TOKEN = "test-token-submit-code"
HEADERS = {security.CSRF_HEADER: security.CSRF_VALUE, "Authorization": f"Bearer {TOKEN}"}
LOCAL = "http://127.0.0.1:8740"


def client_over(spec_dir: Path, home: Path) -> TestClient:
    b = Backends(["local"], home=home, spec_dir=spec_dir)
    return TestClient(create_app(b, TOKEN, "127.0.0.1", 8740), base_url=LOCAL)


def wait_done(c: TestClient, run_id: str) -> dict:
    deadline = time.time() + 600  # a deadline for failure, not a measurement
    while (d := c.get(f"/api/v1/stacks/local/runs/{run_id}", headers=HEADERS).json())["state"] in (
            "pending", "running") and time.time() < deadline:
        time.sleep(0.2)
    return d


def leftovers(home: Path) -> list[str]:
    runs = home / "runs"
    return sorted(p.name for p in runs.iterdir()) if runs.exists() else []


def test_a_script_outside_an_empty_spec_directory_is_refused_and_leaves_nothing(tmp_path, shared_dir):
    """Finding 9: the dashboard serves an empty directory; the spec names another account's
    script by an absolute path. Before: 500 (FileNotFoundError on code/) and a failed run."""
    uid, gid = other_account()
    theirs = shared_dir / "theirs"
    theirs.mkdir()
    os.chown(theirs, uid, gid)
    marker = theirs / "ran"
    script = theirs / "train.py"
    wrote = as_other(["sh", "-c", f"printf 'open({str(marker)!r}, \"w\").write(\"x\")\\n' > {script}"])
    assert wrote.returncode == 0 and script.stat().st_uid == uid, wrote.stderr
    empty, home = tmp_path / "empty", tmp_path / "home"
    empty.mkdir()
    spec = f"name: outside\nprocs_per_node: 1\nmax_restarts: 0\ntask: {{script: {script}}}\n"
    with client_over(empty, home) as c:
        for path in ("/api/v1/check", "/api/v1/runs"):
            r = c.post(path, json={"spec": spec, "filename": "job.yaml"}, headers=HEADERS)
            assert r.status_code == 400, (path, r.status_code, r.text)
            detail = r.json()["detail"]
            assert "\n" not in detail and "task.script" in detail and "outside" in detail, detail
    assert leftovers(home) == [] and not marker.exists()


def test_a_module_task_from_an_empty_spec_directory_runs(tmp_path):
    """An empty code directory is still the workers' directory: the run starts and ends."""
    empty, home = tmp_path / "empty", tmp_path / "home"
    empty.mkdir()
    spec = "name: empty\nprocs_per_node: 1\nmax_restarts: 0\ntask: {module: this}\n"
    with client_over(empty, home) as c:
        r = c.post("/api/v1/runs", json={"spec": spec}, headers=HEADERS)
        assert r.status_code == 201, r.text
        d = wait_done(c, r.json()["run_id"])
    assert d["state"] == "succeeded", d


def test_a_script_named_by_its_absolute_path_runs_from_the_runs_copy(tmp_path):
    """Finding 9: an absolute path inside the spec's directory is the copy's file, not the
    original (which its owner may change while the run goes on)."""
    src, home = tmp_path / "src", tmp_path / "home"
    src.mkdir()
    (src / "train.py").write_text("import os\nprint('running', os.path.abspath(__file__), flush=True)\n")
    spec = f"name: abs\nprocs_per_node: 1\nmax_restarts: 0\ntask: {{script: {src / 'train.py'}}}\n"
    with client_over(src, home) as c:
        plan = c.post("/api/v1/check", json={"spec": spec}, headers=HEADERS).json()["plan"]
        assert "bootstrap script train.py" in plan and str(src / "train.py") not in plan, plan
        r = c.post("/api/v1/runs", json={"spec": spec}, headers=HEADERS)
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        d = wait_done(c, run_id)
    assert d["state"] == "succeeded", d
    log = (home / "runs" / run_id / "logs" / "rank-0.log").read_text()
    assert f"running {home / 'runs' / run_id / 'code' / 'train.py'}" in log, log
