"""Admission and RBAC of every stack beside every job: who may create, change and delete what.

Upstream semantics, ported (no API server runs here), each cited where it is ported:
* ValidatingAdmissionPolicies: tests/k8s_admission.py (kubernetes v1.35.0), with the CEL
  `authorizer` answered by RBAC: tests/k8s_authz.py (kubernetes v1.35.0 RuleAllows).
* JobSet's own webhook: kubernetes-sigs/jobset v0.12.0 pkg/webhooks/jobset_webhook.go
  (ValidateCreate: the subdomain, and every generated Job and pod name, must be DNS-1035 labels
  of at most 63 characters; a pod name is `placement.GenPodName(...) + "-abcde"`,
  pkg/util/placement/placement.go) and the API server's label-value rule
  (apimachinery pkg/util/validation/validation.go IsValidLabelValue, kubernetes v1.35.0).
The actors are each stack's real ones: its deployer as the API server knows it, a team member
(the rendered RoleBinding's group; on EKS the rendered access entry's principal and groups),
and the controllers that act on a job (JobSet, Job, Kueue).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from system_tier import ALL_SHAPES, REPO, SESSION, STACK_NAMES, Platform

from alchemist_jobs.contract import RUN_LABEL
from infra.labels import JOBSET_NAMESPACE, KUEUE_NAMESPACE
from tests.k8s_admission import RESOURCES, judge
from tests.k8s_authz import MASTERS, Actor, Rbac

RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
ADMIN_RULES = ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},)
# The controllers, as kube-controller-manager (--use-service-account-credentials) and the
# jobset 0.12.0 and kueue 0.13.4 charts name their ServiceAccounts.
JOB_CONTROLLER = Actor("job-controller", "system:serviceaccount:kube-system:job-controller")
JOBSET_CONTROLLER = Actor("jobset-controller", f"system:serviceaccount:{JOBSET_NAMESPACE}:jobset-controller-manager")
KUEUE = Actor("kueue", f"system:serviceaccount:{KUEUE_NAMESPACE}:kueue-controller-manager")


def _plural(kind: str) -> str:
    low = kind.lower()
    return low[:-1] + "ies" if low.endswith("y") else low + ("es" if low.endswith("s") else "s")


def deployers(platform: Platform) -> list[Actor]:
    """Who runs `pulumi up` for the stack, as the API server authenticates and authorizes them."""
    provider = platform.output.provider
    if provider == "kind":  # kind's kubeconfig: kubeadm's admin.conf client certificate
        return [Actor("deployer", "kubernetes-admin", (MASTERS,)),
                # kubeadm >= 1.29 puts admin.conf in kubeadm:cluster-admins, bound to cluster-admin
                Actor("deployer", "kubernetes-admin", ("kubeadm:cluster-admins",), ADMIN_RULES)]
    if provider == "onprem":  # k3s.yaml: CN=system:admin, O=system:masters
        return [Actor("deployer", "system:admin", (MASTERS,))]
    if provider == "aws":  # API authentication mode: the creator's access entry, EKS's cluster-admin policy
        return [Actor("deployer", "arn:aws:sts::123456789012:assumed-role/platform-deployer/alice-cli", (), ADMIN_RULES),
                Actor("deployer", "arn:aws:iam::123456789012:user/ci", (), ADMIN_RULES)]
    # existing: whoever the kubeconfig names (a token's owner is known only to the API server);
    # all we may assume is what the program needs: to manage every object it registers.
    rules = []
    for obj in platform.kube_objects():
        group = obj["apiVersion"].rpartition("/")[0]
        rules.append({"apiGroups": [group], "resources": [_plural(obj["kind"])],
                      "verbs": ["get", "list", "create", "update", "patch", "delete"]})
    return [Actor("deployer", "existing-kubeconfig-user", (), tuple(rules))]


def member(platform: Platform) -> Actor:
    """A member of the stack's default team: the groups its RoleBinding binds (on EKS, what the
    access entry of a team principal maps it to)."""
    ns = platform.output.namespace
    binding = next(b for b in platform.kube_objects("RoleBinding") if b["metadata"]["namespace"] == ns)
    groups = tuple(s["name"] for s in binding["subjects"] if s["kind"] == "Group")
    entries = [r["inputs"] for r in platform.resources(":AccessEntry")
               if set(r["inputs"]["kubernetesGroups"]) & set(groups)]
    if platform.output.provider == "aws":  # an access entry (infra/providers/aws/cluster.py) maps the team's principals
        role = entries[0]["principalArn"].rpartition("/")[2] if entries else "research-team"
        return Actor("member", f"arn:aws:sts::123456789012:assumed-role/{role}/bob",
                     tuple(entries[0]["kubernetesGroups"]) if entries else groups)
    return Actor("member", "bob", groups)


def rbac(platform: Platform) -> Rbac:
    return Rbac(o for kind in RBAC_KINDS for o in platform.kube_objects(kind))


def policies(platform: Platform) -> list[tuple[dict, dict]]:
    """(policy, binding) for every ValidatingAdmissionPolicy the platform renders."""
    bindings = {b["spec"]["policyName"]: b for b in platform.kube_objects("ValidatingAdmissionPolicyBinding")}
    vaps = platform.kube_objects("ValidatingAdmissionPolicy")
    assert vaps and {v["metadata"]["name"] for v in vaps} == set(bindings)
    return [(v, bindings[v["metadata"]["name"]]) for v in vaps]


def namespace_labels(platform: Platform, ns: str) -> dict:
    return next((n["metadata"].get("labels") or {}) for n in platform.kube_objects("Namespace")
                if n["metadata"]["name"] == ns)


def review(platform: Platform, actor: Actor, operation: str, obj: dict | None, old: dict | None = None):
    """Every policy's answer: [] admitted by all that judge it, else the denial messages."""
    o = obj or old
    ns = o["metadata"].get("namespace") or platform.output.namespace
    labels, authz = namespace_labels(platform, ns), rbac(platform)
    denied = []
    for policy, binding in policies(platform):
        answer = judge(policy, binding, actor=actor, operation=operation, namespace=ns, obj=obj, old=old,
                       namespace_labels=labels, rbac=authz)
        denied += answer or []
    return denied


