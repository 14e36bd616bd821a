"""Every chart the program installs is checked against the vendored chart data of its pinned version.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_charts.py`."""

from __future__ import annotations

import pytest
import yaml
from chart_data import FIXTURES, chart_data, chart_name, rendered_hooks, unknown_keys
from infra_helpers import SHIPPED, resources

from infra import providers
from infra.stack_diff import in_layer
from infra.versions import CHARTS

CHART = "kubernetes:helm.sh/v4:Chart"


RELEASE = "kubernetes:helm.sh/v3:Release"


STACKS = [*SHIPPED, "fsx"]


# Hooks that may stay enabled under helm.v4.Chart, and why skipping them is harmless.
HARMLESS_HOOKS = {
    ("gpu-operator", "charts/node-feature-discovery/templates/post-delete-job.yaml"):
        "post-delete only: prunes NFD's node labels when the chart is uninstalled; install and upgrade never run it",
}  # fmt: skip


def installs(render):
    """(type, resource name, chart, version, values) for every chart or release of a render.

    Every chart of the platform and monitoring layers must have vendored data here. A chart
    of the cluster layer is checked when its version is vendored here; the cluster layer's
    own upstream tests cover the versions it pins per Kubernetes minor.
    """
    by_urn = {r["urn"]: r for r in render["resources"]}
    out = []
    for r in [*resources(render, CHART), *resources(render, RELEASE)]:
        chart, version = chart_name(r["inputs"]["chart"]), r["inputs"]["version"]
        if not in_layer(r, by_urn) and not (FIXTURES / f"{chart}-{version}.json").exists():
            continue
        out.append((r["type"], r["name"], chart, version, r["inputs"].get("values") or {}))
    return out


@pytest.mark.parametrize("name", STACKS)
def test_every_values_key_exists_in_the_pinned_chart(renders, name):
    found = installs(renders[name])
    assert {"gpu-operator", "kueue", "jobset", "kube-prometheus-stack"} <= {i[2] for i in found}
    for _, res, chart, version, values in found:
        assert unknown_keys(chart_data(chart, version), values) == [], f"{res}: keys not in {chart} {version}"


def provider_pins():
    """Every provider's own chart pins (the CHARTS of infra/providers/<name>/versions.py, if any)."""
    import importlib

    pins = {}
    for name in providers.names():
        try:
            versions = importlib.import_module(f"infra.providers.{name}.versions")
        except ModuleNotFoundError:
            continue
        pins.update(getattr(versions, "CHARTS", {}))
    return pins


PINS = {**CHARTS, **provider_pins()}


def test_every_pin_in_versions_is_a_chart_some_stack_installs(renders):
    """One source of truth: infra/versions.py CHARTS and the providers' own CHARTS hold no pin the
    program does not install (it said aws-fsx-csi-driver 1.7.0 while the FSx driver installed 1.17.0)."""
    assert {"aws-efs-csi-driver", "aws-fsx-csi-driver"} <= set(PINS)  # the providers' pins are seen
    installed = {
        (chart_name(r["inputs"]["chart"]), r["inputs"]["version"])
        for name in STACKS
        for r in [*resources(renders[name], CHART), *resources(renders[name], RELEASE)]
    }
    stale = {
        key: pin.version for key, pin in PINS.items() if (chart_name(pin.chart), pin.version) not in installed
    }
    assert stale == {}


@pytest.mark.parametrize("name", STACKS)
def test_charts_installed_without_hooks_need_none(renders, name):
    for type_, res, chart, version, values in installs(renders[name]):
        if type_ != CHART:
            continue  # helm.v3.Release runs hooks like the helm CLI
        hooks = [h for h in rendered_hooks(chart_data(chart, version), values)
                 if (chart, h["template"]) not in HARMLESS_HOOKS]  # fmt: skip
        assert hooks == [], f"{res}: helm.v4.Chart would skip these hooks of {chart} {version}: {hooks}"


def test_the_efs_driver_needs_its_hook_so_it_is_a_release(renders):
    """aws-efs-csi-driver 3.2.1 creates its CSIDriver in a pre-install hook, unconditionally."""
    data = chart_data("aws-efs-csi-driver", "3.2.1")
    assert [h["template"] for h in rendered_hooks(data, {})] == ["templates/csidriver.yaml"]
    efs = [
        r["type"]
        for r in resources(renders["aws-us-west-2"])
        if r["type"] in (CHART, RELEASE) and chart_name(r["inputs"]["chart"]) == "aws-efs-csi-driver"
    ]
    assert efs == [RELEASE]


def _config_unknown_keys(types, type_name, doc, path=""):
    fields = types.get(type_name, {})
    inline = [t for k, t in fields.items() if k.startswith("inline:")]
    merged = {k: t for k, t in fields.items() if not k.startswith("inline:")}
    for t in inline:
        merged.update({k: v for k, v in types.get(t, {}).items() if not k.startswith("inline:")})
    bad = []
    for key, value in doc.items():
        if key in ("apiVersion", "kind") and not path:
            continue
        if key not in merged:
            bad.append(f"{path}{key}")
        elif isinstance(value, dict) and merged[key] in types:
            bad += _config_unknown_keys(types, merged[key], value, f"{path}{key}.")
    return bad


@pytest.mark.parametrize("name", SHIPPED)
def test_kueue_manager_config_uses_real_fields_and_enables_jobset_and_all_or_nothing(renders, name):
    import json
    from pathlib import Path

    kueue = next(i for i in installs(renders[name]) if i[2] == "kueue")
    config = yaml.safe_load(kueue[4]["managerConfig"]["controllerManagerConfigYaml"])
    api = json.loads(
        (Path(__file__).resolve().parents[2] / "fixtures/chart_values/kueue-config-v0.13.4.json").read_text()
    )
    assert (config["apiVersion"], config["kind"]) == ("config.kueue.x-k8s.io/v1beta1", "Configuration")
    assert _config_unknown_keys(api["types"], api["root"], config) == []
    assert "jobset.x-k8s.io/jobset" in config["integrations"]["frameworks"]
    assert config["waitForPodsReady"]["enable"] is True
    # EFA devices are left out of quota: no ClusterQueue covers them (issue 23.2; the admission
    # itself is judged in tests/system/test_scheduling.py)
    assert config["resources"]["excludeResourcePrefixes"] == ["vpc.amazonaws.com/"]
    # the chart's own defaults stay (webhook port, health probes, leader election)
    defaults = yaml.safe_load(
        chart_data("kueue", "0.13.4")["values"]["managerConfig.controllerManagerConfigYaml"]
    )
    for key in ("health", "metrics", "webhook", "leaderElection"):
        assert config[key] == defaults[key]
