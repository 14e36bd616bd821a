"""An interactive session on every stack: its owner reaches it with the commands the CLI prints, and Kueue ranks it above batch.

The commands are the CLI's own (`how_to_reach` of alchemist_jobs/kubernetes/interactive.py,
what `alchemist interactive` prints, alchemist_jobs/commands/interactive.py), turned into the
API requests kubectl makes for them: `kubectl port-forward pod/P` and `kubectl exec P` read
the pod, then open pods/portforward or pods/exec on it, over WebSockets (GET) since kubectl
1.31 and over SPDY (POST) when that fails (kubernetes v1.35.0 staging/src/k8s.io/kubectl/pkg/
cmd/portforward/portforward.go and cmd/exec/exec.go; the verb of a connect request is its
HTTP method's: staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go). Each is
judged by the rendered Roles (tests/k8s_authz.py) and, as a CONNECT, by the rendered admission
policies (tests/k8s_admission.py's evaluation). Priority and preemption are Kueue v0.13.4's
(kueue_model.py).
"""

from __future__ import annotations

import shlex

import celpy
import pytest
from kueue_model import preemption_candidates, workload_priority
from system_tier import SESSION, SHAPES, STACK_NAMES, Platform
from test_admission_rbac import member, namespace_labels, policies, rbac

from alchemist_jobs.kubernetes.interactive import how_to_reach
from tests.k8s_admission import _Check, _eval, _variables, selects
from tests.k8s_authz import Actor


def kubectl_requests(command: str) -> list[tuple[str, str, str, str, str]]:
    """(verb, namespace, resource, subresource, name) of every request kubectl makes for a
    `kubectl ... port-forward pod/P ...` or `kubectl ... exec [-it] P -- ...` line."""
    words = shlex.split(command[command.index("kubectl"):])
    ns = words[words.index("-n") + 1] if "-n" in words else "default"
    if "port-forward" in words:
        target = words[words.index("port-forward") + 1]
        sub, pod = "portforward", target.split("/", 1)[1] if target.startswith(("pod/", "pods/")) else target
    elif "exec" in words:
        rest = [w for w in words[words.index("exec") + 1:words.index("--")] if not w.startswith("-")]
        sub, pod = "exec", rest[0]
    else:
        raise AssertionError(f"a kubectl command the model does not know: {command}")
    return [("get", ns, "pods", "", pod), ("get", ns, "pods", sub, pod), ("create", ns, "pods", sub, pod)]


def printed_commands(platform: Platform, name: str) -> list[str]:
    """The kubectl lines `alchemist interactive` prints once the session runs."""
    text = how_to_reach(platform.output, name, "token")
    return [ln[ln.index("kubectl -n "):] for ln in text.splitlines() if "kubectl -n " in ln]


def connect_denials(platform: Platform, actor: Actor, namespace: str, sub: str, pod: str) -> list[str]:
    """The rendered policies' answers to a CONNECT on pods/<sub> of `pod` (as judge() in
    tests/k8s_admission.py, for a request whose object is the connect options)."""
    authz, out = rbac(platform), []
    ns_labels = {"kubernetes.io/metadata.name": namespace, **namespace_labels(platform, namespace)}
    for policy, binding in policies(platform):
        if not selects((binding["spec"].get("matchResources") or {}).get("namespaceSelector"), ns_labels):
            continue
        rules = (policy["spec"].get("matchConstraints") or {}).get("resourceRules") or []
        if not any("" in r["apiGroups"] and f"pods/{sub}" in r["resources"] and "CONNECT" in r["operations"]
                   for r in rules):
            continue
        request = {"userInfo": actor.user_info(), "namespace": namespace, "operation": "CONNECT", "name": pod,
                   "subResource": sub, "resource": {"group": "", "version": "v1", "resource": "pods"}}
        base = {"object": celpy.json_to_cel({"kind": "PodExecOptions" if sub == "exec" else "PodPortForwardOptions"}),
                "oldObject": celpy.json_to_cel(None), "request": celpy.json_to_cel(request),
                "authorizer": _Check(actor, authz), "variables": _variables({})}
        if not all(_eval(c["expression"], base) for c in policy["spec"].get("matchConditions") or []):
            continue
        out += [v["message"] for v in policy["spec"]["validations"] if not _eval(v["expression"], base)]
    return out


