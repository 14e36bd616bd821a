"""A team other than the stack's default: `--team NAME` (or ALCHEMIST_TEAM) on every command
that acts on a cluster stack puts the job in that team's namespace and queue, as its identity,
under its object-store prefix, with its own credential; an unknown team is one line, exit 2."""

from __future__ import annotations

import json

import pytest

import alchemist_jobs.kubernetes.client as client
from alchemist_jobs.contract import StackOutput
from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec
from tests.unit.k8s.conftest import EXAMPLES, outputs

RUN = "digits-20260101-000000-00000001"


def _output(stack: str, **over) -> StackOutput:
    data = json.loads(outputs(stack).read_text())
    data.update(over)
    return StackOutput.parse(data, stack)


def _pods(manifests: list[dict]) -> list[dict]:
    (js,) = [m for m in manifests if m["kind"] == "JobSet"]
    return [rj["template"]["spec"]["template"] for rj in js["spec"]["replicatedJobs"]]


def test_a_second_teams_job_is_its_own_namespace_queue_and_identity():
    out = _output("onprem-lab")
    spec = load_spec(EXAMPLES / "digits.yaml")
    theirs = KubernetesScheduler(out, team="applied").dryrun(spec, EXAMPLES, run_id=RUN).manifests
    ours = KubernetesScheduler(out).dryrun(spec, EXAMPLES, run_id=RUN).manifests
    assert {m["metadata"]["namespace"] for m in ours} == {"research"}
    assert {m["metadata"]["namespace"] for m in theirs} == {"applied"}
    (js,) = [m for m in theirs if m["kind"] == "JobSet"]
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "applied"
    for pod in _pods(theirs):
        sc = pod["spec"]["securityContext"]
        assert (sc["runAsUser"], sc["runAsGroup"], sc["fsGroup"]) == (1001, 1001, 1001)
    for pod in _pods(ours):
        assert pod["spec"]["securityContext"]["runAsUser"] == 1000


def test_a_team_gets_its_own_prefix_and_credential_and_the_default_keeps_the_stacks():
    store = {"bucket": "lab-data", "endpoint": "https://s3.lab.internal", "prefix": "research/"}
    data = json.loads(outputs("onprem-lab").read_text())
    data["object_store"] = store
    for t in data["teams"]:
        t["object_store_prefix"] = f"{t['name']}/"
    out = StackOutput.parse(data, "onprem-lab")
    applied = out.for_team("applied")
    assert applied.object_store.prefix == "applied/" and out.object_store.prefix == "research/"
    assert applied.kubeconfig.get_secret_value() == data["teams"][1]["kubeconfig"]
    assert out.for_team(None) is out and out.for_team("research") is out
    # kind and EKS give every team the stack's one access: the team's own identity comes from
    # its RoleBinding's groups (kind: the deployer's admin kubeconfig; EKS: the user's own IAM).
    dev = _output("dev")
    assert dev.for_team("applied").kubeconfig == dev.kubeconfig
    aws = _output("aws-us-west-2")
    assert aws.for_team("applied").auth == aws.auth and aws.for_team("applied").namespace == "applied"


def test_the_secret_of_a_team_never_shows():
    out = _output("onprem-lab")
    text = repr(out) + str(out.model_dump()) + repr(out.for_team("applied"))
    assert "fake-secret-token-onprem" not in text


def test_an_unknown_team_names_the_teams_there_are():
    with pytest.raises(UserError) as e:
        KubernetesScheduler(_output("dev"), team="nope")
    assert str(e.value) == "--team nope: stack dev has no such team; accepted: research, applied"
    # an output from before teams were exported: its one team is its namespace
    old = json.loads(outputs("dev").read_text())
    del old["team"], old["teams"]
    legacy = StackOutput.parse(old, "dev")
    assert legacy.for_team("research") is legacy
    with pytest.raises(UserError, match=r"^--team applied: stack dev has no such team; accepted: research$"):
        legacy.for_team("applied")


def test_teams_that_disagree_with_the_top_level_break_the_contract():
    data = json.loads(outputs("dev").read_text())
    data["teams"][0]["uid"] = 4242
    with pytest.raises(UserError, match="differs from the top-level"):
        StackOutput.parse(data, "dev")
    data = json.loads(outputs("dev").read_text())
    data["team"] = "ops"
    with pytest.raises(UserError, match="must name one of `teams`"):
        StackOutput.parse(data, "dev")


