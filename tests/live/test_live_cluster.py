"""Live tier: examples/digits.yaml on a real cluster, through the real CLI and the real
`kubernetes` client, waited on until it succeeds; then its logs, status, list; and a second
run cancelled.

Runs only when ALCHEMIST_TEST_KUBECONFIG names a kubeconfig file. The stack's other facts
come from ALCHEMIST_TEST_OUTPUTS (a stack's `alchemist` output as JSON; its kubeconfig is
replaced by the file's) or, by default, the `dev` (kind) fixture. ALCHEMIST_TEST_IMAGE
overrides the training image; ALCHEMIST_TEST_TIMEOUT_S bounds each run (default 1200).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KUBECONFIG = os.environ.get("ALCHEMIST_TEST_KUBECONFIG")
pytestmark = [pytest.mark.live,
              pytest.mark.skipif(not KUBECONFIG, reason="set ALCHEMIST_TEST_KUBECONFIG to a "
                                                        "cluster's kubeconfig to run")]
TIMEOUT = float(os.environ.get("ALCHEMIST_TEST_TIMEOUT_S", "1200"))


@pytest.fixture(scope="module")
def live_stack(tmp_path_factory) -> tuple[str, Path]:
    source = Path(os.environ.get("ALCHEMIST_TEST_OUTPUTS")
                  or REPO / "tests/fixtures/stack_outputs/dev.json")
    data = json.loads(source.read_text())
    data = data.get("alchemist", data)
    data["kubeconfig"] = Path(KUBECONFIG).read_text()
    data.pop("eks", None)
    data.pop("auth", None)
    path = tmp_path_factory.mktemp("live") / "outputs.json"
    path.touch(mode=0o600)
    path.write_text(json.dumps(data))
    return data["stack"], path


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "alchemist_jobs", *args], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                          text=True, timeout=timeout)


def _image_args() -> list[str]:
    image = os.environ.get("ALCHEMIST_TEST_IMAGE")
    return ["--set", f"image={image}"] if image else []


def test_digits_succeeds_on_the_cluster(live_stack):
    name, outputs = live_stack
    stack = ["--stack", name, "--outputs", str(outputs)]
    res = _cli("run", "examples/digits.yaml", *stack, "--set", "hyper.epochs=3", *_image_args(),
               timeout=TIMEOUT)
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = res.stderr.split("submitted ")[1].split()[0]
    assert f"run {run_id}: succeeded" in res.stdout
    status = _cli("status", run_id, *stack)
    assert status.returncode == 0 and "state      succeeded" in status.stdout
    assert run_id in _cli("list", *stack).stdout
    assert _cli("logs", run_id, "--rank", "1", *stack).returncode == 0
    assert Path(KUBECONFIG).read_text().strip() not in res.stdout + res.stderr


def test_a_cancelled_run_leaves_nothing(live_stack):
    name, outputs = live_stack
    stack = ["--stack", name, "--outputs", str(outputs)]
    res = _cli("submit", "examples/digits.yaml", *stack, *_image_args())
    assert res.returncode == 0, res.stderr
    run_id = res.stderr.split("submitted ")[1].split()[0]
    cancel = _cli("cancel", run_id, *stack)
    assert cancel.returncode == 0 and "cancelled" in cancel.stdout
    deadline = time.monotonic() + 60  # deletion is asynchronous
    while True:
        gone = _cli("status", run_id, *stack)
        if gone.returncode == 2 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert gone.returncode == 2 and "no such run" in gone.stderr


def test_losing_pod_0_mid_run_restarts_the_group_and_succeeds(live_stack):
    """A 2-node job; once rank 0 has logged training progress, pod 0 (the c10d store) is
    deleted. JobSet recreates the whole group, which resumes from its newest checkpoint, and
    the run still succeeds."""
    name, outputs = live_stack
    stack = ["--stack", name, "--outputs", str(outputs)]
    res = _cli("submit", "examples/digits.yaml", *stack, "--set", "nodes=2",
               "--set", "procs_per_node=1", "--set", "hyper.epochs=20", *_image_args())
    assert res.returncode == 0, res.stderr
    run_id = res.stderr.split("submitted ")[1].split()[0]
    kubectl = ["kubectl", "--kubeconfig", KUBECONFIG, "-n",
               json.loads(outputs.read_text())["namespace"]]
    deadline = time.monotonic() + TIMEOUT
    while True:  # until the group runs and rank 0 has written to its log
        st = _cli("status", run_id, *stack)
        logs = _cli("logs", run_id, "--rank", "0", *stack)
        if ("state      running" in st.stdout and logs.stdout.strip()) or \
                time.monotonic() > deadline:
            break
        time.sleep(5)
    assert time.monotonic() < deadline, "the run never got running: " + st.stdout
    pods = subprocess.run(kubectl + ["get", "pods", "-l", f"alchemist.io/run={run_id},"
                                     "batch.kubernetes.io/job-completion-index=0,"
                                     "jobset.sigs.k8s.io/replicatedjob-name=worker",
                                     "-o", "name"], capture_output=True, text=True, check=True)
    assert pods.stdout.strip(), "pod 0 not found"
    subprocess.run(kubectl + ["delete", "--wait=false", *pods.stdout.split()], check=True,
                   capture_output=True)
    while True:
        st = _cli("status", run_id, *stack)
        if any(f"state      {s}" in st.stdout for s in ("succeeded", "failed")) or \
                time.monotonic() > deadline:
            break
        time.sleep(5)
    assert "state      succeeded" in st.stdout, st.stdout + st.stderr
    assert "restarts   " in st.stdout and "restarts   0\n" not in st.stdout  # JobSet's count


def test_a_second_team_runs_in_its_own_namespace_as_its_own_identity(live_stack):
    """Issue 36.2: `--team` runs the job in the second team's namespace, with its credential
    where it has one, as its uid; the default team's `list` does not see it."""
    name, outputs = live_stack
    teams = json.loads(outputs.read_text()).get("teams") or []
    if len(teams) < 2:
        pytest.skip("the stack output names one team")
    team = teams[1]
    stack = ["--stack", name, "--outputs", str(outputs)]
    res = _cli("run", "examples/digits.yaml", *stack, "--team", team["name"], "--set", "hyper.epochs=1",
               *_image_args(), timeout=TIMEOUT)
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = res.stderr.split("submitted ")[1].split()[0]
    assert f"run {run_id}: succeeded" in res.stdout
    assert run_id in _cli("list", *stack, "--team", team["name"]).stdout
    assert run_id not in _cli("list", *stack).stdout
    kubectl = ["kubectl", "--kubeconfig", KUBECONFIG, "-n", team["namespace"]]
    users = subprocess.run(kubectl + ["get", "pods", "-l", f"alchemist.io/run={run_id}", "-o",
                                      "jsonpath={.items[*].spec.securityContext.runAsUser}"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert users and set(users) == {str(team["uid"])}
    assert "kubeconfig" not in res.stdout + res.stderr
