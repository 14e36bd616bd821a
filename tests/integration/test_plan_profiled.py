"""`alchemist plan` with profiling in process: it profiles the real model for 20 steps per point
and renders a PNG plot, prints the table and JSON (about a second idle, several loaded)."""

from __future__ import annotations

import json

from alchemist_jobs import cli


def test_a_profiled_plan_prints_table_json_and_plot(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ALCHEMIST_HOME", str(tmp_path))
    png = tmp_path / "plan.png"
    assert (
        cli.main(
            [
                "plan",
                "examples/digits.yaml",
                "--nodes",
                "1,2,4",
                "--link",
                "100mbit",
                "--algorithms",
                "sync,bmuf",
                "--profile-steps",
                "20",
                "--plot",
                str(png),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "speed-up" in out and "assumptions:" in out and "100mbit (--link)" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        cli.main(
            [
                "plan",
                "examples/digits.yaml",
                "--nodes",
                "2",
                "--link",
                "100mbit",
                "--profile-steps",
                "20",
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    (p,) = plan["points"]
    assert p["algorithm"] == "sync" and p["workers"] == 4 and p["compute_s"] > 0
    # Two nodes exchange gradients; DDP overlaps them with backward, so they may hide wholly
    # behind a slow (loaded) backward, but never cost more than they take.
    assert p["communication_s"] > 0
    assert 0 <= p["step_s"] - p["compute_s"] <= p["communication_s"] + 1e-12
