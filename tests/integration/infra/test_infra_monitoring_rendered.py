"""Dashboards and rule files become ConfigMaps and PrometheusRules.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_monitoring.py`."""

from __future__ import annotations

import json

import pytest
import yaml
from infra_helpers import MONITORING, SHIPPED, STACKS, render, resources
from test_infra_monitoring import RECEIVERS

RULES = {"groups": [{"name": "alchemist-jobs", "rules": [
    {"alert": "AlchemistJobStalled", "expr": "rate(alchemist_steps_total[5m]) == 0", "for": "10m",
     "labels": {"severity": "warning"}, "annotations": {"summary": "no steps for 10 minutes"}}]}]}  # fmt: skip


@pytest.mark.parametrize("name", SHIPPED)
def test_one_configmap_per_dashboard_and_one_rule_per_file(renders, name):
    dashboards = list((MONITORING / "dashboards").glob("*.json"))
    rules = [*(MONITORING / "rules").glob("*.yaml"), *(MONITORING / "rules").glob("*.yml")]
    maps = [r for r in resources(renders[name], "kubernetes:core/v1:ConfigMap")
            if r["inputs"]["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]  # fmt: skip
    assert len(maps) == len(dashboards)
    assert len(resources(renders[name], "kubernetes:monitoring.coreos.com/v1:PrometheusRule")) == len(rules)


@pytest.fixture(scope="module")
def with_files(tmp_path_factory):
    """A monitoring/ directory with two dashboards and two rule files, rendered on dev."""
    root = tmp_path_factory.mktemp("monitoring")
    (root / "dashboards").mkdir()
    (root / "rules").mkdir()
    dashboards = {
        "training_overview.json": {"title": "Training overview", "panels": [], "schemaVersion": 41},
        "gpu.json": {"title": "GPUs", "panels": [], "schemaVersion": 41},
    }
    for file, doc in dashboards.items():
        (root / "dashboards" / file).write_text(json.dumps(doc))
    (root / "rules" / "jobs.yaml").write_text(yaml.safe_dump(RULES))
    (root / "rules" / "gpu.yml").write_text(yaml.safe_dump({"groups": []}))
    (root / "rules" / "README.md").write_text("not a rule file")
    return root, dashboards, render(STACKS / "Pulumi.dev.yaml", monitoring_dir=root)


def test_dashboards_become_sidecar_configmaps(with_files):
    root, dashboards, result = with_files
    maps = {
        r["inputs"]["metadata"]["name"]: r["inputs"]
        for r in resources(result, "kubernetes:core/v1:ConfigMap")
    }
    assert set(maps) == {"alchemist-dashboard-training-overview", "alchemist-dashboard-gpu"}
    for cm in maps.values():
        assert cm["metadata"]["namespace"] == "monitoring"
        assert cm["metadata"]["labels"] == {"grafana_dashboard": "1"}
    data = maps["alchemist-dashboard-training-overview"]["data"]
    assert json.loads(data["training-overview.json"]) == dashboards["training_overview.json"]


def test_rule_files_become_selected_prometheus_rules(with_files):
    _, _, result = with_files
    rules = {
        r["inputs"]["metadata"]["name"]: r["inputs"]
        for r in resources(result, "kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    }
    assert set(rules) == {"alchemist-jobs", "alchemist-gpu"}
    assert rules["alchemist-jobs"]["spec"] == RULES
    chart = next(
        r
        for r in resources(result, "kubernetes:helm.sh/v4:Chart")
        if r["inputs"]["chart"] == "kube-prometheus-stack"
    )
    selector = chart["inputs"]["values"]["prometheus"]["prometheusSpec"]["ruleSelector"]["matchLabels"]
    assert all(r["metadata"]["labels"] == selector for r in rules.values())
    assert all(r["metadata"]["namespace"] == "monitoring" for r in rules.values())


def test_a_bad_rule_file_stops_the_program_before_any_resource(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "x.yaml").write_text("groups: 3\n")
    result = render(STACKS / "Pulumi.dev.yaml", monitoring_dir=tmp_path)
    assert result["_returncode"] == 2 and result["resources"] == []
    assert result["error"].endswith(
        "is not accepted; accepted: a Prometheus rule file: only a top-level `groups:` list"
    )


def test_an_alertmanager_config_renders_on_a_stack():
    result = render(STACKS / "Pulumi.dev.yaml", sets={"alchemist:alertmanager": RECEIVERS})
    assert result["error"] is None, result["error"]
    chart = next(
        r
        for r in resources(result, "kubernetes:helm.sh/v4:Chart")
        if r["inputs"]["chart"] == "kube-prometheus-stack"
    )
    values = chart["inputs"]["values"]
    assert values["alertmanager"]["config"]["route"]["receiver"] == "oncall"
    # and without the admission webhook whose secret only a Helm hook creates
    assert values["prometheusOperator"]["admissionWebhooks"]["enabled"] is False
    assert values["prometheusOperator"]["tls"]["enabled"] is False
