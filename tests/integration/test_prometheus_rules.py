"""The shipped alert rules under Prometheus's own tools: `promtool check rules`, and
`promtool test rules`, which evaluates every alert with the real rule engine over synthetic
series on a simulated clock, with the shipped `for:` durations (minutes pass in milliseconds).

The unit-test copy of the rule file drops the annotations, and only them: promtool compares
annotations verbatim, and they hold rendered `$value`s; `promtool check rules` on the shipped
file validates their templates.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "monitoring" / "rules" / "alchemist.rules.yaml"

promtool = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    promtool is None, reason="no promtool (apt-get install -y --no-install-recommends prometheus); "
                             "CI installs it")

L = 'job="digits",run="r1",algorithm="sync"'


def _series(name: str, labels: str, values: str) -> dict:
    return {"series": f"{name}{{{labels}}}", "values": values}


def _alert(at: str, name: str, *firing: dict) -> dict:
    return {"eval_time": at, "alertname": name,
            "exp_alerts": [{"exp_labels": labels} for labels in firing]}


def _labels(severity: str, **extra: str) -> dict:
    return {"severity": severity, "source": "alchemist", "job": "digits", "run": "r1", **extra}


CASES = [
    # Steps every minute for 10 minutes, then none: stalled once "no step for 30 s" has held
    # for the shipped 10 minutes. A healthy run never is.
    dict(interval="1m", input_series=[
        _series("alchemist_last_step_timestamp_seconds", f'{L},rank="0",node="a"', "0+60x10 600x30"),
        _series("alchemist_last_step_timestamp_seconds", f'{L},rank="1",node="a"', "0+60x10 600x30"),
        _series("alchemist_last_step_timestamp_seconds", 'job="ok",run="r2",algorithm="sync",'
                'rank="0",node="a"', "0+60x40"),
    ], alert_rule_test=[
        _alert("5m", "AlchemistJobStalled"),
        _alert("20m", "AlchemistJobStalled"),  # pending: 9 of the 10 minutes
        _alert("22m", "AlchemistJobStalled", _labels("critical")),
    ]),
    # NaN on rank 0 and +Inf on rank 1 both count; a finite loss does not.
    dict(interval="1m", input_series=[
        _series("alchemist_loss", f'{L},rank="0",node="a"', "1 0.5 NaN NaN NaN NaN"),
        _series("alchemist_loss", f'{L},rank="1",node="a"', "1 0.5 Inf Inf Inf Inf"),
        _series("alchemist_loss", f'{L},rank="2",node="a"', "1 0.5 0.4 0.3 0.2 0.1"),
    ], alert_rule_test=[
        _alert("2m", "AlchemistLossNaN"),
        _alert("4m", "AlchemistLossNaN",
               _labels("critical", rank="0", node="a", algorithm="sync"),
               _labels("critical", rank="1", node="a", algorithm="sync")),
    ]),
    # Loss falls for an hour (never an alarm), then jumps tenfold and stays there.
    dict(interval="1m", input_series=[
        _series("alchemist_loss", f'{L},rank="0",node="a"', "2-0.01x70 10x40"),
    ], alert_rule_test=[
        _alert("70m", "AlchemistLossExploding"),
        _alert("85m", "AlchemistLossExploding", _labels("warning")),
    ]),
    # DCGM, as scraped with honorLabels: false (the job pod in exported_pod/namespace, the
    # exporter's own pod in pod/namespace): pod w-0's GPU busy, then idle for over 15
    # minutes; pod w-1's stays busy; a GPU of a pod that is no Alchemist job's never alerts.
    # Pod w-0 runs a process that never started CUDA, so no worker NVML series exist at all.
    dict(interval="1m", input_series=[
        _series("DCGM_FI_DEV_GPU_UTIL", 'gpu="0",UUID="GPU-a",Hostname="h1",pod="dcgm-x",'
                'namespace="gpu-operator",exported_pod="w-0",exported_namespace="team"',
                "90x10 1x30"),
        _series("DCGM_FI_DEV_GPU_UTIL", 'gpu="1",UUID="GPU-b",Hostname="h1",pod="dcgm-x",'
                'namespace="gpu-operator",exported_pod="w-1",exported_namespace="team"', "90x40"),
        _series("DCGM_FI_DEV_GPU_UTIL", 'gpu="2",UUID="GPU-c",Hostname="h1",pod="dcgm-x",'
                'namespace="gpu-operator",exported_pod="other",exported_namespace="team"', "0x40"),
        _series("alchemist_process_memory_bytes", f'{L},rank="0",node="a",pod="w-0",namespace="team"',
                "1e9x40"),
        _series("alchemist_process_memory_bytes", f'{L},rank="1",node="b",pod="w-1",namespace="team"',
                "1e9x40"),
    ], alert_rule_test=[
        _alert("20m", "AlchemistGPUIdle"),
        _alert("30m", "AlchemistGPUIdle", _labels("warning",
                                                   pod="w-0", namespace="team")),
    ]),
    # The same with honorLabels: true: the job pod arrives as pod/namespace.
    dict(interval="1m", input_series=[
        _series("DCGM_FI_DEV_GPU_UTIL", 'gpu="0",UUID="GPU-a",Hostname="h1",pod="w-0",'
                'namespace="team"', "1x40"),
        _series("alchemist_process_memory_bytes", f'{L},rank="0",node="a",pod="w-0",namespace="team"',
                "1e9x40"),
    ], alert_rule_test=[
        _alert("30m", "AlchemistGPUIdle", _labels("warning",
                                                   pod="w-0", namespace="team")),
    ]),
    # Three restarts within 30 minutes, each attempt a new series (a new port: a new instance).
    dict(interval="1m", input_series=[
        _series("alchemist_restarts", f'{L},rank="0",node="a",instance="p1"', "0x5"),
        _series("alchemist_restarts", f'{L},rank="0",node="a",instance="p2"', "_x5 1x5"),
        _series("alchemist_restarts", f'{L},rank="0",node="a",instance="p3"', "_x10 2x5"),
        _series("alchemist_restarts", f'{L},rank="0",node="a",instance="p4"', "_x15 3x10"),
    ], alert_rule_test=[
        _alert("12m", "AlchemistRestartLoop"),
        _alert("18m", "AlchemistRestartLoop", _labels("warning")),
    ]),
    # Two workers; every update 32-64 server steps stale: far beyond max(8, 2 x 2).
    dict(interval="1m", input_series=[
        _series("alchemist_steps_total", f'{L},rank="0",node="a"', "0+60x40"),
        _series("alchemist_steps_total", f'{L},rank="1",node="a"', "0+60x40"),
        _series("alchemist_staleness_steps_bucket", f'{L},rank="s0",node="a",le="8"', "0x40"),
        _series("alchemist_staleness_steps_bucket", f'{L},rank="s0",node="a",le="32"', "0x40"),
        _series("alchemist_staleness_steps_bucket", f'{L},rank="s0",node="a",le="64"', "0+120x40"),
        _series("alchemist_staleness_steps_bucket", f'{L},rank="s0",node="a",le="+Inf"', "0+120x40"),
    ], alert_rule_test=[
        _alert("8m", "AlchemistStalenessHigh"),
        _alert("20m", "AlchemistStalenessHigh", _labels("warning")),
    ]),
    # Node c processes a tenth of its peers' samples, and spends five times their compute
    # per step; nodes a and b are healthy.
    dict(interval="1m", input_series=[
        *[_series("alchemist_samples_total", f'{L},rank="{i}",node="{n}"', rate)
          for i, (n, rate) in enumerate([("a", "0+600x40"), ("b", "0+600x40"), ("c", "0+60x40")])],
        *[_series("alchemist_steps_total", f'{L},rank="{i}",node="{n}"', "0+60x40")
          for i, n in enumerate("abc")],
        *[_series("alchemist_compute_seconds_total", f'{L},rank="{i}",node="{n}"', rate)
          for i, (n, rate) in enumerate([("a", "0+6x40"), ("b", "0+6x40"), ("c", "0+30x40")])],
    ], alert_rule_test=[
        _alert("10m", "AlchemistStragglerThroughput"),
        _alert("25m", "AlchemistStragglerThroughput", _labels("warning", node="c")),
        _alert("10m", "AlchemistStragglerCompute"),
        _alert("25m", "AlchemistStragglerCompute", _labels("warning", node="c")),
    ]),
]


def test_promtool_check_rules_accepts_the_shipped_file():
    out = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 8 rules found" in out.stdout


def test_every_alert_fires_when_it_should_and_not_before(tmp_path):
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    names = {r["alert"] for g in doc["groups"] for r in g["rules"]}
    tested = {t["alertname"] for case in CASES for t in case["alert_rule_test"]}
    assert tested == names, f"alerts without a promtool case: {sorted(names - tested)}"

    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": CASES}))
    out = subprocess.run([promtool, "test", "rules", "tests.yaml"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout
