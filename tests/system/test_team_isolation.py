"""Teams kept apart on the cluster (issue 37.4), judged from every stack's rendered objects.

The attacker is a member of the stack's second team (the groups its RoleBinding binds) creating
objects in its own namespace, as RBAC lets it: a bare pod (what interactive sessions are) or a
JobSet. Every attack starts from the job library's own objects for that team and changes one
thing; the platform's rendered ValidatingAdmissionPolicies must refuse it
(tests/k8s_admission.py: kubernetes v1.35.0 semantics, evaluated with cel-python). Every real
job pod must still be admitted and meet Pod Security `restricted` as upstream defines it
(tests/system/pod_security.py: kubernetes v1.35.0 staging/src/k8s.io/pod-security-admission/
policy), which the team namespaces enforce by default.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest
from pod_security import violations
from system_tier import ALL_SHAPES, SESSION, STACK_NAMES, Platform, build_job_in, team_view
from test_admission_rbac import member, namespace_labels, review
from test_second_team import second

from infra.labels import TEAM_GID_LABEL, TEAM_LABEL, TEAM_UID_LABEL

PSA_ENFORCE = "pod-security.kubernetes.io/enforce"


def identity(platform: Platform, team: str) -> tuple[int, int]:
    """The team's (uid, gid) as the stack output gives it to the job library."""
    fs = platform.output.for_team(team).shared_fs
    return fs.uid, fs.gid


def root_sources(platform: Platform) -> list[dict[str, Any]]:
    """The shared file system's root as a pod could name it inline: each rendered
    PersistentVolume's own source (NFS server and share, hostPath, CSI handle) with its path
    cut to the root; on EFS the file system itself, without an access point."""
    out = []
    for pv in platform.kube_objects("PersistentVolume"):
        spec = pv["spec"]
        if "nfs" in spec:
            out.append({"nfs": {"server": spec["nfs"]["server"], "path": spec["nfs"]["path"].split("/teams/")[0] or "/"}})
        if "hostPath" in spec:
            out.append({"hostPath": {"path": spec["hostPath"]["path"].split("/teams/")[0] or "/"}})
        if "csi" in spec:
            handle = str(spec["csi"]["volumeHandle"]).split("::")[0].split("#")[0]
            out.append({"csi": {"driver": spec["csi"]["driver"],
                                "volumeAttributes": {**(spec["csi"].get("volumeAttributes") or {}),
                                                     "volumeHandle": handle}}})
    assert out, f"{platform.name}: no shared file system volume rendered"
    out.append({"ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteMany"], "storageClassName": "alchemist-shared",
        "resources": {"requests": {"storage": "1Gi"}}}}}})  # fmt: skip
    return out


def attacks(platform: Platform, victim: str) -> dict[str, tuple[Callable[[dict], None], str]]:
    """name -> (what the attacker changes in a pod spec (and its labels), a phrase of the refusal)."""
    v_uid, v_gid = identity(platform, victim)

    def sc(**kw):
        return lambda pod: pod["spec"].setdefault("securityContext", {}).update(kw)

    def volume(source):
        def change(pod):
            pod["spec"]["volumes"].append({"name": "loot", **source})
            pod["spec"]["containers"][0]["volumeMounts"].append({"name": "loot", "mountPath": "/loot"})
        return change

    out: dict[str, tuple[Callable[[dict], None], str]] = {
        f"root-{i}-{next(iter(s))}": (volume(s), "volumes may only be") for i, s in enumerate(root_sources(platform))
    }
    out.update({
        "victims-uid": (sc(runAsUser=v_uid), "spec.securityContext must set runAsUser"),
        "victims-gid": (sc(runAsGroup=v_gid), "spec.securityContext must set runAsUser"),
        "victims-fs-group": (sc(fsGroup=v_gid), "spec.securityContext must set runAsUser"),
        "victims-supplemental-group": (sc(supplementalGroups=[v_gid]), "spec.securityContext must set runAsUser"),
        "root": (sc(runAsUser=0, runAsNonRoot=False), "spec.securityContext must set runAsUser"),
        "no-pod-identity": (lambda pod: pod["spec"].pop("securityContext"), "spec.securityContext must set runAsUser"),
        "container-as-victim": (
            lambda pod: pod["spec"]["containers"][0].setdefault("securityContext", {}).update(runAsUser=v_uid),
            "a container's securityContext may set runAsUser only to"),
        "init-container-as-victim": (
            lambda pod: pod["spec"].setdefault("initContainers", []).append({
                "name": "sneak", "image": pod["spec"]["containers"][0]["image"], "command": ["true"],
                "securityContext": {"runAsUser": v_uid, "runAsGroup": v_gid}}),
            "a container's securityContext may set runAsUser only to"),
        "node-name": (lambda pod: pod["spec"].update(nodeName="gpu-node-1"), "spec.nodeName may not be set"),
        "tolerate-everything": (lambda pod: pod["spec"].setdefault("tolerations", []).append({"operator": "Exists"}),
                                "tolerations may name only"),
        "tolerate-control-plane": (
            lambda pod: pod["spec"].setdefault("tolerations", []).append(
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}),
            "tolerations may name only"),
    })  # fmt: skip
    return out