def may(platform: Platform, actor: Actor, request: tuple[str, str, str, str, str]) -> str | None:
    """None when RBAC and admission let `actor` make the request, else why not."""
    verb, ns, resource, sub, name = request
    if not rbac(platform).allows(actor, verb, "", resource, ns, name, sub):
        return f"RBAC: {verb} {resource}/{sub} {name}"
    if sub:
        denied = connect_denials(platform, actor, ns, sub, name)
        if denied:
            return f"admission: {denied}"
    return None


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_the_owner_may_run_every_command_the_cli_prints_for_a_session(platforms, jobs, stack):
    """Issue 36.5: `alchemist interactive` printed `kubectl port-forward` and `kubectl exec` to
    the session pod, which the submitter Role did not allow."""
    platform = platforms[stack]
    session = jobs(stack, SESSION)
    name = session.run_id
    ns = session.manifests[0]["metadata"]["namespace"]
    who = member(platform)
    holders = [who] + ([Actor("job-credential", f"system:serviceaccount:{ns}:alchemist-submitter")]
                       if platform.output.provider == "existing" else [])
    commands = printed_commands(platform, name)
    assert {c.split()[3] for c in commands} == {"port-forward", "exec"}, commands
    for command in commands:
        for request in kubectl_requests(command):
            for holder in holders:
                assert may(platform, holder, request) is None, (holder.role, command, may(platform, holder, request))
    # TensorBoard's port-forward (docs/platform.md) still works; exec into it does not
    assert may(platform, who, ("create", ns, "pods", "portforward", "tensorboard-0")) is None
    assert may(platform, who, ("create", ns, "pods", "exec", "tensorboard-0")).startswith("admission")


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_a_member_reaches_no_job_pod_but_a_debugger_does(platforms, jobs, stack):
    """exec and port-forward stay out of job pods (a teammate's run) for a member; the opt-in
    Role alchemist-debug, bound to a person, reaches them."""
    platform = platforms[stack]
    job = jobs(stack, "two-nodes")
    (jobset,) = job.objects("JobSet")
    ns, pod = jobset["metadata"]["namespace"], f"{jobset['metadata']['name']}-worker-0-0-abcde"
    who = member(platform)
    for sub in ("exec", "portforward"):
        for verb in ("get", "create"):
            assert (may(platform, who, (verb, ns, "pods", sub, pod)) or "").startswith("admission"), (sub, verb)
    binding = {"kind": "RoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "alice-debug", "namespace": ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "alchemist-debug"},
               "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]}
    debugged = Platform(platform.name, {**platform.render, "resources": [
        *platform.render["resources"], {"type": "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
                                        "name": "alice-debug", "inputs": binding}]}, platform.output)
    alice = Actor("debugger", "alice", who.groups)
    for sub in ("exec", "portforward"):
        assert may(debugged, alice, ("create", ns, "pods", sub, pod)) is None, sub
        assert may(debugged, who, ("create", ns, "pods", sub, pod)) is not None, sub


def priority_classes(platform: Platform) -> list[dict]:
    return [{"metadata": o["metadata"], "value": o["value"], "globalDefault": o.get("globalDefault", False)}
            for o in platform.kube_objects("PriorityClass")]


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_kueue_ranks_a_session_above_every_batch_job(platforms, jobs, stack):
    """Issue 36.5: the session pod named no priority class, so Kueue gave it the default
    priority 0, below every batch job (100): it queued behind them and they could preempt it.
    Now a session may preempt batch work in its own ClusterQueue and reclaim from borrowers,
    and no batch job may preempt a session in its queue."""
    platform = platforms[stack]
    classes = priority_classes(platform)
    (session,) = jobs(stack, SESSION).manifests
    cqs = {o["metadata"]["name"]: o for o in platform.kube_objects("ClusterQueue")}
    cq = cqs[platform.output.queue] if platform.output.queue in cqs else next(iter(cqs.values()))
    session_priority = workload_priority(session, classes)
    judged = 0
    for shape in SHAPES:
        job = jobs(stack, shape)
        if job is None:
            continue
        (jobset,) = job.objects("JobSet")
        batch = workload_priority(jobset, classes)
        judged += 1
        assert batch < session_priority, (shape, batch, session_priority)
        assert preemption_candidates(session_priority, cq, [batch], []) == [batch], shape
        assert preemption_candidates(batch, cq, [session_priority], []) == [], shape
    assert judged >= 4


def test_the_priority_model_follows_kueue(platforms, jobs):
    """No class named: the global default's value, else 0; `Any` reclaims whatever the
    priority, `Never` nothing."""
    classes = priority_classes(platforms["dev"])
    (session,) = jobs("dev", SESSION).manifests
    bare = {**session, "spec": {k: v for k, v in session["spec"].items() if k != "priorityClassName"}}
    assert workload_priority(bare, classes) == 0
    assert workload_priority(bare, [*classes, {"metadata": {"name": "d"}, "value": 7, "globalDefault": True}]) == 7
    cq = {"spec": {"preemption": {"withinClusterQueue": "Never", "reclaimWithinCohort": "Any"}}}
    assert preemption_candidates(100, cq, [0], [1000]) == [1000]
