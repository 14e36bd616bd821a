"""What a submitter may create in a team namespace: ValidatingAdmissionPolicies over pods, Jobs, JobSets, NetworkPolicies.

RBAC lets a submitter create pods and JobSets; these policies constrain what those may be,
so `create` does not also grant every Secret, ServiceAccount and network peer of the
namespace. Semantics (kubernetes/kubernetes v1.30, staging/src/k8s.io/apiserver/pkg/admission/
plugin/policy/validating): a binding selects namespaces; `matchConditions` pick the requests a
policy judges (all must be true); every validation expression must be true or the request is
refused with the validation's message. Pods created by the cluster's own controllers (the Job
and JobSet controllers making a JobSet's pods) are not judged: their templates were judged when
the submitter created the JobSet. Nor is whoever may rewrite the policy itself (the stack's
deployer, whatever its name: `kubernetes-admin`, an IAM ARN, `system:admin`): the API server's
own authorizer says who that is, so `pulumi up` and `pulumi destroy` manage the platform's
objects while a team member, who holds no such right, is judged.
"""

from __future__ import annotations

from typing import Any

from infra.cluster_facts import GPU_TOLERATIONS
from infra.labels import (
    JOB_SECRET_PREFIX,
    JOB_SERVICE_ACCOUNT,
    RUN_LABEL,
    SESSION_PREFIX,
    TEAM_GID_LABEL,
    TEAM_LABEL,
    TEAM_UID_LABEL,
    TENSORBOARD_POD,
)

API = "admissionregistration.k8s.io/v1"

# Pod specs of the object under review, per kind.
POD_SPECS = {
    "Pod": ("", ["v1"], "pods", "[object.spec]"),
    "Job": ("batch", ["v1"], "jobs", "[object.spec.template.spec]"),
    "JobSet": ("jobset.x-k8s.io", ["v1alpha2"], "jobsets",
               "object.spec.replicatedJobs.map(r, r.template.spec.template.spec)"),
}  # fmt: skip
# Pod template labels, per kind (a Pod's own labels).
POD_LABELS = {
    "Pod": "[has(object.metadata.labels) ? object.metadata.labels : {}]",
    "Job": "[has(object.spec.template.metadata) && has(object.spec.template.metadata.labels) ? "
           "object.spec.template.metadata.labels : {}]",
    "JobSet": "object.spec.replicatedJobs.map(r, has(r.template.spec.template.metadata) && "
              "has(r.template.spec.template.metadata.labels) ? r.template.spec.template.metadata.labels : {})",
}  # fmt: skip

# Requests judged: anyone but the cluster's own components, except the namespace's own
# ServiceAccounts (which a submitter could otherwise borrow through a pod).
NOT_A_CONTROLLER = (
    "!request.userInfo.username.startsWith('system:') || "
    "request.userInfo.username.startsWith('system:serviceaccount:' + request.namespace + ':')"
)

_CONTAINERS = ("(has(s.containers) ? s.containers : []) + (has(s.initContainers) ? s.initContainers : []) + "
               "(has(s.ephemeralContainers) ? s.ephemeralContainers : [])")  # fmt: skip
_OK_SECRET = f"n.startsWith('{JOB_SECRET_PREFIX}')"

