"""`alchemist interactive`: the session pod through the fake API client (it records what the
command asks the cluster; see fake_kube.py), and on `local` a real shell whose environment is
a worker's."""

from __future__ import annotations

import pytest

from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes.interactive import session_name, session_pod
from tests.k8s_stacks import stack
from tests.unit.k8s.conftest import outputs


@pytest.fixture
def user(monkeypatch):
    monkeypatch.setenv("USER", "Alice.Smith")
    monkeypatch.setenv("LOGNAME", "Alice.Smith")
    return "alchemist-session-alice-smith"


def test_session_name_is_a_dns_label():
    assert session_name("Alice.Smith") == "alchemist-session-alice-smith"
    assert len(session_name("x" * 100)) <= 63


def test_the_session_pod_has_the_image_volume_environment_and_gpus():
    s = stack("onprem-lab").output
    pod = session_pod(s, "alchemist-session-alice", gpus=2, hours=4)
    c = pod["spec"]["containers"][0]
    assert c["image"] == s.images.interactive
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert pod["spec"]["nodeSelector"] == s.gpu.node_selector
    assert pod["spec"]["activeDeadlineSeconds"] == 4 * 3600
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["ALCHEMIST_SHARED_ROOT"] == "/shared" and env["ALCHEMIST_STACK"] == "onprem-lab"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/shared"}
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == s.shared_fs.pvc
    # JupyterLab only on the pod's loopback: reachable through port-forward alone.
    assert "--ip=127.0.0.1" in c["command"][2]
    # 17.8: a token from a Secret (never a plain value), and no job label: the jobs'
    # NetworkPolicies select app.kubernetes.io/managed-by and alchemist.io/run.
    assert '--IdentityProvider.token="$JUPYTER_TOKEN"' in c["command"][2]
    token = next(e for e in c["env"] if e["name"] == "JUPYTER_TOKEN")
    assert token == {
        "name": "JUPYTER_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "alchemist-job-session-alice-token", "key": "token"}},
    }
    labels = pod["metadata"]["labels"]
    assert "app.kubernetes.io/managed-by" not in labels and "alchemist.io/run" not in labels
    assert labels["kueue.x-k8s.io/queue-name"] == s.queue  # admitted by Kueue like jobs
    assert c["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize(
    "gpus,expected",
    [
        (8, "--gpus 8: more than the 4 GPUs per node of stack aws-us-west-2; accepted: 0..4"),
        (-1, "--gpus -1: accepted: 0..4"),
    ],
)
def test_gpu_over_ask_is_one_line(gpus, expected):
    with pytest.raises(UserError, match=expected.replace(".", r"\.")):
        session_pod(stack("aws-us-west-2").output, "s", gpus=gpus)


def test_start_waits_until_running_and_prints_how_to_reach_it(fake, run_cli, user):
    def on_call(f, method):  # the scheduler starts the pod after a few reads
        key = ("Pod", user)
        if method == "read_namespaced_pod" and key in f.objects:
            reads = sum(1 for m, _ in f.calls if m == "read_namespaced_pod")
            f.objects[key]["status"] = (
                {"phase": "Running"}
                if reads >= 4
                else {
                    "phase": "Pending",
                    "containerStatuses": [
                        {"name": "session", "state": {"waiting": {"reason": "ContainerCreating"}}}
                    ],
                }
            )

    fake.on_call = on_call
    code, out, err = run_cli(
        "interactive", "--stack", "aws-us-west-2", "--outputs", outputs("aws-us-west-2"), "--gpus", "1"
    )
    assert code == 0, err
    assert fake.creates() == [
        ("Secret", f"alchemist-job-{user.removeprefix('alchemist-')}-token"),
        ("Pod", user),
    ]
    token = fake.objects[("Secret", f"alchemist-job-{user.removeprefix('alchemist-')}-token")]["stringData"][
        "token"
    ]
    assert len(token) >= 32
    assert f"http://127.0.0.1:8888/lab?token={token}" in out  # printed once, here
    assert "pending: session: ContainerCreating" in err
    assert f"kubectl -n research port-forward pod/{user} 8888:8888" in out
    assert f"kubectl -n research exec -it {user} -- bash" in out
    assert "aws eks update-kubeconfig --name alchemist-aws-us-west-2" in out
    # Asking again finds the running session and creates nothing.
    fake.calls.clear()
    code, out, err = run_cli("interactive", "--stack", "aws-us-west-2", "--outputs", outputs("aws-us-west-2"))
    assert code == 0 and fake.creates() == [] and "already there" in err
    assert token not in out + err


def test_stop_deletes_the_session(fake, run_cli, user):
    fake.objects[("Pod", user)] = {"metadata": {"name": user, "namespace": "research"}}
    code, out, err = run_cli("interactive", "--stack", "dev", "--outputs", outputs("dev"), "--stop")
    assert code == 0 and f"session {user} on stack dev: stopped" in out
    assert fake.deletes() == [
        ("Secret", f"alchemist-job-{user.removeprefix('alchemist-')}-token"),
        ("Pod", user),
    ]


def test_gpus_on_a_stack_without_gpus_creates_nothing(fake, run_cli, user):
    code, out, err = run_cli("interactive", "--stack", "dev", "--outputs", outputs("dev"), "--gpus", "1")
    assert code == 2 and err.count("\n") == 1 and "which has no GPU nodes" in err
    assert fake.calls == []
