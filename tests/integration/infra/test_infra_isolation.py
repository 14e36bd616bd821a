"""Who can reach a job pod and what a submitter may do, decided by the rendered NetworkPolicies and Roles.

The NetworkPolicy semantics are Kubernetes' (networking.k8s.io/v1, kubernetes v1.31
pkg/apis/networking/types.go and the API reference): a pod is isolated in a direction once
any policy of its namespace selects it with that policy type; a connection is allowed only
when the source's egress and the destination's ingress each have a rule that admits it;
within a rule, peers are ORed; a peer with both namespaceSelector and podSelector means pods
matching both; no `from`/`to` matches everyone; no `ports` matches every port; `endPort`
extends `port` to a range. RBAC follows pkg/apis/rbac/v1/evaluation_helpers.go (RuleAllows):
verb, group and resource (`pods/exec` is its own resource) must match; resourceNames, when
given, must contain the object's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from infra_helpers import resources

from alchemist_jobs.contract import METRICS_BASE_PORT
from alchemist_jobs.kubernetes.manifests import PS_BASE_PORT, RDZV_PORT
from tests.k8s_admission import selects  # a LabelSelector, as apimachinery reads it

REPO = Path(__file__).resolve().parents[3]
RDZV = RDZV_PORT  # torchrun's c10d store on pod 0
PS = PS_BASE_PORT  # parameter-server shard 0
EPHEMERAL = 41234  # a port NCCL's or gloo's listener gets from the kernel (ip_local_port_range)
METRICS = METRICS_BASE_PORT


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict = field(default_factory=dict)


def _peer_matches(peer: dict, policy_ns: str, pod: Pod) -> bool:
    ns_labels = {"kubernetes.io/metadata.name": pod.namespace}
    if "namespaceSelector" in peer:
        return selects(peer["namespaceSelector"], ns_labels) and selects(peer.get("podSelector"), pod.labels)
    if "podSelector" in peer:
        return pod.namespace == policy_ns and selects(peer["podSelector"], pod.labels)
    return False  # ipBlock: not pod traffic here


def _port_matches(ports: list | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") == protocol and (
            "port" not in p or p["port"] == port or (p.get("endPort") and p["port"] <= port <= p["endPort"])
        ):
            return True
    return False


def _allowed(policies: list[dict], pod: Pod, peer: Pod, port: int, protocol: str, direction: str) -> bool:
    kind, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and selects(p["spec"]["podSelector"], pod.labels)
        and direction in p["spec"]["policyTypes"]
    ]
    if not selecting:
        return True  # not isolated in this direction
    for p in selecting:
        for rule in p["spec"].get(kind) or []:
            peers = rule.get(peers_key)
            if (not peers or any(_peer_matches(x, p["metadata"]["namespace"], peer) for x in peers)) and \
                    _port_matches(rule.get("ports"), port, protocol):  # fmt: skip
                return True
    return False


def connects(policies: list[dict], src: Pod, dst: Pod, port: int, protocol: str = "TCP") -> bool:
    return _allowed(policies, src, dst, port, protocol, "Egress") and _allowed(
        policies, dst, src, port, protocol, "Ingress"
    )


@pytest.fixture(scope="module")
def dev_output(renders):
    """The dev stack's `alchemist` output, as the job library parses it."""
    from alchemist_jobs.contract import StackOutput

    return StackOutput.parse(renders["dev"]["outputs"]["alchemist"], "stack dev")


@pytest.fixture(scope="module")
def run(dev_output):
    """run(run id) -> (its per-run NetworkPolicy, one of its pods): the job library's real
    objects for the digits example on the dev stack, never a copy of their shape."""
    from alchemist_jobs.kubernetes import manifests as mf
    from alchemist_jobs.spec import load_spec

    spec = load_spec(REPO / "examples" / "digits.yaml", ["nodes=2"])

    def make(run_id: str) -> tuple[dict, Pod]:
        objs = mf.build(spec, dev_output, run_id)
        policy = next(o for o in objs if o["kind"] == "NetworkPolicy")
        jobset = next(o for o in objs if o["kind"] == "JobSet")
        template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        return policy, Pod(jobset["metadata"]["namespace"], template["metadata"]["labels"])

    return make


@pytest.fixture(scope="module")
def policies(renders):
    return [x["inputs"] for x in resources(renders["dev"], "kubernetes:networking.k8s.io/v1:NetworkPolicy")
            if x["inputs"]["metadata"]["namespace"] == "research"]  # fmt: skip


PROMETHEUS = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})
DNS = Pod("kube-system", {"k8s-app": "kube-dns"})


def session_pod(dev_output) -> Pod:
    from alchemist_jobs.kubernetes.interactive import session_name, session_pod

    pod = session_pod(dev_output, session_name("alice"))
    return Pod(pod["metadata"]["namespace"], pod["metadata"]["labels"])


def test_another_runs_pod_cannot_reach_a_runs_store(policies, run, dev_output):
    """The platform alone admits no job-to-job traffic: a run's store is not open to the namespace."""
    (policy_a, pod_a), (policy_b, pod_b) = run("run-a"), run("run-b")
    assert not connects(policies, pod_b, pod_a, RDZV)
    with_runs = [*policies, policy_a, policy_b]
    assert not connects(with_runs, pod_b, pod_a, RDZV)
    assert not connects(with_runs, pod_a, pod_b, EPHEMERAL)
    assert not connects(with_runs, session_pod(dev_output), pod_a, RDZV)


