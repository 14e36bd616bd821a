"""Every chart the program installs is checked against the vendored chart data of its pinned version.

Two ways a chart breaks on a real `pulumi up` that mocks cannot see: a values key the chart
does not have (silently ignored by Helm), and a Helm hook that helm.v4.Chart never runs
(pulumi/pulumi-kubernetes#3284: v4.Chart drops every resource annotated `helm.sh/hook`).
kube-prometheus-stack 75.15.1 showed the second: its operator Deployment mounts the secret
`kube-prometheus-stack-admission` that only the pre-install hook Job
`templates/prometheus-operator/admission-webhooks/job-patch/job-createSecret.yaml` creates.
"""

from __future__ import annotations

import pytest
from chart_data import chart_data, evaluate, flatten, rendered_hooks, unknown_keys


def test_the_check_sees_the_admission_hook_of_kube_prometheus_stack_defaults():
    """With the chart's defaults the admission-secret Job renders as a hook: the defect the check guards."""
    data = chart_data("kube-prometheus-stack", "75.15.1")
    templates = {h["template"] for h in rendered_hooks(data, {})}
    assert "templates/prometheus-operator/admission-webhooks/job-patch/job-createSecret.yaml" in templates
    # and the operator mounts that secret when TLS is on (its default)
    assert data["values"]["prometheusOperator.tls.enabled"] is True


def test_the_unknown_key_check_notices_a_typo():
    data = chart_data("kube-prometheus-stack", "75.15.1")
    assert unknown_keys(
        data, {"prometheus": {"prometheusSpec": {"retention": "15d", "retentoin": "1d"}}}
    ) == ["prometheus.prometheusSpec.retentoin"]
    assert unknown_keys(data, {"grafana": {"admin": {"existingSecret": "x"}, "adminn": 1}}) == [
        "grafana.adminn"
    ]
    # a free-form map (`storageSpec: {}`) takes any key below it
    assert (
        unknown_keys(data, {"prometheus": {"prometheusSpec": {"storageSpec": {"volumeClaimTemplate": {}}}}})
        == []
    )


@pytest.mark.parametrize("condition,values,expected", [
    ('and .Values.a (not .Values.b)', {"a": True, "b": False}, True),
    ('and .Values.a (not .Values.b)', {"a": True, "b": True}, False),
    ('and .Values.a (eq .Values.f "cilium")', {"a": True, "f": "kubernetes"}, False),
    ('or .Values.missing .Values.a', {"a": 0}, False),
    ('and (.Capabilities.APIVersions.Has "x") .Values.a', {"a": True}, "unknown"),
    ('and (.Capabilities.APIVersions.Has "x") .Values.a', {"a": False}, False),
])  # fmt: skip
def test_template_conditions_follow_go_template_truth(condition, values, expected):
    data = {"values": {}, "subcharts": {}}
    got = evaluate(condition, data, flatten(values))
    assert (got if isinstance(got, bool) else "unknown") == expected
