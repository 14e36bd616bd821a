"""The pinned NVIDIA GPU Operator release against what NVIDIA and its chart say about it.

- Kubernetes: NVIDIA validates each release on a range of Kubernetes minors
  (NVIDIA/cloud-native-docs gpu-operator/platform-support.rst, vendored per release in
  tests/fixtures/gpu_operator/platform-support.json with the docs commit it was read at).
  Every minor the program offers (infra/versions.py KUBERNETES_VERSIONS) and every shipped
  stack's minor must be in the pinned release's range. v25.3.2 was validated on 1.29 to 1.33
  only; "Kubernetes v1.35 support was added in v25.10.1 and later".
- Hooks: helm.v4.Chart never runs Helm hooks (pulumi/pulumi-kubernetes#3284). The chart's
  pre-upgrade hook `templates/upgrade_crd.yaml` is how a Helm upgrade refreshes the CRDs; here it
  is switched off, and the CRDs it would apply come from the chart's crds/ directories, which
  the Chart resource applies on every update.
- Defaults that moved: settings whose chart default changed from what the stacks rely on are
  set explicitly (infra/gpu_operator.py says why, with sources).
- DCGM: the exporter metrics the dashboards and rules read are in the default collector list of
  the DCGM exporter the pinned release deploys.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from infra_helpers import SHIPPED, stack_config

from infra.versions import CHARTS, KUBERNETES_VERSIONS

GPU_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpu_operator"
SUPPORT = json.loads((GPU_FIXTURES / "platform-support.json").read_text())
PIN = CHARTS["gpu-operator"]

# The rows of NVIDIA's tables that stand for our GPU nodes. On-prem GPU hosts run Debian or
# Ubuntu (docs/infra.md) under k3s: the Ubuntu rows of the "Kubernetes" column, and of the "K3s"
# column where the release has one (from v26.3.0). EKS GPU nodes run the AL2023 NVIDIA AMI,
# which NVIDIA's tables do not list: the Ubuntu rows of the "Amazon EKS" column stand for EKS.
COLUMNS = {"bare-metal": ("Kubernetes", "K3s"), "cloud": ("Amazon EKS Kubernetes",)}


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def validated_ranges(release: str) -> dict[str, tuple[str, str]]:
    """`table / column / OS` -> (first, last) Kubernetes minor NVIDIA validated `release` on."""
    assert release in SUPPORT["releases"], (
        f"no platform-support data for gpu-operator {release}: add its docs commit to "
        "PLATFORM_SUPPORT in tests/fixtures/vendor_upstream.py and regenerate"
    )
    tables = SUPPORT["releases"][release]["tables"]
    out = {}
    for table, columns in COLUMNS.items():
        for column in columns:
            for os_name, (first, last) in tables.get(table, {}).get(column, {}).items():
                if os_name.startswith("Ubuntu"):
                    out[f"{table} / {column} / {os_name}"] = (first, last)
    return out


STACK_MINORS = {stack_config(name)["alchemist:kubernetesVersion"] for name in SHIPPED}


@pytest.mark.parametrize("minor", sorted(set(KUBERNETES_VERSIONS) | STACK_MINORS, key=_minor))
def test_the_pinned_gpu_operator_release_supports_every_offered_kubernetes_minor(minor):
    ranges = validated_ranges(PIN.version)
    assert ranges, f"no Ubuntu rows in the platform-support tables of {PIN.version}"
    outside = {row: r for row, r in ranges.items() if not _minor(r[0]) <= _minor(minor) <= _minor(r[1])}
    assert outside == {}, f"gpu-operator {PIN.version} is not validated on Kubernetes {minor}: {outside}"


def test_the_check_refuses_the_previous_pin_on_1_35():
    """v25.3.2 (the pin before) was validated on 1.29 to 1.33: the check would have said so."""
    ranges = validated_ranges("v25.3.2")
    assert ranges["bare-metal / Kubernetes / Ubuntu 22.04 LTS"] == ("1.29", "1.33")
    assert all(_minor(last) < _minor("1.35") for _, last in ranges.values())
    assert (
        "Kubernetes v1.35 support was added in v25.10.1 and later."
        in SUPPORT["releases"]["v25.10.1"]["notes"]
    )
