"""Job spec: overrides reach the typed config, the resolved spec round-trips, every example is
valid, a dry run starts nothing, and the early agent interpreter is wanted only for a local run.
(Bad input through `alchemist run`, which starts that interpreter, is an integration test.)"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from alchemist_jobs import cli
from alchemist_jobs.spec import JobSpec, load_spec
from tests.conftest import EXAMPLES

GOOD = textwrap.dedent("""\
    name: t
    task: {builtin: digits}
    procs_per_node: 2
    hyper: {batch_size: 16, epochs: 1}
""")


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_overrides_reach_the_typed_config(tmp_path):
    spec = load_spec(
        write(tmp_path, GOOD),
        ["hyper.lr=0.2", "algorithm.name=bmuf", "algorithm.tau=4", "env.FOO=bar", "max_restarts=0"],
    )
    assert spec.hyper.lr == 0.2 and spec.algorithm.name == "bmuf" and spec.algorithm.tau == 4
    assert spec.env == {"FOO": "bar"} and spec.max_restarts == 0
    assert spec.world_size == 2 and spec.global_batch == 32


def test_resolved_spec_round_trips(tmp_path):
    spec = load_spec(EXAMPLES / "digits.yaml")
    again = JobSpec.model_validate(yaml.safe_load(spec.to_yaml()))
    assert again == spec


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_spec_is_valid(path):
    load_spec(path)


def test_dry_run_prints_the_processes_and_starts_nothing(tmp_path, home, capsys):
    assert cli.main(["run", str(EXAMPLES / "digits.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "-m alchemist_jobs.agent" in out and "--nproc-per-node=2" in out
    assert "alchemist_jobs.runtime.bootstrap trainer" in out
    assert not home.exists()


@pytest.mark.parametrize(
    "argv,wanted",
    [
        (["run", "job.yaml"], True),
        (["run", "job.yaml", "--stack", "local"], True),
        (["run", "job.yaml", "--stack=local", "--quiet"], True),
        (["run", "job.yaml", "--stack", "dev"], False),
        (["run", "job.yaml", "--stack=aws-us-west-2"], False),
        (["run", "job.yaml", "--dry-run"], False),
        (["run", "job.yaml", "--detach"], False),
        (["run", "--help"], False),
    ],
)
def test_the_early_agent_interpreter_starts_only_for_a_local_run(argv, wanted, monkeypatch):
    from alchemist_jobs import warm_agent

    started = []
    monkeypatch.setattr(warm_agent, "WarmAgent", lambda argv=None: started.append(argv) or object())
    monkeypatch.delenv("ALCHEMIST_WARM_AGENT", raising=False)
    warm_agent.start_early(argv[1:])
    assert bool(started) == wanted and (warm_agent.take_early() is not None) == wanted
    monkeypatch.setenv("ALCHEMIST_WARM_AGENT", "0")
    warm_agent.start_early(argv[1:])
    assert warm_agent.take_early() is None
