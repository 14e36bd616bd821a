"""The pinned NVIDIA GPU Operator release against what NVIDIA and its chart say about it.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_gpu_operator.py`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from chart_data import chart_data, evaluate, flatten
from infra_helpers import SHIPPED, resources
from test_infra_gpu_operator import GPU_FIXTURES, PIN

CHART = "kubernetes:helm.sh/v4:Chart"


def _gpu_operator(render):
    (chart,) = [r for r in resources(render, CHART) if r["inputs"]["chart"] == "gpu-operator"]
    return chart["inputs"]


@pytest.mark.parametrize("name", SHIPPED)
def test_the_crd_upgrade_hook_is_off_and_the_chart_applies_those_crds_itself(renders, name):
    inputs = _gpu_operator(renders[name])
    data = chart_data("gpu-operator", inputs["version"])
    (hook,) = [h for h in data["hooks"] if h["template"] == "templates/upgrade_crd.yaml"]
    assert hook["phases"] == ["pre-upgrade"]
    # on by default in the chart, so it must be turned off: helm.v4.Chart would drop it silently
    assert data["values"]["operator.upgradeCRD"] is True
    assert evaluate(hook["if"], data, flatten(inputs["values"])) is False
    # every CRD the hook's Job applies is in a crds/ directory of the chart (NFD's included) ...
    assert set(hook["applies"]) <= {Path(p).name for p in data["crds"]}, data["crds"]
    # ... which helm.v4.Chart applies as ordinary resources, unless told to skip them
    assert not inputs.get("skipCrds")


@pytest.mark.parametrize("name", SHIPPED)
def test_cdi_stays_off_on_every_stack_although_the_chart_turns_it_on(renders, name):
    values = _gpu_operator(renders[name])["values"]
    data = chart_data("gpu-operator", PIN.version)
    assert data["values"]["cdi.enabled"] is True  # the chart's default since v25.10.0
    assert values["cdi"] == {"enabled": False}
    # no custom device-plugin or toolkit settings that would pick another injection mode
    assert "devicePlugin" not in values and values["toolkit"].keys() == {"enabled"}


def test_the_dashboards_dcgm_metrics_are_default_collectors_of_the_pinned_exporter(renders):
    from alchemist_jobs.metric_contract import EXTERNAL_METRICS

    values = _gpu_operator(renders["aws-us-west-2"])["values"]
    assert "config" not in values["dcgmExporter"], (
        "a custom metrics ConfigMap replaces the default collectors"
    )
    image = chart_data("gpu-operator", PIN.version)["values"][
        "dcgmExporter.version"
    ]  # e.g. 4.4.2-4.7.0-distroless
    tag = re.match(r"\d+\.\d+\.\d+-\d+\.\d+\.\d+", image).group(0)
    path = GPU_FIXTURES / f"dcgm-exporter-{tag}.json"
    assert path.exists(), (
        f"vendor DCGM exporter {tag}'s collectors: DCGM_EXPORTER_TAGS in tests/fixtures/vendor_upstream.py"
    )
    collectors = json.loads(path.read_text())["metrics"]
    ours = {m.name: m.type for m in EXTERNAL_METRICS if m.source == "dcgm-exporter"}
    assert ours and {name: collectors.get(name) for name in ours} == ours