# Volume sources a member's pod may use: the team's claims (members create none: RBAC grants
# PVCs read-only, so every claim of the namespace is the platform's, on the team's subtree),
# the pod's own ConfigMaps, Secrets (bounded below), scratch and API projections. No nfs,
# hostPath, csi or ephemeral volume: each would reach storage outside the team's subtree (an
# NFS root, a node's disk, a driver's volume). The API server has already refused a volume
# with two sources (kubernetes v1.35.0 pkg/apis/core/validation/validation.go
# validateVolumeSource, "may not specify more than 1 volume type"; registry/generic/registry/
# store.go Create runs BeforeCreate's validation before validating admission), so requiring one
# of these sources excludes every other.
VOLUME_SOURCES = ("persistentVolumeClaim", "configMap", "secret", "emptyDir", "projected", "downwardAPI")
# Taints a member's pod may tolerate: the GPU nodes' (the stack output's `gpu.tolerations`,
# which Kueue's GPU flavor also adds) and those the API server's DefaultTolerationSeconds plugin
# adds to every pod before validating admission runs (kubernetes v1.35.0 plugin/pkg/admission/
# defaulttolerationseconds: node.kubernetes.io/not-ready and unreachable, NoExecute). A
# toleration without a key (`operator: Exists` tolerates every taint) is refused.
TOLERATED_TAINTS = tuple(
    dict.fromkeys(
        [
            *(t["key"] for t in GPU_TOLERATIONS),
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ]
    )
)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue's; a team's LocalQueue is named after the team
_NS_LABELS = "namespaceObject.metadata.labels"
TEAM_VARIABLES = [
    # The team's identity and queue, from its namespace's labels (infra/team_namespace.py); a
    # namespace without them gives -1 / '', which no pod can match: refused, not admitted.
    # `namespaceObject.metadata.labels` is a map(string, string) (kubernetes v1.35.0
    # staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/compile.go BuildNamespaceType).
    {"name": "uid", "expression": f"'{TEAM_UID_LABEL}' in {_NS_LABELS} ? int({_NS_LABELS}['{TEAM_UID_LABEL}']) : -1"},
    {"name": "gid", "expression": f"'{TEAM_GID_LABEL}' in {_NS_LABELS} ? int({_NS_LABELS}['{TEAM_GID_LABEL}']) : -1"},
    {"name": "queue", "expression": f"'{TEAM_LABEL}' in {_NS_LABELS} ? {_NS_LABELS}['{TEAM_LABEL}'] : ''"},
]  # fmt: skip
_POD_SC = "s.securityContext"
_IDENTITY_MESSAGE = (
    f"variables.uid < 0 || variables.gid < 0 ? 'namespace ' + request.namespace + ' names no team identity "
    f"(labels {TEAM_UID_LABEL}, {TEAM_GID_LABEL}): no pod is admitted in it' : "
    "'spec.securityContext must set runAsUser ' + string(variables.uid) + ', runAsGroup ' + "
    "string(variables.gid) + ' and runAsNonRoot: true, with fsGroup and supplementalGroups only ' + "
    "string(variables.gid) + ' (the team\\'s identity, namespace labels "
    + TEAM_UID_LABEL
    + "/"
    + TEAM_GID_LABEL
    + ")'"
)

VALIDATIONS: list[tuple[str, str]] = [
    (f"variables.podSpecs.all(s, !has(s.serviceAccountName) || s.serviceAccountName in ['', 'default', '{JOB_SERVICE_ACCOUNT}'])",
     f"pods run as the ServiceAccount {JOB_SERVICE_ACCOUNT} (or default), no other"),
    ("variables.podSpecs.all(s, !(has(s.hostNetwork) && s.hostNetwork) && !(has(s.hostPID) && s.hostPID) && "
     "!(has(s.hostIPC) && s.hostIPC))",
     "hostNetwork, hostPID and hostIPC are not allowed"),
    (f"variables.podSpecs.all(s, ({_CONTAINERS}).all(c, !has(c.securityContext) || "
     "!has(c.securityContext.privileged) || !c.securityContext.privileged))",
     "privileged containers are not allowed"),
    # Secrets: a volume, a projected source, an env value or a whole envFrom.
    (f"variables.podSpecs.all(s, !has(s.volumes) || s.volumes.all(v, "
     f"(!has(v.secret) || (has(v.secret.secretName) && [v.secret.secretName].all(n, {_OK_SECRET}))) && "
     f"(!has(v.projected) || !has(v.projected.sources) || v.projected.sources.all(p, "
     f"!has(p.secret) || [p.secret.name].all(n, {_OK_SECRET})))))",
     f"only Secrets named {JOB_SECRET_PREFIX}* may be mounted"),
    (f"variables.podSpecs.all(s, ({_CONTAINERS}).all(c, "
     f"(!has(c.env) || c.env.all(e, !has(e.valueFrom) || !has(e.valueFrom.secretKeyRef) || "
     f"[e.valueFrom.secretKeyRef.name].all(n, {_OK_SECRET}))) && "
     f"(!has(c.envFrom) || c.envFrom.all(e, !has(e.secretRef) || [e.secretRef.name].all(n, {_OK_SECRET})))))",
     f"only Secrets named {JOB_SECRET_PREFIX}* may be read into the environment"),
    ("variables.podSpecs.all(s, !has(s.volumes) || s.volumes.all(v, "
     + " || ".join(f"has(v.{k})" for k in VOLUME_SOURCES) + "))",
     f"volumes may only be {', '.join(VOLUME_SOURCES)} (no nfs, hostPath, csi or ephemeral)"),
    ("variables.podSpecs.all(s, !has(s.nodeName) || s.nodeName == '')",
     "spec.nodeName may not be set: pods are placed by the scheduler after Kueue admits them"),
    ("variables.podSpecs.all(s, !has(s.tolerations) || s.tolerations.all(t, has(t.key) && t.key in "
     f"{list(TOLERATED_TAINTS)}))",
     f"tolerations may name only the taints {', '.join(TOLERATED_TAINTS)} (a toleration without a key "
     "tolerates every taint)"),
]  # fmt: skip

