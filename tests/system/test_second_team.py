"""Class (e) of issue 36: a second team of every stack, from its config to a job in its namespace.

The second team's job is what the job library submits with `--team` (`KubernetesScheduler(
output, team=...)`) from the stack's real `alchemist` output, never the first team's output
renamed. It is judged like the first team's, against the platform's real objects: admitted by
the admission policies and RBAC for a member of that team (and by no other team's member),
admitted by Kueue through that namespace's LocalQueue, run as the identity that owns that
team's subtree of the shared file system, under the object-store prefix that team's role may
use, reached with that team's own credential where the provider gives one.
"""

from __future__ import annotations

import json
import re

import pytest
from system_tier import SESSION, STACK_NAMES, Platform, build_job_in, team_view
from test_admission_rbac import _plural, member, rbac, review
from test_scheduling import admit_job

from infra.team_credential import SUBMITTER_ACCOUNT
from infra.team_namespace import SUBMITTER_ROLE

SHAPES = ("two-nodes", "async-two-servers", "s3-data", SESSION)
OWN_CREDENTIAL = ("onprem", "existing")  # the providers that give each team its own kubeconfig


def second(platform: Platform) -> str:
    teams = platform.output.teams
    assert len(teams) >= 2 and teams[0].name == platform.output.team, f"{platform.name}: one team in the output"
    return teams[1].name