def queue_attacks(victim: str) -> dict[str, tuple[Callable[[dict], None], str]]:
    """Changes to the object's own labels: no queue (Kueue ignores it), another team's queue."""
    label = "kueue.x-k8s.io/queue-name"
    return {
        "no-queue": (lambda obj: obj["metadata"]["labels"].pop(label), f"metadata.labels {label} must be"),
        "victims-queue": (lambda obj: obj["metadata"]["labels"].update({label: victim}),
                          f"metadata.labels {label} must be"),
    }


def _verdict(p: Platform, who, obj: dict, phrase: str) -> str | None:
    """None when the policies refuse `obj` for the reason `phrase` names, else what they said."""
    denied = review(p, who, "CREATE", obj)
    if any(phrase in d for d in denied):
        return None
    return f"refused only for {denied}" if denied else "ADMITTED"


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_an_attackers_bare_pod_and_jobset_are_refused_on_every_stack(platforms, stack):
    p = platforms[stack]
    team, victim = second(p), p.output.team
    attacker = member(team_view(p, team))
    assert identity(p, team) != identity(p, victim)
    (session,) = build_job_in(p, SESSION, team).manifests
    (jobset,) = build_job_in(p, "two-nodes", team).objects("JobSet")
    # unchanged, the team's own objects are admitted: every refusal below is the change's
    assert review(p, attacker, "CREATE", session) == []
    assert review(p, attacker, "CREATE", jobset) == []
    found = attacks(p, victim)
    assert len([a for a in found if a.startswith("root-")]) >= 2
    broke = {}
    for name, (change, phrase) in found.items():
        pod = copy.deepcopy(session)
        change(pod)
        js = copy.deepcopy(jobset)
        change(js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
        for what, obj in ((f"Pod {name}", pod), (f"JobSet {name}", js)):
            if (verdict := _verdict(p, attacker, obj, phrase)) is not None:
                broke[what] = verdict
    for name, (change, phrase) in queue_attacks(victim).items():
        for obj in (session, jobset):
            bad = copy.deepcopy(obj)
            change(bad)
            if (verdict := _verdict(p, attacker, bad, phrase)) is not None:
                broke[f"{obj['kind']} {name}"] = verdict
    assert broke == {}, f"{stack}: {len(broke)} attacks not refused as they should be: {broke}"
    # the policy knows each team's identity from its namespace, as the stack output names it
    for t in (team, victim):
        labels = namespace_labels(p, t)
        assert (int(labels[TEAM_UID_LABEL]), int(labels[TEAM_GID_LABEL])) == identity(p, t)
    # the error names the team's own values, which the attacker can use instead
    pod = copy.deepcopy(session)
    pod["spec"]["securityContext"]["runAsUser"] = identity(p, victim)[0]
    uid, gid = identity(p, team)
    assert f"runAsUser {uid}, runAsGroup {gid}" in " ".join(review(p, attacker, "CREATE", pod))


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_every_job_pod_is_admitted_and_meets_pod_security_restricted(platforms, stack):
    p = platforms[stack]
    for team in [t.name for t in p.output.teams]:
        labels = namespace_labels(p, team)
        assert labels[PSA_ENFORCE] == "restricted", f"{stack}: {team} enforces {labels[PSA_ENFORCE]}"
        who = member(team_view(p, team))
        for shape in ALL_SHAPES:
            job = build_job_in(p, shape, team)
            if job is None:
                continue
            for obj in job.manifests:
                assert review(p, who, "CREATE", obj) == [], (team, shape, obj["kind"])
            for name, template in job.pod_templates():
                assert violations(template) == [], (team, shape, name)
    # the platform's own pods in team namespaces (TensorBoard) meet the level too
    teams = {n["metadata"]["name"] for n in p.kube_objects("Namespace") if TEAM_LABEL in n["metadata"]["labels"]}
    own = [o for o in p.kube_objects() if o["kind"] in ("StatefulSet", "Deployment", "Job", "DaemonSet")
           and o["metadata"].get("namespace") in teams]
    assert {o["metadata"]["namespace"] for o in own if o["kind"] == "StatefulSet"} == teams  # a TensorBoard each
    for obj in own:
        assert violations(obj["spec"]["template"]) == [], (obj["kind"], obj["metadata"]["name"])
    # and the check can fail: a job pod as the baseline level alone would take it
    template = copy.deepcopy(build_job_in(p, "two-nodes", p.output.team).pod_templates()[0][1])
    template["spec"]["securityContext"].pop("seccompProfile")
    template["spec"]["containers"][0]["securityContext"]["capabilities"] = {}
    assert len(violations(template)) == 2 and violations(template, "baseline") == []


# --- AWS: the EFS file-system policy --------------------------------------------------------------


def efs_allows(policy: dict, action: str, *, tls: bool, access_point: str | None, via_mount_target: bool = True) -> bool:
    """IAM's evaluation for one anonymous NFS client's request (IAM User Guide, "Policy evaluation
    logic": an explicit Deny wins, then an Allow, else the implicit deny; EFS applies it to the
    file-system policy once one is set), over the condition operators the policy uses."""
    context = {"aws:SecureTransport": str(tls).lower(),
               "elasticfilesystem:AccessedViaMountTarget": str(via_mount_target).lower()}
    if access_point is not None:
        context["elasticfilesystem:AccessPointArn"] = access_point

    def matches(statement: dict) -> bool:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if "*" not in actions and action not in actions:
            return False
        for op, conds in (statement.get("Condition") or {}).items():
            assert op in ("Bool", "StringEquals"), f"operator {op} not modelled"
            for key, want in conds.items():
                want = want if isinstance(want, list) else [want]
                if key not in context or context[key] not in [str(w).lower() if op == "Bool" else w for w in want]:
                    return False
        return True

    effects = [s["Effect"] for s in policy["Statement"] if matches(s)]
    return "Deny" not in effects and "Allow" in effects


@pytest.mark.parametrize("stack", [s for s in STACK_NAMES if s.startswith("aws-")])
def test_efs_lets_a_client_mount_only_through_a_teams_access_point_over_tls(platforms, stack):
    p = platforms[stack]
    systems = p.resources(":efs/fileSystem:FileSystem")
    if not systems:
        pytest.skip(f"{stack} has no EFS")
    (policy,) = [json.loads(r["inputs"]["policy"]) for r in p.resources(":efs/fileSystemPolicy:FileSystemPolicy")]
    points = {r["inputs"]["rootDirectory"]["path"]: r for r in p.resources(":efs/accessPoint:AccessPoint")}
    assert {f"/teams/{t.name}" for t in p.output.teams} == set(points)
    from infra.render_mocks import fake_id as _fake_id

    arns = [a for s in policy["Statement"] for a in (s.get("Condition", {}).get("StringEquals", {})
                                                      .get("elasticfilesystem:AccessPointArn") or [])]
    # the teams' access points, by the ids the engine gave them, and no other
    assert sorted(a.rpartition(":access-point/")[2] for a in arns) == sorted(
        _fake_id(r["name"], "fsap") for r in points.values())
    for action in ("elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"):
        for ap in arns:
            assert efs_allows(policy, action, tls=True, access_point=ap)
            assert not efs_allows(policy, action, tls=False, access_point=ap)
        assert not efs_allows(policy, action, tls=True, access_point=None)  # the root, any uid
    assert not efs_allows(policy, "elasticfilesystem:ClientRootAccess", tls=True, access_point=arns[0])


# --- non-AWS stacks: each team's own object-store key pair -----------------------------------------

STORE = {"endpoint": "https://minio.lab.internal:9000", "bucket": "alchemist-data", "region": "lab-1",
         "accessKeyId": "alchemist-research", "cidrs": ["10.20.0.9/32"]}
NOT_AWS = [s for s in STACK_NAMES if not s.startswith("aws-")]


def _with_store(stack: str, teams_keys: dict[str, str] | None, team_secrets: dict[str, str] | None,
                tmp_path) -> dict[str, Any]:
    """A render job for `stack` with an S3-compatible store; `teams_keys` gives teams their own key ids."""
    import yaml
    from system_tier import KUBECONFIG, REGISTRY_PASSWORD, STACKS, deployer_sets, existing_stack_config

    if stack == "onprem-existing":
        config = existing_stack_config()
        secrets = {"alchemist:kubeconfig": KUBECONFIG, "alchemist:registryPassword": REGISTRY_PASSWORD}
    else:
        config = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())["config"]
        secrets = {}
    config["alchemist:objectStore"] = dict(STORE)
    if teams_keys:
        config["alchemist:teams"] = [{**t, **({"objectStoreAccessKeyId": teams_keys[t["name"]]}
                                              if t["name"] in teams_keys else {})}
                                     for t in config["alchemist:teams"]]  # fmt: skip
    secrets["alchemist:objectStoreSecretKey"] = "stack-secret-key-never-shown-31415"
    if team_secrets:
        secrets["alchemist:objectStoreTeamSecretKeys"] = json.dumps(team_secrets)
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return {"stack_file": path, "stack": stack, "secrets": secrets,
            "sets": {} if stack == "onprem-existing" else deployer_sets(stack)}