# The team's uid and gid on every pod and container (init and ephemeral ones included): the
# shared file system keeps teams apart by ownership, so a pod that ran as another team's uid
# would read and write that team's files.
IDENTITY_VALIDATIONS: list[dict[str, str]] = [{
    "expression": f"variables.podSpecs.all(s, has({_POD_SC}) && has({_POD_SC}.runAsUser) && "
                  f"{_POD_SC}.runAsUser == variables.uid && has({_POD_SC}.runAsGroup) && "
                  f"{_POD_SC}.runAsGroup == variables.gid && has({_POD_SC}.runAsNonRoot) && {_POD_SC}.runAsNonRoot && "
                  f"(!has({_POD_SC}.fsGroup) || {_POD_SC}.fsGroup == variables.gid) && "
                  f"(!has({_POD_SC}.supplementalGroups) || {_POD_SC}.supplementalGroups.all(g, g == variables.gid)))",
    "messageExpression": _IDENTITY_MESSAGE,
    "message": "spec.securityContext must run as the team's uid and gid (namespace labels "
               f"{TEAM_UID_LABEL}, {TEAM_GID_LABEL}) with runAsNonRoot: true",
}, {
    "expression": f"variables.podSpecs.all(s, ({_CONTAINERS}).all(c, !has(c.securityContext) || ("
                  "(!has(c.securityContext.runAsUser) || c.securityContext.runAsUser == variables.uid) && "
                  "(!has(c.securityContext.runAsGroup) || c.securityContext.runAsGroup == variables.gid) && "
                  "(!has(c.securityContext.runAsNonRoot) || c.securityContext.runAsNonRoot))))",
    "messageExpression": "'a container\\'s securityContext may set runAsUser only to ' + string(variables.uid) + "
                         "', runAsGroup only to ' + string(variables.gid) + ' and runAsNonRoot only to true'",
    "message": "a container's securityContext may set only the team's uid and gid, and runAsNonRoot: true",
}]  # fmt: skip

# Kueue manages only what carries its queue label (managedJobsNamespaceSelector selects the
# team namespaces, manageJobsWithoutQueueName is off: Kueue v0.13.4 pkg/controller/jobframework/
# reconciler.go ignores a job without a queue name), so an object without it would start around
# the team's quota: every Pod, Job and JobSet a member creates names the team's LocalQueue.
QUEUE_RULES = {
    "Pod": "has(object.metadata.labels) && '{q}' in object.metadata.labels && "
    "object.metadata.labels['{q}'] == variables.queue",
}
QUEUE_RULES["Job"] = QUEUE_RULES["JobSet"] = QUEUE_RULES["Pod"]

