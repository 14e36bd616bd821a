"""`alchemist plan --emulated` profiles emulated nodes as real worker processes computing at once."""

from __future__ import annotations

import json

import pytest

from alchemist_jobs import cli


def test_emulated_nodes_are_profiled_computing_at_once(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ALCHEMIST_HOME", str(tmp_path))
    assert (
        cli.main(
            [
                "plan",
                "examples/digits.yaml",
                "--nodes",
                "2",
                "--link",
                "100mbit",
                "--workers-per-node",
                "1",
                "--emulated",
                "--profile-steps",
                "5",
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert set(plan["profiles"]) == {"1", "2"}
    assert "2 processes at once" in plan["profiles"]["2"]["source"]
    assert "processes at once" not in plan["profile"]["source"]  # the 1-node baseline: alone
    (p,) = plan["points"]
    two = plan["profiles"]["2"]
    assert p["compute_s"] == pytest.approx(two["forward_s"] + two["backward_s"] + two["optimizer_s"])
    assert (
        cli.main(
            [
                "plan",
                "examples/digits.yaml",
                "--nodes",
                "2",
                "--link",
                "1gbit",
                "--emulated",
                "--step-ms",
                "5",
                "--model-mb",
                "1",
            ]
        )
        == 2
    )
    assert "--emulated" in capsys.readouterr().err