def subtree_owner(platform: Platform, team: str) -> tuple[int, int]:
    """Who owns the team's subtree `/teams/<team>` as the platform makes it: the EFS access
    point's identity, or what the prepare Job chowns it to."""
    path = f"teams/{team}"
    points = [r["inputs"] for r in platform.resources(":AccessPoint")
              if r["inputs"]["rootDirectory"]["path"] == f"/{path}"]
    if points:
        (ap,) = points
        return ap["posixUser"]["uid"], ap["posixUser"]["gid"]
    (job,) = [j for j in platform.kube_objects("Job") if j["metadata"]["name"] == "alchemist-shared-prepare"]
    script = json.dumps(job["spec"]["template"]["spec"]["containers"])
    owners = set(re.findall(rf"chown (\d+):(\d+) \S*/{re.escape(path)}\b", script))
    assert len(owners) == 1, f"{platform.name}: {path} has owners {owners}"
    ((uid, gid),) = owners
    return int(uid), int(gid)


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_a_second_teams_jobs_are_in_its_namespace_as_the_owner_of_its_subtree(platforms, stack):
    p = platforms[stack]
    team = second(p)
    uid, gid = subtree_owner(p, team)
    assert (uid, gid) != subtree_owner(p, p.output.team), f"{stack}: two teams share an identity"
    for shape in SHAPES:
        job = build_job_in(p, shape, team)
        if job is None:
            continue
        assert {m["metadata"]["namespace"] for m in job.manifests} == {team}, shape
        claims = {c["metadata"]["name"] for c in p.kube_objects("PersistentVolumeClaim")
                  if c["metadata"]["namespace"] == team}
        for name, pod in job.pod_templates():
            sc = pod["spec"]["securityContext"]
            assert (sc["runAsUser"], sc["runAsGroup"]) == (uid, gid), (shape, name)
            assert sc.get("fsGroup", gid) == gid, (shape, name)
            mounted = {v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                       if "persistentVolumeClaim" in v}
            assert mounted and mounted <= claims, (shape, name)


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_kueue_admits_a_second_teams_job_through_its_own_local_queue(platforms, stack):
    p = platforms[stack]
    team = second(p)
    job = build_job_in(p, "two-nodes", team)
    queues = {q["metadata"]["name"]: q["spec"]["clusterQueue"] for q in p.kube_objects("LocalQueue")
              if q["metadata"]["namespace"] == team}
    for m in job.objects("JobSet"):
        assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] in queues
    results = admit_job(p, job)
    assert results
    for _, admission in results:
        assert admission.admitted, f"{stack}: {admission.reason}"


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_a_member_of_the_second_team_may_submit_it_and_a_member_of_the_first_may_not(platforms, stack):
    p = platforms[stack]
    team = second(p)
    theirs, ours = member(team_view(p, team)), member(p)
    assert set(theirs.groups) != set(ours.groups), f"{stack}: both teams' members are one group"
    authz = rbac(p)
    for shape in SHAPES:
        job = build_job_in(p, shape, team)
        if job is None:
            continue
        for obj in job.manifests:
            group = obj["apiVersion"].rpartition("/")[0]
            resource = _plural(obj["kind"])
            assert authz.allows(theirs, "create", group, resource, team), (shape, obj["kind"])
            assert not authz.allows(ours, "create", group, resource, team), (shape, obj["kind"])
            assert review(p, theirs, "CREATE", obj) == [], (shape, obj["kind"])


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_a_second_teams_data_is_under_the_prefix_its_own_role_may_use(platforms, stack):
    p = platforms[stack]
    team = second(p)
    out = p.output.for_team(team)
    if out.object_store is None:
        pytest.skip(f"{stack} has no object store")
    assert out.object_store.prefix == f"{team}/" != p.output.object_store.prefix
    job = build_job_in(p, "s3-data", team)
    assert f"s3://{out.object_store.bucket}/{out.object_store.prefix}" in job.spec.data.source
    if out.provider != "aws":
        return  # an S3-compatible service's keys are the stack's: the prefix is a convention there
    # the team's job ServiceAccount is annotated with the team's own role, whose policy is its prefix
    (patch,) = [r for r in p.resources(":ServiceAccountPatch") if r["inputs"]["metadata"]["namespace"] == team]
    role_arn = patch["inputs"]["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    (role,) = [r for r in p.resources(":Role") if r["type"].startswith("aws:") and r["name"].endswith(f"-{team}-role")]
    assert role_arn.rpartition(":role/")[2] == role["name"]  # the mocks name a role's ARN after it
    (policy,) = [r for r in p.resources(":RolePolicy") if r["inputs"]["role"] == f"{role['name']}-id"]
    statements = json.loads(policy["inputs"]["policy"])["Statement"]
    prefixes = {v for s in statements for v in s.get("Condition", {}).get("StringLike", {}).get("s3:prefix", [])}
    objects = {res for s in statements for res in s["Resource"] if "/" in res.partition(":::")[2]}
    assert prefixes == {f"{out.object_store.prefix}*"}
    assert objects and all(o.endswith(f"/{out.object_store.prefix}*") for o in objects)


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_a_second_team_reaches_the_cluster_with_its_own_credential(platforms, stack):
    p = platforms[stack]
    team = second(p)
    raw = p.render["outputs"]["alchemist"]
    entry = next(t for t in raw["teams"] if t["name"] == team)
    if p.output.provider not in OWN_CREDENTIAL:  # kind's kubeconfig, or each user's own IAM identity
        assert "kubeconfig" not in entry
        return
    i = raw["teams"].index(entry)
    assert entry["kubeconfig"] == "[secret]" and f"alchemist.teams[{i}].kubeconfig" in p.render["secret_outputs"]
    bindings = [b for b in p.kube_objects("RoleBinding") if b["metadata"]["namespace"] == team
                and b["roleRef"]["name"] == SUBMITTER_ROLE]
    if p.output.provider == "existing":  # the team's own ServiceAccount, bound in its namespace only
        sa = {"kind": "ServiceAccount", "name": SUBMITTER_ACCOUNT, "namespace": team}
        assert [b for b in bindings if sa in b["subjects"]]
        return
    # k3s: a client certificate whose groups are those the team's RoleBinding binds
    groups = {s["name"] for b in bindings for s in b["subjects"] if s["kind"] == "Group"}
    subjects = [re.search(r'-subj "([^"]*)/CN=alchemist-submitter-' + re.escape(team) + '"', r["inputs"]["create"])
                for r in p.resources(":Command") if "team-credentials" in r["name"]]
    (subject,) = [s for s in subjects if s]
    assert set(re.findall(r"/O=([^/]+)", subject[1])) == groups