# The run label admits a pod to that run's peers (the per-run NetworkPolicy): a pod made
# directly by a submitter never carries it; a Job's or JobSet's pods carry their own run's,
# which is the object's name (the name is unique in the namespace, so no one can reuse a
# running run's label).
RUN_LABEL_RULES = {
    "Pod": (f"!variables.podLabels.exists(l, '{RUN_LABEL}' in l)",
            f"a pod created directly may not carry the run label {RUN_LABEL}"),
    "Job": (f"variables.podLabels.all(l, !('{RUN_LABEL}' in l) || object.metadata.name == l['{RUN_LABEL}'] || "
            f"object.metadata.name == 'r-' + l['{RUN_LABEL}'])",
            f"pod template label {RUN_LABEL} must be this object's own run (its name)"),
}  # fmt: skip
RUN_LABEL_RULES["JobSet"] = RUN_LABEL_RULES["Job"]


def policy_name(kind: str) -> str:
    return f"alchemist-submitted-{kind.lower()}s"


def match_conditions(policy: str) -> list[dict[str, str]]:
    """Judged: a user or the namespace's own ServiceAccount that may not change this policy.

    Whoever may update the policy could delete it, so exempting them weakens nothing; it is
    how the deployer (cluster-admin on every provider) keeps managing the platform's objects.
    `authorizer` in matchConditions: kubernetes v1.35.0 staging/src/k8s.io/apiserver/pkg/
    admission/plugin/policy/validating/plugin.go (compilePolicy, HasAuthorizer) and
    pkg/cel/library/authz.go."""
    may_change = (
        f"authorizer.group('admissionregistration.k8s.io').resource('validatingadmissionpolicies')"
        f".name('{policy}').check('update').allowed()"
    )
    return [
        {"name": "submitted-by-a-user", "expression": NOT_A_CONTROLLER},
        {"name": "not-the-platforms-deployer", "expression": f"!{may_change}"},
    ]


def validating_policy(kind: str) -> dict[str, Any]:
    """The cluster-scoped policy judging one kind of object a submitter creates or changes."""
    group, versions, resource, specs = POD_SPECS[kind]
    run_expr, run_msg = RUN_LABEL_RULES[kind]
    return {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name(kind)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [group], "apiVersions": versions, "resources": [resource],
                "operations": ["CREATE", "UPDATE"]}]},  # fmt: skip
            "matchConditions": match_conditions(policy_name(kind)),
            "variables": [{"name": "podSpecs", "expression": specs},
                          {"name": "podLabels", "expression": POD_LABELS[kind]}, *TEAM_VARIABLES],
            "validations": [
                *({"expression": e, "message": m, "reason": "Forbidden"} for e, m in [*VALIDATIONS, (run_expr, run_msg)]),
                *({**v, "reason": "Forbidden"} for v in IDENTITY_VALIDATIONS),
                {"expression": QUEUE_RULES[kind].format(q=QUEUE_LABEL), "reason": "Forbidden",
                 "message": f"metadata.labels {QUEUE_LABEL} must name the team's LocalQueue (its namespace's name): "
                            "Kueue admits only what carries it",
                 "messageExpression": f"'metadata.labels {QUEUE_LABEL} must be ' + variables.queue + "
                                      "' (the team\\'s LocalQueue): Kueue admits only what carries it'"},
            ],
        },
    }  # fmt: skip


def policy_binding(kind: str) -> dict[str, Any]:
    """Binds a policy to every team namespace (those labelled alchemist.io/team), denying on failure."""
    return {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name(kind)},
        "spec": {
            "policyName": policy_name(kind),
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}
            },
        },
    }


# --- NetworkPolicies a submitter creates: one run's own peers, nothing wider ---------------------

_NP_PEERS = (
    "(!has(variables.np.spec.{rules}) || variables.np.spec.{rules}.all(r, has(r.{peers}) && size(r.{peers}) > 0 && "
    "r.{peers}.all(p, !has(p.namespaceSelector) && !has(p.ipBlock) && has(p.podSelector) && "
    f"has(p.podSelector.matchLabels) && '{RUN_LABEL}' in p.podSelector.matchLabels && "
    f"p.podSelector.matchLabels['{RUN_LABEL}'] == variables.run)))"
)
NETWORK_POLICY_NAME = "alchemist-submitted-networkpolicies"


