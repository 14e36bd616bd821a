"""Bad input found by hand after the fuzz: each is one line naming the input and what is
accepted, exit code 2, no traceback and nothing written (issue: a run's story at any scale)."""

from __future__ import annotations

import os

import pytest

from alchemist_jobs import cli
from tests.conftest import EXAMPLES, REPO


def _one_line_error(capsys, argv: list[str]) -> str:
    assert cli.main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert "Traceback" not in cap.err and len(err.splitlines()) == 1, cap.err
    assert len(err) <= 400, err
    return err


def test_a_directory_given_as_the_spec(tmp_path, capsys, home):
    err = _one_line_error(capsys, ["run", str(tmp_path), "--dry-run"])
    assert str(tmp_path) in err and "not a regular file" in err
    assert not home.exists()


def test_cancel_when_run_json_is_a_directory(tmp_path, capsys, home):
    run = home / "runs" / "x-20260101-000000-00000001"
    (run / "run.json").mkdir(parents=True)
    (run / "spec.yaml").write_text("name: x\n")
    err = _one_line_error(capsys, ["cancel", run.name])
    assert run.name in err and "run.json" in err
    assert sorted(os.listdir(run)) == ["run.json", "spec.yaml"]  # no temporary file left


def test_stack_diff_with_a_name_too_long_for_a_file(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    err = _one_line_error(capsys, ["stack", "diff", "dev", "a" * 260])
    assert "aaaa" in err and "accepted" in err


@pytest.mark.parametrize("value", ["true", "false"])
def test_a_boolean_is_not_a_node_count(capsys, value):
    err = _one_line_error(capsys, ["run", str(EXAMPLES / "digits.yaml"), "--dry-run", "--set",
                                   f"nodes={value}"])
    assert "nodes" in err and "number" in err


def test_data_rm_names_its_positional_argument(capsys, monkeypatch):
    monkeypatch.setenv("ALCHEMIST_OBJECT_STORE", "s3://bucket/prefix")
    err = _one_line_error(capsys, ["data", "rm", "../x"])
    assert err.startswith("error: NAME '../x'") and "--name" not in err


@pytest.mark.parametrize("flags, field", [
    (["--step-ms", "10", "--model-mb", "inf"], "--model-mb"),
    (["--step-ms", "10", "--model-mb", "nan"], "--model-mb"),
    (["--step-ms", "10", "--model-mb", "1e308"], "--model-mb"),
    (["--step-ms", "nan", "--model-mb", "1"], "--step-ms"),
    (["--latency-us", "nan"], "--latency-us"),
    (["--latency-us", "-1"], "--latency-us"),
    (["--tau", "0"], "--tau"),
    (["--profile-steps", "0"], "--profile-steps"),
    (["--workers-per-node", "0"], "--workers-per-node"),
])
def test_plan_refuses_numbers_it_cannot_plan_with(capsys, home, flags, field):
    err = _one_line_error(capsys, ["plan", str(EXAMPLES / "digits.yaml"), *flags])
    assert field in err and "accepted" in err


@pytest.mark.timeout(60)
def test_plan_does_not_read_an_endless_link_probe(capsys, home):
    err = _one_line_error(capsys, ["plan", str(EXAMPLES / "digits.yaml"), "--step-ms", "10",
                                   "--model-mb", "1", "--link-probe", "/dev/zero"])
    assert "/dev/zero" in err and "regular file" in err
