"""Live tier, the platform of issue 36 on a real cluster, one small check per item, with the
`kubernetes` client (and the real CLI where a user's command is the thing checked):

1. Kueue's controller Deployment is Available and its webhook configurations carry a CA bundle;
2. a second team's job is admitted in its own namespace (`--team`);
3. the GPU nodes match the stack's GPU node selector (skipped without GPU nodes);
4. the team's folder on the shared file system is mode 2770 (770 on EFS, an access point);
5. the submitter may `kubectl port-forward` to (and exec into) a session pod;
6. Prometheus has an `up` series for Kueue's metrics.

Runs only when ALCHEMIST_TEST_KUBECONFIG names a kubeconfig with cluster-admin rights; the
stack's facts come from ALCHEMIST_TEST_OUTPUTS (a stack's `alchemist` output as JSON) or the
`dev` fixture, as in test_live_cluster.py. ALCHEMIST_TEST_GROUP names the submitters' group
when a team's is not `alchemist:<team>` (stack config `teams[].groups`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alchemist_jobs.contract import StackOutput

REPO = Path(__file__).resolve().parents[2]
KUBECONFIG = os.environ.get("ALCHEMIST_TEST_KUBECONFIG")
pytestmark = [pytest.mark.live,
              pytest.mark.skipif(not KUBECONFIG, reason="set ALCHEMIST_TEST_KUBECONFIG to a "
                                                        "cluster's kubeconfig to run")]
TIMEOUT = float(os.environ.get("ALCHEMIST_TEST_TIMEOUT_S", "1200"))
KUEUE_NAMESPACE, KUEUE_RELEASE = "kueue-system", "kueue"  # infra/labels.py


def _wait(check, timeout: float, every: float = 5.0):
    """check()'s first truthy value within `timeout` seconds, else its last."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> tuple[StackOutput, Path]:
    """(the stack's output, a copy of it for the CLI) with the test's kubeconfig for every team."""
    source = Path(os.environ.get("ALCHEMIST_TEST_OUTPUTS")
                  or REPO / "tests/fixtures/stack_outputs/dev.json")
    data = json.loads(source.read_text())
    data = data.get("alchemist", data)
    data["kubeconfig"] = Path(KUBECONFIG).read_text()
    data.pop("eks", None)
    data.pop("auth", None)
    for team in data.get("teams") or []:
        team.pop("kubeconfig", None)
    path = tmp_path_factory.mktemp("live") / "outputs.json"
    path.touch(mode=0o600)
    path.write_text(json.dumps(data))
    return StackOutput.parse(data, str(source)), path


@pytest.fixture(scope="module")
def api():
    from kubernetes import config  # the job library's own dependency

    return config.new_client_from_config(config_file=KUBECONFIG)


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "alchemist_jobs", *args], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                          text=True, timeout=timeout)


def test_kueue_runs_and_its_webhooks_have_a_ca_bundle(api):
    """Item 1: under the release `kueue` the manager finds its certificate Secret, serves, and
    patches the CA into the webhook configurations its code names."""
    from kubernetes import client

    def available():
        dep = client.AppsV1Api(api).read_namespaced_deployment(f"{KUEUE_RELEASE}-controller-manager",
                                                               KUEUE_NAMESPACE)
        return any(c.type == "Available" and c.status == "True" for c in dep.status.conditions or [])
    assert _wait(available, 300), "kueue-controller-manager is not Available"
    reg = client.AdmissionregistrationV1Api(api)
    configs = [reg.read_validating_webhook_configuration("kueue-validating-webhook-configuration"),
               reg.read_mutating_webhook_configuration("kueue-mutating-webhook-configuration")]
    for cfg in configs:
        assert cfg.webhooks, cfg.metadata.name
        empty = [w.name for w in cfg.webhooks if not w.client_config.ca_bundle]
        assert not empty, f"{cfg.metadata.name}: no caBundle on {empty}"


def test_a_second_teams_job_is_admitted_in_its_namespace(api, outputs):
    """Item 2: `submit --team <second team>` lands in that team's namespace and Kueue admits it
    through that team's LocalQueue."""
    from kubernetes import client

    out, path = outputs
    others = [t for t in out.teams if t.name != out.team]
    if not others:
        pytest.skip(f"stack {out.stack} has one team")
    team = others[0]
    stack = ["--stack", out.stack, "--outputs", str(path), "--team", team.name]
    image = os.environ.get("ALCHEMIST_TEST_IMAGE")
    res = _cli("submit", "examples/digits.yaml", *stack, *(["--set", f"image={image}"] if image else []))
    assert res.returncode == 0, res.stderr
    run_id = res.stderr.split("submitted ")[1].split()[0]
    try:
        custom = client.CustomObjectsApi(api)

        def admitted():
            wls = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", team.namespace,
                                                       "workloads")["items"]
            mine = [w for w in wls if any(run_id in (o.get("name") or "")
                                          for o in w["metadata"].get("ownerReferences") or [])]
            return [w for w in mine if any(c["type"] == "Admitted" and c["status"] == "True"
                                           for c in (w.get("status") or {}).get("conditions") or [])]
        (workload,) = _wait(admitted, 300) or [None]
        assert workload is not None, f"run {run_id}: no admitted Workload in {team.namespace}"
        assert workload["spec"]["queueName"] == team.queue
    finally:
        _cli("cancel", run_id, *stack)