def network_policy_policy() -> dict[str, Any]:
    """Submitters create, change and delete only per-run NetworkPolicies: selecting one run's
    pods and admitting only that run's pods. The platform's `default-deny` and `alchemist-jobs`
    select no run, so a submitter can neither delete nor loosen them."""
    return {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NETWORK_POLICY_NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["networking.k8s.io"],
                        "apiVersions": ["v1"],
                        "resources": ["networkpolicies"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                    }
                ]
            },  # fmt: skip
            "matchConditions": match_conditions(NETWORK_POLICY_NAME),
            "variables": [
                {"name": "np", "expression": "request.operation == 'DELETE' ? oldObject : object"},
                {
                    "name": "run",
                    "expression": f"has(variables.np.spec.podSelector.matchLabels) && "
                    f"'{RUN_LABEL}' in variables.np.spec.podSelector.matchLabels ? "
                    f"variables.np.spec.podSelector.matchLabels['{RUN_LABEL}'] : ''",
                },
            ],  # fmt: skip
            "validations": [
                {
                    "expression": "variables.run != ''",
                    "reason": "Forbidden",
                    "message": f"a submitter's NetworkPolicy selects one run (podSelector.matchLabels {RUN_LABEL})",
                },
                {
                    "expression": "request.operation == 'DELETE' || ("
                    + _NP_PEERS.format(rules="ingress", peers="from")
                    + " && "
                    + _NP_PEERS.format(rules="egress", peers="to")
                    + ")",
                    "reason": "Forbidden",
                    "message": "a run's NetworkPolicy admits only pods of the same run (podSelector on its run label)",
                },
            ],  # fmt: skip
        },
    }


def network_policy_binding() -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NETWORK_POLICY_NAME},
        "spec": {
            "policyName": NETWORK_POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}
            },
        },
    }


# --- Connections a submitter opens to a pod: `kubectl exec` and `port-forward` -------------------

CONNECT_POLICY_NAME = "alchemist-submitted-connections"
# What the opt-in Role `alchemist-debug` grants besides exec and port-forward: no API serves it,
# RBAC answers for it, and its holders' connections are not judged (infra/team_namespace.py).
DEBUG_GRANT = {"apiGroups": ["alchemist.io"], "resources": ["debug"], "verbs": ["use"]}


def connect_policy() -> dict[str, Any]:
    """The submitter Role grants pods/exec and pods/portforward on every pod (RBAC names no
    prefix); a member may use them on interactive sessions (`alchemist-session-*`, the names
    the job library gives them) and port-forward to TensorBoard, nothing else; a holder of
    `alchemist-debug` reaches any pod. A CONNECT request's name is the pod's (kubernetes v1.35.0
    staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating: `request.name`,
    `request.subResource`)."""
    return {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": CONNECT_POLICY_NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods/exec", "pods/portforward", "pods/attach"],
                        "operations": ["CONNECT"],
                    }
                ]
            },  # fmt: skip
            "matchConditions": [
                *match_conditions(CONNECT_POLICY_NAME),
                {
                    "name": "not-a-debugger",
                    "expression": "!authorizer.group('alchemist.io').resource('debug').namespace(request.namespace)"
                    ".check('use').allowed()",
                },
            ],
            "validations": [
                {
                    "expression": f"request.name.startsWith('{SESSION_PREFIX}') || "
                    f"(request.subResource == 'portforward' && request.name == '{TENSORBOARD_POD}')",
                    "reason": "Forbidden",
                    "message": f"a member execs into and port-forwards to interactive sessions ({SESSION_PREFIX}*) and "
                    f"port-forwards to {TENSORBOARD_POD} only; any other pod needs the role alchemist-debug",
                }
            ],  # fmt: skip
        },
    }


def connect_binding() -> dict[str, Any]:
    return {
        **network_policy_binding(),
        "metadata": {"name": CONNECT_POLICY_NAME},
        "spec": {**network_policy_binding()["spec"], "policyName": CONNECT_POLICY_NAME},
    }


def all_policies() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(resource key, policy, binding) for every admission policy the platform installs."""
    out = [(kind.lower(), validating_policy(kind), policy_binding(kind)) for kind in POD_SPECS]
    out.append(("networkpolicy", network_policy_policy(), network_policy_binding()))
    out.append(("connect", connect_policy(), connect_binding()))
    return out
