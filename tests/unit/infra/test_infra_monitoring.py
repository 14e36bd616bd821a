"""Dashboards and alert rules from monitoring/ become labelled ConfigMaps and PrometheusRules."""

from __future__ import annotations

import pytest

from infra.config import StackConfigError
from infra.monitoring import load_monitoring_files


@pytest.mark.parametrize("file,content,expected", [
    ("rules/bad.yaml", "rules: []\n", "a Prometheus rule file: only a top-level `groups:` list"),
    ("rules/bad.yaml", "groups: [\n", "a Prometheus rule file (YAML)"),
    ("dashboards/bad.json", "{not json", "a Grafana dashboard as JSON"),
])  # fmt: skip
def test_a_bad_file_is_one_line(tmp_path, file, content, expected):
    (tmp_path / "rules").mkdir()
    (tmp_path / "dashboards").mkdir()
    (tmp_path / file).write_text(content)
    with pytest.raises(StackConfigError) as e:
        load_monitoring_files(tmp_path)
    assert str(e.value).startswith(str(tmp_path / file)) and str(e.value).endswith(expected)
    assert "\n" not in str(e.value)


# --- Alertmanager receivers from stack config ---------------------------------------------------

RECEIVERS = {"receivers": [{"name": "oncall", "webhook_configs": [{"url_file": "/etc/alertmanager/secrets/hook/url"}]}],
             "secrets": ["hook"]}  # fmt: skip


def _engine(alertmanager) -> dict[str, str]:
    import json as _json

    from infra_helpers import stack_config

    from infra.config import pulumi_value

    config = _json.loads(_json.dumps(stack_config("dev")))
    config["alchemist:alertmanager"] = alertmanager
    return {k: pulumi_value(v) for k, v in config.items()}


def test_receivers_from_stack_config_route_every_alert_but_watchdog():
    from infra.config import parse
    from infra.monitoring import prometheus_stack_values

    cfg = parse(_engine(RECEIVERS))
    am = prometheus_stack_values(cfg.alertmanager)["alertmanager"]
    assert am["alertmanagerSpec"]["secrets"] == ["hook"]
    config = am["config"]
    assert config["route"]["receiver"] == "oncall"
    assert config["route"]["routes"] == [{"receiver": "null", "matchers": ['alertname = "Watchdog"']}]
    assert [r["name"] for r in config["receivers"]] == ["null", "oncall"]
    # the keys exist in the chart; the document is Alertmanager's own (free-form below `config`)
    from chart_data import chart_data, unknown_keys

    assert unknown_keys(chart_data("kube-prometheus-stack", "75.15.1"), {"alertmanager": am}) == []


def test_without_receivers_the_chart_default_stays():
    from infra.monitoring import prometheus_stack_values

    assert "alertmanager" not in prometheus_stack_values(None)


@pytest.mark.parametrize("bad,expected", [
    ({"receivers": [{"name": "null", "webhook_configs": []}]}, "a unique non-empty name other than 'null'"),
    ({"receivers": [{"name": "a", "webhook_config": []}]}, "receiver a: keys ['webhook_config']; accepted: name and"),
    ({"receivers": [{"name": "a", "email_configs": []}], "route": {"receiver": "b"}}, "route.receiver 'b': one of"),
    ({"receivers": []}, "alchemist:alertmanager.receivers"),
])  # fmt: skip
def test_bad_receivers_are_one_line(bad, expected):
    from infra.config import StackConfigError, parse

    with pytest.raises(StackConfigError) as e:
        parse(_engine(bad))
    assert expected in str(e.value) and "\n" not in str(e.value)