@pytest.fixture(scope="module")
def store_renders(tmp_path_factory):
    from system_tier import render_many

    tmp = tmp_path_factory.mktemp("store")
    jobs = {}
    for stack in NOT_AWS:
        jobs[f"{stack}/own"] = _with_store(stack, {"applied": "alchemist-applied"},
                                           {"applied": "applied-secret-key-never-shown-27182"}, tmp / "own")
        jobs[f"{stack}/shared"] = _with_store(stack, None, None, tmp / "shared")
    return render_many(jobs)


@pytest.mark.parametrize("stack", NOT_AWS)
def test_each_team_holds_its_own_object_store_key_pair(store_renders, stack):
    from infra.object_store import ACCESS_KEY_ANNOTATION

    own = store_renders[f"{stack}/own"]
    assert own["error"] is None, own["error"]
    secrets = {r["inputs"]["metadata"]["namespace"]: r["inputs"] for r in own["resources"]
               if r["type"] == "kubernetes:core/v1:Secret" and r["inputs"]["metadata"]["name"] == "alchemist-job-object-store"}
    teams = [t["name"] for t in own["outputs"]["alchemist"]["teams"]]
    assert sorted(secrets) == sorted(teams) and len(teams) >= 2
    held = {ns: s["metadata"]["annotations"][ACCESS_KEY_ANNOTATION] for ns, s in secrets.items()}
    assert len(set(held.values())) == len(held), f"{stack}: teams share a key pair: {held}"
    assert held == {"research": "alchemist-research", "applied": "alchemist-applied"}
    for text in (own["_stdout"], own["_stderr"], json.dumps(own["resources"])):
        assert "never-shown" not in text
    # one key pair for two teams (what every stack rendered before) is refused, in one line
    shared = store_renders[f"{stack}/shared"]
    assert shared["error"] is not None and "\n" not in shared["error"].strip()
    assert "alchemist:teams[1].objectStoreAccessKeyId is missing" in shared["error"]
    assert "never-shown" not in shared["error"]
