"""Across the contract, end to end: each shipped stack's rendered `alchemist` output (the
real Pulumi program under Pulumi's mocks) is read by the job library's contract, and the
Kubernetes backend turns every example spec into manifests that are valid for that stack's
Kubernetes version and that the same stack's PodMonitor and NetworkPolicy select."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
from infra_helpers import SHIPPED, resources, stack_config

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))
RUN = "contract-20260101-000000-0001"


@pytest.mark.parametrize("name", SHIPPED)
def test_rendered_stack_output_drives_valid_job_manifests(renders, name):
    r = renders[name]
    out = StackOutput.parse(r["outputs"]["alchemist"], f"stack {name}")
    version = stack_config(name)["alchemist:kubernetesVersion"]
    podmon = next(x["inputs"] for x in resources(r) if x["type"].endswith(":PodMonitor"))
    netpol = next(
        x["inputs"]
        for x in resources(r)
        if x["type"].endswith(":NetworkPolicy")
        and x["inputs"]["metadata"]["namespace"] == out.namespace
        and x["inputs"]["spec"]["podSelector"].get("matchLabels")
    )
    assert EXAMPLES
    for spec_path in EXAMPLES:
        spec = load_spec(spec_path)
        objs = KubernetesScheduler(out).dryrun(spec, spec_path.parent, run_id=RUN).manifests
        jobset = next(o for o in objs if o["kind"] == "JobSet")
        for obj in objs:
            if obj is not jobset:  # the JobSet's schema is the CRD's (tests/unit/k8s)
                kubernetes_validate.validate(obj, f"{version}.0", strict=True)
        assert jobset["metadata"]["namespace"] == out.namespace
        job = jobset["spec"]["replicatedJobs"][0]["template"]
        kubernetes_validate.validate(
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, **job},
            f"{version}.0",
            strict=True,
        )
        pod = job["spec"]["template"]
        labels = pod["metadata"]["labels"]
        # The platform's PodMonitor selects these pods, in this namespace, on their ports.
        assert podmon["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert out.namespace in podmon["spec"]["namespaceSelector"]["matchNames"]
        ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        scraped = {e["port"] for e in podmon["spec"]["podMetricsEndpoints"]}
        metric_ports = {p for p in ports if p.startswith("metrics")}
        assert metric_ports and metric_ports <= scraped
        # ...and the default-deny NetworkPolicy covers them.
        assert netpol["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        # The shared PVC the stack exports is the one the pods mount, at its mount path.
        vols = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert vols["shared"]["persistentVolumeClaim"]["claimName"] == out.shared_fs.pvc
        mounts = {
            m["name"]: m["mountPath"] for c in pod["spec"]["containers"] for m in c.get("volumeMounts", [])
        }
        assert mounts["shared"] == out.shared_fs.mount_path
        assert (
            labels.get("kueue.x-k8s.io/queue-name") == out.queue
            or jobset["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == out.queue
        )


# kubernetes-client method -> (API group, resource, verb) as RBAC names them.
_VERBS = {
    "create": "create",
    "delete": "delete",
    "patch": "patch",
    "list": "list",
    "read": "get",
    "connect_get": "get",
}
_RESOURCES = {
    "job": ("batch", "jobs"),
    "pod": ("", "pods"),
    "service": ("", "services"),
    "config_map": ("", "configmaps"),
    "pod_log": ("", "pods/log"),
    "pod_proxy_with_path": ("", "pods/proxy"),
    "secret": ("", "secrets"),
    "network_policy": ("networking.k8s.io", "networkpolicies"),
    # custom objects: the JobSet; the Kueue Workloads are only listed
    "custom_object": ("jobset.x-k8s.io", "jobsets"),
}


def test_the_submitter_role_allows_every_call_the_kubernetes_backend_makes(renders):
    """Scan the backend for the API methods it calls and check each against the Role that
    infra grants team members, so a new call cannot ship without its permission."""
    import re

    src = "\n".join(
        p.read_text()
        for p in (Path(__file__).resolve().parents[3] / "alchemist_jobs" / "kubernetes").glob("*.py")
    )
    calls = set(re.findall(r'"(?:core|batch|networking|custom)", "([a-z_]+)"', src))
    assert len(calls) >= 10, calls
    role = next(
        x["inputs"]
        for x in resources(renders[SHIPPED[0]])
        if x["type"] == "kubernetes:rbac.authorization.k8s.io/v1:Role"
        and x["inputs"]["metadata"]["name"] == "alchemist-job-submitter"
    )
    allowed = {
        (g, res, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for res in rule["resources"]
        for v in rule["verbs"]
    }
    for call in sorted(calls):
        m = re.fullmatch(r"(connect_get|create|delete|patch|list|read)_namespaced_(.+)", call)
        assert m, f"unmapped API method {call}"
        group, res = _RESOURCES[m[2]]
        assert (group, res, _VERBS[m[1]]) in allowed, f"{call} needs {_VERBS[m[1]]} on {res}"
    # Interactive sessions are reached with kubectl port-forward and exec: the submitter role
    # grants them on every pod (RBAC names no prefix) only beside the CONNECT admission policy
    # that keeps a member to sessions (tests/system/test_sessions.py judges it); the opt-in
    # role `alchemist-debug` (bound per person by an admin) reaches any pod.
    from infra.admission import CONNECT_POLICY_NAME

    assert ("", "pods/exec", "create") in allowed
    admission = {
        (x["type"].rsplit(":", 1)[-1], x["inputs"]["metadata"]["name"])
        for x in resources(renders[SHIPPED[0]])
        if x["type"].startswith("kubernetes:admissionregistration")
    }
    assert {
        ("ValidatingAdmissionPolicy", CONNECT_POLICY_NAME),
        ("ValidatingAdmissionPolicyBinding", CONNECT_POLICY_NAME),
    } <= admission, admission
    debug = next(
        x["inputs"]
        for x in resources(renders[SHIPPED[0]])
        if x["type"] == "kubernetes:rbac.authorization.k8s.io/v1:Role"
        and x["inputs"]["metadata"]["name"] == "alchemist-debug"
    )
    granted = {
        (g, res, v)
        for rule in debug["rules"]
        for g in rule["apiGroups"]
        for res in rule["resources"]
        for v in rule["verbs"]
    }
    assert ("", "pods/portforward", "create") in granted and ("", "pods/exec", "create") in granted