def test_gpu_nodes_match_the_stacks_gpu_node_selector(api, outputs):
    """Item 3: GPU pods select `gpu.node_selector`; every node with GPUs carries it (on an
    `existing` cluster, the GPU Operator's label or existing.gpuNodeSelector)."""
    from kubernetes import client

    out, _ = outputs
    nodes = client.CoreV1Api(api).list_node().items
    gpu = [n for n in nodes if int((n.status.allocatable or {}).get(out.gpu.resource, "0")) > 0]
    if not gpu:
        pytest.skip("the cluster has no node with GPUs")
    assert out.gpu.node_selector, f"stack {out.stack} has GPU nodes and no GPU node selector"
    unmatched = [n.metadata.name for n in gpu
                 if any((n.metadata.labels or {}).get(k) != v for k, v in out.gpu.node_selector.items())]
    assert not unmatched, f"GPU nodes without {dict(out.gpu.node_selector)}: {unmatched}"


def test_the_team_folder_is_setgid_and_the_teams_own(api, outputs):
    """Item 4: the PVC root, seen from a pod run as the team's identity, is the team's, mode 2770
    (the prepare Job's; an EFS access point's is 770)."""
    from kubernetes import client

    out, _ = outputs
    core = client.CoreV1Api(api)
    fs, name = out.shared_fs, f"alchemist-live-stat-{os.getpid()}"
    container_sc = {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": out.namespace},
           "spec": {"restartPolicy": "Never", "serviceAccountName": "alchemist-job",
                    "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": fs.uid, "runAsGroup": fs.gid,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "stat", "image": os.environ.get("ALCHEMIST_TEST_IMAGE") or out.images.train,
                                    "command": ["stat", "-c", "%a %u:%g", fs.mount_path],
                                    "securityContext": container_sc,
                                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                                  "limits": {"memory": "128Mi"}},
                                    "volumeMounts": [{"name": "shared", "mountPath": fs.mount_path}]}],
                    "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": fs.pvc}}],
                    **({"imagePullSecrets": [{"name": out.images.pull_secret}]} if out.images.pull_secret else {})}}
    core.create_namespaced_pod(out.namespace, pod)
    try:
        phase = _wait(lambda: core.read_namespaced_pod(name, out.namespace).status.phase
                      in ("Succeeded", "Failed"), 600)
        log = core.read_namespaced_pod_log(name, out.namespace)
        assert phase, f"pod {name} did not finish: {log}"
        mode = "770" if fs.kind == "efs" else "2770"
        assert log.split() == [mode, f"{fs.uid}:{fs.gid}"], log
    finally:
        core.delete_namespaced_pod(name, out.namespace)


@pytest.mark.parametrize("verb", ["create", "get"])  # SPDY, and kubectl's WebSockets
@pytest.mark.parametrize("subresource", ["portforward", "exec"])
def test_the_submitter_may_reach_a_session_pod(api, outputs, verb, subresource):
    """Item 5: `kubectl auth can-i <verb> pods/<subresource>` for a member of the team on the pod
    `alchemist interactive` creates (RBAC; the CONNECT admission policy is judged at connect)."""
    from kubernetes import client

    from alchemist_jobs.kubernetes.interactive import session_name

    out, _ = outputs
    group = os.environ.get("ALCHEMIST_TEST_GROUP") or f"alchemist:{out.team or out.namespace}"
    review = client.AuthorizationV1Api(api).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "alchemist-live-test", "groups": [group, "system:authenticated"],
                 "resourceAttributes": {"namespace": out.namespace, "verb": verb, "resource": "pods",
                                        "subresource": subresource, "name": session_name("ana")}}})
    assert review.status.allowed, f"{group}: {verb} pods/{subresource}: {review.status.reason}"


def test_prometheus_scrapes_kueue(api):
    """Item 6: the ServiceMonitor `alchemist-kueue` gives Prometheus a target whose `up` is 1
    (the manager's TokenReview and SubjectAccessReview accepted Prometheus's token)."""
    from kubernetes import client

    services = client.CoreV1Api(api).list_namespaced_service(
        "monitoring", label_selector="app=kube-prometheus-stack-prometheus").items
    assert services, "no Prometheus Service in monitoring"
    svc = services[0]
    port = next(p.port for p in svc.spec.ports if p.name == "http-web")
    query = 'up{job=~".*kueue.*"}'

    def series():
        resp = api.call_api(f"/api/v1/namespaces/monitoring/services/{svc.metadata.name}:{port}/proxy/api/v1/query",
                            "GET", query_params=[("query", query)], auth_settings=["BearerToken"],
                            _preload_content=False, _return_http_data_only=True)
        return json.loads(resp.data)["data"]["result"]
    result = _wait(lambda: [r for r in series() if r["value"][1] == "1"], 300, every=15)
    assert result, f"no {query} series at 1: {series()}"
