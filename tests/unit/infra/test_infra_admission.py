"""The admission policies refuse what a submitter must not create, and admit the job library's objects.

The policies' real CEL expressions are evaluated with cel-python by tests/k8s_admission.py,
which follows the admission semantics of kubernetes v1.35.0 and cites them. The objects below are shaped like the job library's and checked against the
upstream schemas (Kubernetes via kubernetes-validate, JobSet via its vendored CRD).
"""

from __future__ import annotations

import kubernetes_validate
import pytest

from infra.admission import (
    POD_SPECS,
    QUEUE_LABEL,
    network_policy_binding,
    network_policy_policy,
    policy_binding,
    validating_policy,
)
from infra.labels import JOB_SECRET_PREFIX, RUN_LABEL, TEAM_GID_LABEL, TEAM_LABEL, TEAM_UID_LABEL
from tests.k8s_admission import compiles, judge
from tests.k8s_authz import MASTERS, Actor, Rbac

# The deployer of each kind of stack, as the API server knows it (see tests/system for all).
KIND_ADMIN = Actor("deployer", "kubernetes-admin", (MASTERS,))
EKS_DEPLOYER = Actor("deployer", "arn:aws:sts::123456789012:assumed-role/deployer/botocore-session-1",
                     grants=({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},))  # fmt: skip


def admit(obj: dict, user: str | Actor = "alice", namespace: str = "research", operation: str = "CREATE",
          old: dict | None = None) -> list[str] | None:  # fmt: skip
    """None when no policy judges the request, else the denial messages (empty: admitted)."""
    kind = (obj or old)["kind"]
    policy = network_policy_policy() if kind == "NetworkPolicy" else validating_policy(kind)
    actor = user if isinstance(user, Actor) else Actor("member", user, ("alchemist:research",))
    # the team namespace's labels as infra/team_namespace.py sets them
    labels = {TEAM_LABEL: namespace, TEAM_UID_LABEL: "1000", TEAM_GID_LABEL: "1000"}
    return judge(
        policy,
        None,
        actor=actor,
        operation=operation,
        namespace=namespace,
        obj=obj,
        old=old,
        rbac=Rbac([]),
        namespace_labels=labels,
    )


def pod_spec(**extra) -> dict:
    spec = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
        "containers": [{"name": "worker", "image": "registry/train@sha256:" + "0" * 64,
                        "env": [{"name": "A", "value": "1"}],
                        "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}],
        "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "alchemist-shared"}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }  # fmt: skip
    spec.update(extra)
    return spec


def session_pod(labels=None, **spec) -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "alchemist-session-alice", "namespace": "research",
                        "labels": {QUEUE_LABEL: "research",
                                   **(labels if labels is not None else {"app.kubernetes.io/managed-by": "alchemist"})}},
           "spec": pod_spec(**spec)}  # fmt: skip
    kubernetes_validate.validate(pod, "1.31.0", strict=True)
    return pod


def test_a_session_pod_like_the_job_librarys_is_admitted():
    assert admit(session_pod()) == []


def test_allowed_secrets_and_service_accounts():
    env = [
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": f"{JOB_SECRET_PREFIX}hf", "key": "token"}},
        }
    ]
    spec = {"containers": [{"name": "w", "image": "x", "env": env}], "serviceAccountName": "alchemist-job",
            "volumes": [{"name": "s", "secret": {"secretName": f"{JOB_SECRET_PREFIX}ssh"}}]}  # fmt: skip
    assert admit(session_pod(**spec)) == []
    assert admit(session_pod(serviceAccountName="default")) == []


@pytest.mark.parametrize("user,judged", [
    ("alice", True),
    ("arn:aws:iam::123456789012:role/research", True),
    ("system:serviceaccount:research:ci", True),  # the namespace's own accounts are judged
    ("system:serviceaccount:kube-system:job-controller", False),  # makes a JobSet's pods
    ("system:serviceaccount:jobset-system:jobset-controller-manager", False),
    ("system:kube-controller-manager", False),
])  # fmt: skip
def test_who_is_judged(user, judged):
    bad = session_pod(hostNetwork=True)
    assert (admit(bad, user=user) is not None) == judged


@pytest.mark.parametrize("kind", list(POD_SPECS))
def test_policies_and_bindings_are_valid_kubernetes_objects(kind):
    for obj in (validating_policy(kind), policy_binding(kind)):
        kubernetes_validate.validate(obj, "1.30.0", strict=True)
    binding = policy_binding(kind)["spec"]
    assert binding["validationActions"] == ["Deny"]
    assert binding["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": TEAM_LABEL, "operator": "Exists"}
    ]
    assert validating_policy(kind)["spec"]["failurePolicy"] == "Fail"