def test_a_runs_pods_reach_each_other_through_the_runs_policy(policies, run):
    """Both ways and on every port: rendezvous, and the ephemeral ports NCCL and gloo use."""
    policy, pod = run("run-a")
    with_run = [*policies, policy]
    for port in (RDZV, PS, EPHEMERAL):
        assert connects(with_run, pod, pod, port), port
    assert not connects(policies, pod, pod, RDZV)


def test_prometheus_scrapes_metrics_ports_only(policies, run):
    policy, pod = run("run-a")
    with_run = [*policies, policy]
    assert connects(with_run, PROMETHEUS, pod, METRICS)
    assert connects(with_run, PROMETHEUS, pod, METRICS + 15)
    assert not connects(with_run, PROMETHEUS, pod, RDZV)
    assert not connects(with_run, Pod("applied", pod.labels), pod, METRICS)  # another team's pod


def test_job_pods_resolve_names(policies, run):
    policy, pod = run("run-a")
    with_run = [*policies, policy]
    assert connects(with_run, pod, DNS, 53, "UDP")
    assert not connects(with_run, pod, Pod("kube-system", {"k8s-app": "metrics-server"}), 53, "UDP")


# --- RBAC ------------------------------------------------------------------------------------


def rule_allows(rules: list[dict], group: str, resource: str, verb: str, name: str | None = None) -> bool:
    for r in rules:
        if ((verb in r["verbs"] or "*" in r["verbs"]) and (group in r["apiGroups"] or "*" in r["apiGroups"])
                and (resource in r["resources"] or "*" in r["resources"])
                and (not r.get("resourceNames") or name in r["resourceNames"])):  # fmt: skip
            return True
    return False


@pytest.fixture(scope="module")
def roles(renders):
    return {x["inputs"]["metadata"]["name"]: x["inputs"]["rules"]
            for x in resources(renders["dev"], "kubernetes:rbac.authorization.k8s.io/v1:Role")
            if x["inputs"]["metadata"]["namespace"] == "research"}  # fmt: skip


def test_the_submitter_role_grants_what_the_jobs_half_calls(roles):
    sub = roles["alchemist-job-submitter"]
    for verb in ("create", "get", "list", "watch", "delete"):
        assert rule_allows(sub, "jobset.x-k8s.io", "jobsets", verb)
    assert not rule_allows(sub, "jobset.x-k8s.io", "jobsets", "patch")  # unsuspending is Kueue's
    for verb in ("get", "list", "watch"):
        assert rule_allows(sub, "kueue.x-k8s.io", "workloads", verb)
        assert rule_allows(sub, "", "pods/log", verb)
    for verb in ("list", "watch"):
        assert rule_allows(sub, "", "events", verb)
    for verb in ("create", "get", "delete"):
        assert rule_allows(sub, "networking.k8s.io", "networkpolicies", verb)


def _connect_allowed(sub: str, pod: str) -> bool:
    """The CONNECT policy's validation (infra/admission.py) for a member's request."""
    import celpy

    from infra.admission import connect_policy

    expr = connect_policy()["spec"]["validations"][0]["expression"]
    env = celpy.Environment()
    request = celpy.json_to_cel({"name": pod, "subResource": sub})
    return bool(env.program(env.compile(expr)).evaluate({"request": request}))


def test_the_submitter_role_denies_secrets_exec_and_port_forward(roles):
    sub = roles["alchemist-job-submitter"]
    for verb in ("get", "list", "watch", "update", "patch"):  # never read or rewrite one
        assert not rule_allows(sub, "", "secrets", verb, "grafana-admin")
    # An interactive session creates (and deletes) its own token Secret; the admission
    # policy lets pods read only alchemist-job-* Secrets, so creating one reveals nothing.
    assert rule_allows(sub, "", "secrets", "create", "alchemist-job-session-alice-token")
    # kubectl exec and port-forward reach interactive sessions: RBAC names no prefix, so the
    # Role grants them on every pod and the CONNECT admission policy keeps members to their
    # sessions and TensorBoard (judged per stack and actor in tests/system/test_sessions.py).
    for verb in ("pods/exec", "pods/portforward"):
        assert rule_allows(sub, "", verb, "create", "alchemist-session-alice")
    assert not _connect_allowed("exec", "train-abc-workers-0-0")
    assert not _connect_allowed("portforward", "train-abc-workers-0-0")
    assert _connect_allowed("exec", "alchemist-session-alice")
    assert _connect_allowed("portforward", "tensorboard-0")
    assert not rule_allows(sub, "", "serviceaccounts/token", "create", "alchemist-job")
    # A run's policy is patched once (its JobSet becomes the owner), so RBAC allows patch;
    # the admission policy is what keeps the platform's own policies out of reach.
    from test_infra_admission import admit

    deny_all = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "default-deny", "namespace": "research"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }
    opened = {**deny_all, "spec": {"podSelector": {}, "ingress": [{}], "policyTypes": ["Ingress"]}}
    assert admit(opened, operation="UPDATE", old=deny_all)  # refused, with a reason
    assert admit(deny_all, operation="DELETE", old=deny_all)


def test_exec_and_port_forward_are_an_opt_in_role_bound_to_no_one(roles, renders):
    debug = roles["alchemist-debug"]
    assert rule_allows(debug, "", "pods/exec", "create", "any-pod")
    assert rule_allows(debug, "", "pods/portforward", "create", "any-pod")
    bound = {
        x["inputs"]["roleRef"]["name"]
        for x in resources(renders["dev"], "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
    }
    assert bound == {"alchemist-job-submitter"}
