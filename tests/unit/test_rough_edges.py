"""The first hour's rough edges (issue 35, item 5), each answered as a user would expect: a
stack typo names the stacks there are, `stack list` works from an installed package, `plan`
does not take loopback for a link between nodes, a big workdir is named with its size, a
misspelt field gets a "did you mean", and a quantity is explained in words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alchemist_jobs import cli
from alchemist_jobs.errors import UserError
from alchemist_jobs.planner import facts
from tests.conftest import EXAMPLES, REPO

SHIPPED = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (REPO / "stacks").glob("Pulumi.*.yaml"))


def _one_line_error(capsys, argv: list[str]) -> str:
    assert cli.main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert "Traceback" not in cap.err and len(err.splitlines()) == 1, cap.err
    return err


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory outside any checkout, as after `pip install alchemist`; no Pulumi CLI."""
    d = tmp_path / "elsewhere"
    (d / "bin").mkdir(parents=True)
    monkeypatch.chdir(d)
    monkeypatch.setenv("PATH", str(d / "bin"))
    monkeypatch.delenv("ALCHEMIST_PULUMI_DIR", raising=False)
    return d


# --- a stack typo ---------------------------------------------------------------------------


def test_a_stack_typo_outside_a_checkout_names_the_stacks_not_the_pulumi_cli(capsys, home, elsewhere):
    err = _one_line_error(capsys, ["run", str(EXAMPLES / "digits.yaml"), "--stack", "devv", "--dry-run"])
    assert err.startswith("error: --stack devv: no such stack"), err
    assert "accepted: local" in err and "ALCHEMIST_PULUMI_DIR" in err, err
    assert "Pulumi CLI" not in err and "not on PATH" not in err, err


def test_a_stack_typo_names_the_checkouts_stacks_from_anywhere(capsys, home, elsewhere, monkeypatch):
    monkeypatch.setenv("ALCHEMIST_PULUMI_DIR", str(REPO))
    err = _one_line_error(capsys, ["run", str(EXAMPLES / "digits.yaml"), "--stack", "devv", "--dry-run"])
    assert err == f"error: --stack devv: no such stack; accepted: {', '.join(['local', *SHIPPED])}"


# --- stack list from an installed package ------------------------------------------------------


def test_stack_list_outside_a_checkout_lists_local(capsys, elsewhere):
    assert cli.main(["stack", "list", "--json"]) == 0
    cap = capsys.readouterr()
    assert [s["name"] for s in json.loads(cap.out)] == ["local"]
    assert len(cap.err.strip().splitlines()) == 1 and "ALCHEMIST_PULUMI_DIR" in cap.err, cap.err
    assert cli.main(["stack", "list"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["local"]


# --- plan and a loopback measurement ---------------------------------------------------------


def test_plan_does_not_take_a_loopback_run_for_the_link_between_nodes(tmp_path):
    run = tmp_path / "runs" / "job-20261201-000000-00000001"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"stack": "local", "state": "succeeded"}))
    (run / "result.json").write_text(
        json.dumps(dict(world_size=2, algorithm="sync", communication=dict(sent_bytes=8e8, seconds=2.0)))
    )
    with pytest.raises(UserError) as e:
        facts.cluster_facts(
            workers_per_node=1,
            link=None,
            latency_us=0,
            stack=None,
            runs_root=tmp_path / "runs",
            job_name="job",
        )
    line = str(e.value)
    assert "\n" not in line and line.startswith("--link: ")
    assert run.name in line and "loopback" in line and "--link 25gbit" in line, line


# --- a big workdir ----------------------------------------------------------------------------


def test_a_big_workdir_is_named_with_its_size_when_copied(tmp_path, capsys, home):
    (tmp_path / "train.py").write_text("print('hello')\n")
    with open(tmp_path / "weights.bin", "wb") as f:  # sparse: 17 MiB that take no disk
        f.truncate(17 << 20)
    assert cli.main(["run", str(tmp_path / "train.py"), "--dry-run"]) == 0
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1, warnings
    assert "17 MiB" in warnings[0] and "weights.bin" in warnings[0], warnings
    assert ".alchemistignore" in warnings[0]


def test_a_small_workdir_says_nothing(tmp_path, capsys, home):
    (tmp_path / "train.py").write_text("print('hello')\n")
    (tmp_path / "data.bin").write_bytes(b"\0" * (1 << 20))
    assert cli.main(["run", str(tmp_path / "train.py"), "--dry-run"]) == 0
    assert "warning" not in capsys.readouterr().err


# --- spec fields and quantities ---------------------------------------------------------------


@pytest.mark.parametrize(
    "yaml_text, field, suggestion",
    [
        ("name: x\ntask: {builtin: digits}\nprocs_per_nodes: 2\n", "procs_per_nodes", "procs_per_node"),
        ("name: x\ntask: {builtin: digits}\nhyper: {lrr: 0.1}\n", "hyper.lrr", "lr"),
        ("name: x\ntask: {builtin: digits}\nresources: {memroy: 2Gi}\n", "resources.memroy", "memory"),
    ],
)
def test_a_misspelt_field_gets_did_you_mean(tmp_path, capsys, home, yaml_text, field, suggestion):
    (tmp_path / "job.yaml").write_text(yaml_text)
    err = _one_line_error(capsys, ["run", str(tmp_path / "job.yaml"), "--dry-run"])
    assert f": {field}: " in err and f"did you mean {suggestion}?" in err, err


def test_a_field_like_no_other_gets_no_guess(tmp_path, capsys, home):
    (tmp_path / "job.yaml").write_text("name: x\ntask: {builtin: digits}\nzzqq: 1\n")
    err = _one_line_error(capsys, ["run", str(tmp_path / "job.yaml"), "--dry-run"])
    assert ": zzqq: " in err and "no such field" in err and "did you mean" not in err, err


@pytest.mark.parametrize("value", ["2GB", "lots", "-1Gi"])
def test_a_bad_quantity_is_explained_in_words(tmp_path, capsys, home, value):
    err = _one_line_error(
        capsys, ["run", str(EXAMPLES / "digits.yaml"), "--dry-run", "--set", f"resources.memory={value}"]
    )
    assert f"resources.memory: '{value}' is invalid" in err, err
    assert "a Kubernetes quantity such as 2Gi, 512Mi or 1.5" in err, err
    assert "^" not in err and "[0-9]" not in err, err