def _jobs_and_pods(jobset: dict) -> tuple[list[dict], list[dict]]:
    """The Jobs JobSet's controller makes of a JobSet and the pods the Job controller makes of
    them (names: placement.GenJobName / GenPodName of jobset v0.12.0)."""
    jobs, pods = [], []
    js = jobset["metadata"]["name"]
    for rj in jobset["spec"]["replicatedJobs"]:
        for j in range(rj["replicas"]):
            job = {"apiVersion": "batch/v1", "kind": "Job", "spec": copy.deepcopy(rj["template"]["spec"]),
                   "metadata": {"name": f"{js}-{rj['name']}-{j}", "namespace": jobset["metadata"]["namespace"]}}
            jobs.append(job)
            for i in range(rj["template"]["spec"].get("completions", 1)):
                t = job["spec"]["template"]
                pods.append({"apiVersion": "v1", "kind": "Pod", "spec": copy.deepcopy(t["spec"]),
                             "metadata": {"name": f"{job['metadata']['name']}-{i}-abcde",
                                          "namespace": job["metadata"]["namespace"],
                                          "labels": dict(t["metadata"].get("labels") or {})}})
    return jobs, pods


def _team_objects(platform: Platform) -> list[dict]:
    """The platform's own objects in team namespaces that an admission policy could judge."""
    teams = {n["metadata"]["name"] for n in platform.kube_objects("Namespace")
             if "alchemist.io/team" in (n["metadata"].get("labels") or {})}
    return [o for o in platform.kube_objects() if o["kind"] in RESOURCES
            and o.get("metadata", {}).get("namespace") in teams]