def test_every_expression_compiles():
    for kind in POD_SPECS:
        spec = validating_policy(kind)["spec"]
        for expr in [c["expression"] for c in spec["matchConditions"]] + [v["expression"] for v in spec["variables"]] + [
                v["expression"] for v in spec["validations"]]:  # fmt: skip
            compiles(expr)


# --- NetworkPolicies --------------------------------------------------------------------------


def netpol(name: str, selects: dict, ingress=None, egress=None) -> dict:
    obj = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": name, "namespace": "research"},
           "spec": {"podSelector": {"matchLabels": selects}, "policyTypes": ["Ingress", "Egress"]}}  # fmt: skip
    if ingress is not None:
        obj["spec"]["ingress"] = ingress
    if egress is not None:
        obj["spec"]["egress"] = egress
    kubernetes_validate.validate(obj, "1.31.0", strict=True)
    return obj


def _same(run):
    return [{"podSelector": {"matchLabels": {RUN_LABEL: run}}}]


def test_a_runs_own_network_policy_is_admitted_and_may_be_deleted():
    own = netpol(
        "run-a",
        {RUN_LABEL: "a"},
        ingress=[{"from": _same("a")}],
        egress=[{"to": _same("a"), "ports": [{"protocol": "TCP", "port": 29500}]}],
    )
    assert admit(own) == []
    assert admit(None, operation="DELETE", old=own) == []


@pytest.mark.parametrize("ingress,egress", [
    ([{"from": _same("attacker")}], None),  # let another run's pods in
    ([{"ports": [{"protocol": "TCP", "port": 29500}]}], None),  # no `from`: everyone
    ([{"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {RUN_LABEL: "a"}}}]}], None),
    (None, [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]),
])  # fmt: skip
def test_a_network_policy_wider_than_its_run_is_refused(ingress, egress):
    assert admit(netpol("run-a", {RUN_LABEL: "a"}, ingress, egress)) == [
        "a run's NetworkPolicy admits only pods of the same run (podSelector on its run label)"
    ]


def test_the_platforms_network_policies_cannot_be_deleted_or_replaced():
    deny = netpol("default-deny", {})
    assert admit(None, operation="DELETE", old=deny) == [
        f"a submitter's NetworkPolicy selects one run (podSelector.matchLabels {RUN_LABEL})"
    ]
    wide = netpol("allow-all", {"app.kubernetes.io/managed-by": "alchemist"}, ingress=[{}])
    assert "a submitter's NetworkPolicy selects one run (podSelector.matchLabels alchemist.io/run)" in admit(
        wide
    )


@pytest.mark.parametrize(
    "deployer",
    [KIND_ADMIN, EKS_DEPLOYER, Actor("deployer", "system:admin", (MASTERS,))],
    ids=["kind", "eks", "k3s"],
)
def test_the_deployer_manages_the_platforms_network_policies(deployer):
    """`pulumi up` adding a team, changing the policies, `pulumi destroy`: the deployer may."""
    deny = netpol("default-deny", {})
    opened = netpol("default-deny", {}, ingress=[{}])
    rbac = Rbac([])
    for op, obj, old in (("CREATE", deny, None), ("UPDATE", opened, deny), ("DELETE", None, deny)):
        assert not judge(network_policy_policy(), None, actor=deployer, operation=op, namespace="research",
                         obj=obj, old=old, rbac=rbac), (deployer.username, op)  # fmt: skip


def test_a_member_who_may_not_change_the_policy_is_still_judged():
    """Only who may rewrite the admission policy itself is exempt: RBAC decides, not a name."""
    deny = netpol("default-deny", {})
    member = Actor("member", "kubernetes-admin-wannabe", ("alchemist:research",))
    assert admit(None, user=member, operation="DELETE", old=deny)


def test_the_network_policy_policy_is_valid_kubernetes():
    for obj in (network_policy_policy(), network_policy_binding()):
        kubernetes_validate.validate(obj, "1.30.0", strict=True)


def test_the_connections_policy_is_valid_and_compiles():
    """The CONNECT policy on pods/exec and pods/portforward (judged in tests/system/test_sessions.py)."""
    from infra.admission import connect_binding, connect_policy

    for obj in (connect_policy(), connect_binding()):
        kubernetes_validate.validate(obj, "1.30.0", strict=True)
    spec = connect_policy()["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["operations"] == ["CONNECT"]
    for expr in [c["expression"] for c in spec["matchConditions"]] + [
        v["expression"] for v in spec["validations"]
    ]:
        compiles(expr)
