"""Every team reaches the job half (issue 36.2): the real program's `alchemist` output carries
each configured team's namespace, LocalQueue, uid/gid, object-store prefix and, where the
provider gives one, its own credential (a secret); and a second team's job, rendered by the
job library from that output, lands in its own namespace as its own identity."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from infra_helpers import KUBECONFIG, REGISTRY_PASSWORD, SHIPPED, STACKS, deployer_sets, resources

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec
from infra.config import StackConfig, parse
from infra.object_store import team_prefix
from infra.render import load_stack_config
from infra.team_namespace import SUBMITTER_ROLE

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RUN = "digits-20260101-000000-00000002"
STACKS_WITH_TEAMS = [*SHIPPED, "secret:existing"]
OWN_CREDENTIAL = ("onprem", "existing")  # providers that give each team its own kubeconfig


def config_of(name: str, existing_stack_file: Path) -> StackConfig:
    """The stack config the render was given, through the program's own parser."""
    if name == "secret:existing":
        raw, secret = load_stack_config(
            existing_stack_file,
            {},
            {"alchemist:kubeconfig": KUBECONFIG, "alchemist:registryPassword": REGISTRY_PASSWORD},
        )
    else:
        raw, secret = load_stack_config(STACKS / f"Pulumi.{name}.yaml", deployer_sets(name), {})
    return parse(raw, secret)


def kube(render: dict, kind: str) -> list[dict]:
    return [
        r["inputs"]
        for r in resources(render)
        if r["type"].startswith("kubernetes:") and r["type"].endswith(f":{kind}")
    ]


def in_namespace(render: dict, kind: str, ns: str) -> list[dict]:
    return [o for o in kube(render, kind) if o["metadata"].get("namespace") == ns]


@pytest.mark.parametrize("name", STACKS_WITH_TEAMS)
def test_the_output_carries_every_team(renders, existing_stack_file, name):
    r, cfg = renders[name], config_of(name, existing_stack_file)
    assert len(cfg.teams) >= 2, "every shipped stack configures a second team"
    out = StackOutput.parse(r["outputs"]["alchemist"], name)
    assert out.team == cfg.default_team.name
    assert [t.name for t in out.teams] == [t.name for t in cfg.teams]
    for i, team in enumerate(out.teams):
        assert team.namespace == team.name and [
            n for n in kube(r, "Namespace") if n["metadata"]["name"] == team.namespace
        ]
        (lq,) = in_namespace(r, "LocalQueue", team.namespace)
        assert team.queue == lq["metadata"]["name"]
        assert (team.uid, team.gid) == cfg.identity(team.name)
        assert team.object_store_prefix == (team_prefix(team.name) if out.object_store else None)
        raw = r["outputs"]["alchemist"]["teams"][i]
        if out.provider in OWN_CREDENTIAL:  # its own, and only ever as a secret
            assert raw["kubeconfig"] == "[secret]"
            assert f"alchemist.teams[{i}].kubeconfig" in r["secret_outputs"]
        else:  # kind's kubeconfig or each user's own AWS identity serves every team
            assert "kubeconfig" not in raw
    # the default team's fields stay where they were
    first = out.teams[0]
    assert (out.namespace, out.queue, out.shared_fs.uid, out.shared_fs.gid) == (
        first.namespace,
        first.queue,
        first.uid,
        first.gid,
    )


@pytest.mark.parametrize("name", STACKS_WITH_TEAMS)
def test_a_second_teams_job_renders_in_its_own_namespace_as_its_own_identity(
    renders, existing_stack_file, name
):
    r, cfg = renders[name], config_of(name, existing_stack_file)
    second = cfg.teams[1].name
    out = StackOutput.parse(r["outputs"]["alchemist"], name)
    spec = load_spec(EXAMPLES / "digits.yaml")
    manifests = KubernetesScheduler(out, team=second).dryrun(spec, EXAMPLES, run_id=RUN).manifests
    assert {m["metadata"]["namespace"] for m in manifests} == {second}
    (js,) = [m for m in manifests if m["kind"] == "JobSet"]
    (lq,) = in_namespace(r, "LocalQueue", second)
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == lq["metadata"]["name"]
    uid, gid = cfg.identity(second)
    assert (uid, gid) != cfg.identity(cfg.default_team.name)
    for rj in js["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]["spec"]
        sc = pod["securityContext"]
        assert (sc["runAsUser"], sc["runAsGroup"], sc["fsGroup"]) == (uid, gid, gid)
        claims = {
            v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
        }
        assert claims and claims <= {
            c["metadata"]["name"] for c in in_namespace(r, "PersistentVolumeClaim", second)
        }
        for ref in pod.get("imagePullSecrets", []):
            assert in_namespace(r, "Secret", second) and ref["name"] in {
                s["metadata"]["name"] for s in in_namespace(r, "Secret", second)
            }


def test_on_prem_each_team_gets_its_own_submitter_certificate(renders, existing_stack_file):
    r, cfg = renders["onprem-lab"], config_of("onprem-lab", existing_stack_file)
    scripts = [
        x["inputs"]["create"]
        for x in resources(r, "command:remote:Command")
        if "team-credentials" in x["name"]
    ]
    subjects = {
        m[2]: tuple(re.findall(r"/O=([^/]+)", m[1]))
        for m in (re.search(r'-subj "([^"]*/CN=alchemist-submitter-([a-z0-9-]+))"', s) for s in scripts)
        if m
    }
    assert set(subjects) == {t.name for t in cfg.teams}
    for team in cfg.teams:  # the certificate's groups are those the team's RoleBinding binds
        (binding,) = [
            b for b in in_namespace(r, "RoleBinding", team.name) if b["roleRef"]["name"] == SUBMITTER_ROLE
        ]
        assert subjects[team.name] == tuple(s["name"] for s in binding["subjects"] if s["kind"] == "Group")


def test_on_an_existing_cluster_each_team_gets_its_own_service_account_token(renders, existing_stack_file):
    r, cfg = renders["secret:existing"], config_of("secret:existing", existing_stack_file)
    for team in cfg.teams:
        ns = team.name
        assert [
            a for a in in_namespace(r, "ServiceAccount", ns) if a["metadata"]["name"] == "alchemist-submitter"
        ]
        bound = [
            b
            for b in in_namespace(r, "RoleBinding", ns)
            if b["roleRef"]["name"] == SUBMITTER_ROLE
            and {"kind": "ServiceAccount", "name": "alchemist-submitter", "namespace": ns} in b["subjects"]
        ]
        assert len(bound) == 1, ns
        (token,) = [
            s for s in in_namespace(r, "Secret", ns) if s.get("type") == "kubernetes.io/service-account-token"
        ]
        assert token["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "alchemist-submitter"