# --- admission: the job's objects ------------------------------------------------------------


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_a_members_job_objects_are_admitted_and_its_pods_made_by_the_controllers(platforms, jobs, stack):
    p = platforms[stack]
    who = member(p)
    judged = set()
    for shape in ALL_SHAPES:
        job = jobs(stack, shape)
        if job is None:
            continue
        for obj in job.manifests:
            assert review(p, who, "CREATE", obj) == [], (shape, obj["kind"], obj["metadata"]["name"])
            if obj["kind"] in ("ConfigMap", "NetworkPolicy"):  # the run's JobSet becomes their owner
                owned = copy.deepcopy(obj)
                owned["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                         "name": obj["metadata"]["name"], "uid": "u"}]
                assert review(p, who, "UPDATE", owned, obj) == [], (shape, obj["kind"])
                assert review(p, who, "DELETE", None, owned) == [], (shape, obj["kind"])  # cancel
            judged.add(obj["kind"])
        for jobset in job.objects("JobSet"):
            kueue_admits = copy.deepcopy(jobset)
            kueue_admits["spec"]["suspend"] = False
            assert review(p, KUEUE, "UPDATE", kueue_admits, jobset) == []
            assert review(p, who, "DELETE", None, jobset) == []  # cancel
            made_jobs, made_pods = _jobs_and_pods(jobset)
            for j in made_jobs:
                assert review(p, JOBSET_CONTROLLER, "CREATE", j) == []
            for pod in made_pods:
                assert review(p, JOB_CONTROLLER, "CREATE", pod) == []
                # the same pod made by the member would borrow the run's network peers (and,
                # without the queue label Kueue gives its JobSet only, start around Kueue)
                assert f"a pod created directly may not carry the run label {RUN_LABEL}" in review(
                    p, who, "CREATE", pod)
    assert {"Pod", "JobSet", "NetworkPolicy"} <= judged


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_a_member_cannot_borrow_another_runs_label_or_widen_a_runs_policy(platforms, jobs, stack):
    p = platforms[stack]
    who = member(p)
    job = jobs(stack, "two-nodes")
    (jobset,) = job.objects("JobSet")
    (netpol,) = job.objects("NetworkPolicy")
    thief = copy.deepcopy(jobset)
    thief["metadata"]["name"] = "thief-20260101-000000-00000000"
    assert f"pod template label {RUN_LABEL} must be this object's own run (its name)" in review(p, who, "CREATE", thief)
    wide = copy.deepcopy(netpol)
    wide["spec"]["ingress"] = [{}]
    assert review(p, who, "CREATE", wide)
    assert review(p, who, "UPDATE", wide, netpol)


# --- admission: the platform's objects ---------------------------------------------------------


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_the_deployer_manages_the_platforms_objects_and_a_member_cannot_weaken_them(platforms, stack):
    """`pulumi up` (a new team, a changed policy) and `pulumi destroy` pass for the stack's
    real deployer; a team member can neither delete nor loosen the platform's NetworkPolicies."""
    p = platforms[stack]
    objects = _team_objects(p)
    netpols = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert netpols, "the platform renders NetworkPolicies in team namespaces"
    for deployer in deployers(p):
        for obj in objects:
            changed = copy.deepcopy(obj)
            changed["metadata"].setdefault("labels", {})["alchemist.io/changed"] = "true"
            for op, new, old in (("CREATE", obj, None), ("UPDATE", changed, obj), ("DELETE", None, obj)):
                assert review(p, deployer, op, new, old) == [], (deployer.username, op, obj["kind"],
                                                                 obj["metadata"]["name"])
    who = member(p)
    for obj in netpols:
        opened = copy.deepcopy(obj)
        opened["spec"]["ingress"] = [{}]
        opened["spec"]["egress"] = [{}]
        assert review(p, who, "UPDATE", opened, obj), obj["metadata"]["name"]
        assert review(p, who, "DELETE", None, obj), obj["metadata"]["name"]
        assert review(p, who, "CREATE", {**opened, "metadata": {**obj["metadata"], "name": "mine"}})


# --- JobSet's webhook and the API server's name rules, for every shape -----------------------

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _dns1035(value: str) -> bool:
    return len(value) <= 63 and _DNS1035.fullmatch(value) is not None


def jobset_name_errors(js: dict) -> list[str]:
    """jobset v0.12.0 ValidateCreate's name checks (pkg/webhooks/jobset_webhook.go)."""
    errors = []
    name = js["metadata"]["name"]
    sub = (js["spec"].get("network") or {}).get("subdomain")
    if sub and not _dns1035(sub):
        errors.append(f"subdomain {sub}")
    for rj in js["spec"]["replicatedJobs"]:
        longest_job = f"{name}-{rj['name']}-{rj['replicas'] - 1}"
        if not _dns1035(longest_job):
            errors.append(f"job name {longest_job}")
        spec = rj["template"]["spec"]
        if spec.get("completionMode") == "Indexed" and spec.get("completions") is not None:
            longest_pod = f"{name}-{rj['name']}-{rj['replicas'] - 1}-{spec['completions'] - 1}-abcde"
            if not _dns1035(longest_pod):
                errors.append(f"pod name {longest_pod}")
    return errors


def _labels(obj: dict):
    yield from ((obj.get("metadata") or {}).get("labels") or {}).items()
    for rj in (obj.get("spec") or {}).get("replicatedJobs") or []:
        yield from ((rj["template"]["spec"]["template"].get("metadata") or {}).get("labels") or {}).items()


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_every_shapes_names_and_labels_pass_jobsets_webhook_and_the_api_server(platforms, jobs, stack):
    for shape in ALL_SHAPES:
        job = jobs(stack, shape)
        if job is None:
            continue
        for obj in job.manifests:
            for key, value in _labels(obj):
                assert len(value) <= 63 and _LABEL_VALUE.fullmatch(value), (shape, key, value)
            if obj["kind"] == "JobSet":
                assert jobset_name_errors(obj) == [], shape
                assert obj["metadata"]["labels"][RUN_LABEL] == job.run_id
    # the check can fail: JobSet refuses what the old hashed 49-character names gave
    js = copy.deepcopy(jobs(stack, "two-nodes").objects("JobSet")[0])
    js["metadata"]["name"] = "l" * 42 + "-2d5c1e"
    assert jobset_name_errors(js) == [f"pod name {'l' * 42}-2d5c1e-worker-0-1-abcde"]


# --- RBAC: every call the CLI and the dashboard make for a member, and no more ----------------


def _table(doc: Path, heading: str) -> list[dict[str, str]]:
    """The markdown table under `heading` in `doc`, as rows of {column: cell}."""
    text = doc.read_text()
    lines: list[str] = []
    for ln in text[text.index(heading):].splitlines()[1:]:
        if ln.startswith("|"):
            lines.append(ln)
        elif lines:
            break
    rows = [[c.strip().strip("`") for c in ln.strip("|").split("|")] for ln in lines]
    head, body = rows[0], rows[2:]
    return [dict(zip(head, r)) for r in body]


def _api_calls(stack_out) -> list[tuple[str, dict]]:
    """Run, status, list, logs, progress, cancel and an interactive session through the real
    backend (the CLI and the dashboard both go through it) against the recording fake client."""
    from tests.unit.k8s.fake_kube import FakeKube

    from alchemist_jobs.kubernetes.interactive import Sessions, session_name, session_pod
    from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
    from alchemist_jobs.spec import parse_spec

    fake = FakeKube()
    sched = KubernetesScheduler(stack_out, connector=fake.connector)
    spec = parse_spec({"name": "rbac", "task": {"builtin": "digits"}, "nodes": 2,
                       "resources": {"cpu": 1, "memory": "2Gi", "gpu": 0}}, "rbac", REPO / "examples")
    request = sched.dryrun(spec, REPO / "examples")
    handle = sched.schedule(request)
    for i in range(2):
        fake.add_pod(handle.name, i, log="[rank0]: hello\n")
    st = sched.status(request.run_id)
    sched.list()
    list(sched.logs(request.run_id))
    sched.progress(st)
    sched.cancel(request.run_id)
    sessions = Sessions(stack_out, connector=fake.connector)
    name = session_name("bob")
    sessions.start(session_pod(stack_out, name))
    sessions.get(name)
    sessions.stop(name)
    return fake.calls


# kubernetes-client/python's generated methods (operationIds of the API's OpenAPI spec):
# <verb>_namespaced_<resource>[_<subresource>] -> the request RBAC authorizes.
_VERBS = {"create": "create", "delete": "delete", "patch": "patch", "list": "list", "read": "get",
          "get": "get", "connect_get": "get"}
_RESOURCES = {"pod": ("", "pods", ""), "pod_log": ("", "pods", "log"), "secret": ("", "secrets", ""),
              "config_map": ("", "configmaps", ""), "service": ("", "services", ""), "job": ("batch", "jobs", ""),
              "network_policy": ("networking.k8s.io", "networkpolicies", ""),
              "pod_proxy_with_path": ("", "pods", "proxy")}


def request_attributes(method: str, kw: dict) -> tuple[str, str, str, str, str]:
    """(verb, group, resource, subresource, name) of one recorded client call."""
    m = re.fullmatch(r"(connect_get|create|delete|patch|list|read|get)_namespaced_(.+)", method)
    assert m, f"unmapped API method {method}"
    verb = "watch" if m[1] == "list" and kw.get("watch") else _VERBS[m[1]]
    if m[2] == "custom_object":
        group, resource, sub = kw["group"], kw["plural"], ""
    else:
        group, resource, sub = _RESOURCES[m[2]]
    return verb, group, resource, sub, kw.get("name", "")


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_a_member_may_make_every_call_of_the_cli_and_dashboard_and_no_more(platforms, stack):
    p = platforms[stack]
    who, authz, ns = member(p), rbac(p), p.output.namespace
    calls = _api_calls(p.output)
    used = set()
    # `existing`: the exported kubeconfig is the team ServiceAccount's (infra/team_credential.py)
    holders = [who] + ([Actor("job-credential", f"system:serviceaccount:{ns}:alchemist-submitter")]
                       if p.output.provider == "existing" else [])
    for method, kw in calls:
        verb, group, resource, sub, name = request_attributes(method, kw)
        for holder in holders:
            assert authz.allows(holder, verb, group, resource, ns, name, sub), (holder.role, method, resource, sub)
        used.add((group or "core", f"{resource}/{sub}" if sub else resource, verb))
    # docs/kubernetes.md says who may do what; the rendered Role must grant exactly that
    table = _table(REPO / "docs" / "kubernetes.md", "### What a team member may do")
    documented = {(r["API group"], r["resource"], v.strip()) for r in table for v in r["verbs"].split(",")}
    granted = set()
    for rule in authz.rules(who, ns):
        for g in rule["apiGroups"]:
            for res in rule["resources"]:
                for v in rule["verbs"]:
                    granted.add((g or "core", res, v))
    assert granted == documented
    assert used <= granted
    # what the backend never calls is documented for the person at a terminal (kubectl)
    for g, res, v in granted - used:
        row = next(r for r in table if (r["API group"], r["resource"]) == (g, res))
        assert row["used by"], (g, res, v)
    # and none of it reaches the platform's own objects or another namespace
    # (pods/exec and pods/portforward: granted, and bounded by admission: tests/system/test_sessions.py)
    for res, verb in (("secrets", "get"), ("secrets", "list"), ("roles", "create")):
        group = "rbac.authorization.k8s.io" if res == "roles" else ""
        r, _, sub = res.partition("/")
        assert not authz.allows(who, verb, group, r, ns, "x", sub), res
    assert not authz.allows(who, "create", "jobset.x-k8s.io", "jobsets", "kube-system")
    for holder in holders[1:]:  # the job credential holds the member's rights, no more
        assert sorted(map(str, authz.rules(holder, ns))) == sorted(map(str, authz.rules(who, ns)))
    assert not authz.allows(who, "update", "admissionregistration.k8s.io", "validatingadmissionpolicies", "")