@pytest.fixture
def connected(monkeypatch, fake):
    """The stack outputs the CLI connected with (the fake API behind them)."""
    seen: list[StackOutput] = []

    def connect(out: StackOutput):
        seen.append(out)
        return fake.connector(out)
    monkeypatch.setattr(client, "connect", connect)
    return seen


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_cli_submits_as_the_chosen_team(run_cli, fake, connected, monkeypatch, how):
    args = ["submit", "examples/digits.yaml", "--stack", "onprem-lab", "--outputs", outputs("onprem-lab")]
    if how == "flag":
        args += ["--team", "applied"]
        monkeypatch.setenv("ALCHEMIST_TEAM", "research")  # the flag wins over the environment
    else:
        monkeypatch.setenv("ALCHEMIST_TEAM", "applied")
    code, out, err = run_cli(*args)
    assert code == 0, err
    assert {kw["namespace"] for m, kw in fake.calls if "namespaced" in m} == {"applied"}
    assert [o.namespace for o in connected] == ["applied"]
    assert "applied-24680" in connected[0].kubeconfig.get_secret_value()  # its own certificate
    assert "fake-secret-token" not in out + err


@pytest.mark.parametrize("command", [["list"], ["status", "digits"], ["logs", "digits"],
                                     ["cancel", "digits"], ["interactive", "--stop"]])
def test_every_command_acts_in_the_chosen_teams_namespace(run_cli, fake, connected, command):
    run_cli(*command, "--stack", "onprem-lab", "--outputs", outputs("onprem-lab"), "--team", "applied")
    assert connected and {o.namespace for o in connected} == {"applied"}
    assert {kw["namespace"] for m, kw in fake.calls if "namespaced" in m} <= {"applied"}


@pytest.mark.parametrize("command", [["submit", "examples/digits.yaml"], ["list"], ["status", "x"],
                                     ["logs", "x"], ["cancel", "x"], ["interactive"],
                                     ["run", "examples/digits.yaml", "--dry-run"]])
def test_an_unknown_team_through_the_cli_is_one_line_and_contacts_nothing(run_cli, fake, command):
    code, out, err = run_cli(*command, "--stack", "dev", "--outputs", outputs("dev"), "--team", "nope")
    assert (code, out) == (2, "")
    assert err == "error: --team nope: stack dev has no such team; accepted: research, applied\n"
    assert fake.calls == []


def test_an_unknown_team_in_the_environment_says_where_it_came_from(run_cli, fake, monkeypatch):
    monkeypatch.setenv("ALCHEMIST_TEAM", "nope")
    code, _, err = run_cli("list", "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 2
    assert err == "error: ALCHEMIST_TEAM=nope: stack dev has no such team; accepted: research, applied\n"


def test_the_local_stack_has_no_teams(run_cli, tmp_path, monkeypatch):
    code, _, err = run_cli("list", "--home", tmp_path, "--team", "applied")
    assert code == 2 and err.startswith("error: --team applied: the local stack has no teams")
    monkeypatch.setenv("ALCHEMIST_TEAM", "applied")  # set for the cluster stacks: local ignores it
    code, out, _ = run_cli("list", "--home", tmp_path)
    assert code == 0


def test_dry_run_names_the_teams_namespace(run_cli):
    code, out, err = run_cli("run", "examples/digits.yaml", "--dry-run", "--stack", "dev",
                             "--outputs", outputs("dev"), "--team", "applied")
    assert code == 0, err
    assert "namespace applied, Kueue queue applied" in out


def test_data_commands_use_the_chosen_teams_prefix(tmp_path, run_cli):
    from alchemist_jobs.commands.data import object_store

    data = json.loads(outputs("onprem-lab").read_text())
    data["object_store"] = {"bucket": "lab-data", "endpoint": "https://s3.lab.internal", "prefix": "research/"}
    for t in data["teams"]:
        t["object_store_prefix"] = f"{t['name']}/"
    path = tmp_path / "onprem-lab.json"
    path.write_text(json.dumps(data))
    assert object_store("onprem-lab", path).prefix == "research/"
    assert object_store("onprem-lab", path, "applied").prefix == "applied/"
    code, out, err = run_cli("data", "ls", "--stack", "onprem-lab", "--outputs", path, "--team", "nope")
    assert (code, out) == (2, "")
    assert err == "error: --team nope: stack onprem-lab has no such team; accepted: research, applied\n"


def test_a_teams_prefix_defaults_to_the_platforms_and_the_default_teams_must_agree():
    data = json.loads(outputs("dev").read_text())
    data["object_store"] = {"bucket": "lab-data", "endpoint": "https://s3.lab.internal", "prefix": "research/"}
    out = StackOutput.parse(data, "dev")  # a hand-written output naming no team's prefix
    assert out.for_team("applied").object_store.prefix == "applied/"
    data["teams"][0]["object_store_prefix"] = "applied/"
    with pytest.raises(UserError, match="differs from the top-level"):
        StackOutput.parse(data, "dev")
