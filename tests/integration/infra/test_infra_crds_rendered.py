"""Every custom resource the program renders is valid against the upstream CRD schema of its pinned version.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_crds.py`."""

from __future__ import annotations

import copy

import pytest
from infra_helpers import SHIPPED

from tests.crd_schemas import CustomResourceInvalid, known_kinds, validate_custom

CUSTOM_GROUPS = ("kueue.x-k8s.io", "monitoring.coreos.com", "jobset.x-k8s.io")


def custom_resources(render):
    for r in render["resources"]:
        group = r["type"].split(":")[1].split("/")[0] if r["type"].startswith("kubernetes:") else ""
        if group in CUSTOM_GROUPS:
            yield r["name"], r["inputs"]


@pytest.mark.parametrize("name", [*SHIPPED, "fsx"])
def test_custom_resources_match_the_upstream_crds(renders, name):
    found = list(custom_resources(renders[name]))
    kinds = {o["kind"] for _, o in found}
    assert {"ClusterQueue", "LocalQueue", "ResourceFlavor", "PodMonitor", "PrometheusRule"} <= kinds
    for res_name, obj in found:
        assert (obj["apiVersion"], obj["kind"]) in known_kinds(), f"{res_name}: no vendored schema"
        validate_custom(obj)


def test_validation_names_the_bad_field(renders):
    cq = next(o for _, o in custom_resources(renders["dev"]) if o["kind"] == "ClusterQueue")
    bad = copy.deepcopy(cq)
    bad["spec"]["preemption"]["withinClusterQueue"] = "Sometimes"
    with pytest.raises(CustomResourceInvalid, match=r"ClusterQueue \w+: spec\.preemption\.withinClusterQueue: "
                                                    r"'Sometimes' is not one of"):  # fmt: skip
        validate_custom(bad)
    typo = copy.deepcopy(cq)
    typo["spec"]["cohortt"] = "x"
    with pytest.raises(CustomResourceInvalid, match="'cohortt' was unexpected"):
        validate_custom(typo)
    pm = next(o for _, o in custom_resources(renders["dev"]) if o["kind"] == "PodMonitor")
    bad_pm = copy.deepcopy(pm)
    bad_pm["spec"]["podMetricsEndpoints"][0]["honorLabel"] = True
    with pytest.raises(CustomResourceInvalid, match="honorLabel"):
        validate_custom(bad_pm)


def test_the_crds_cel_rules_are_enforced(renders):
    """ClusterQueue (Kueue v0.13.4): each flavor lists as many resources as the group covers."""
    cq = next(o for _, o in custom_resources(renders["dev"]) if o["kind"] == "ClusterQueue")
    bad = copy.deepcopy(cq)
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()
    with pytest.raises(CustomResourceInvalid, match=r"spec\.resourceGroups\[0\]: "):
        validate_custom(bad)
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "f"},
              "spec": {"tolerations": [{"key": "a", "operator": "Equal", "value": "b", "tolerationSeconds": 5,
                                        "effect": "NoSchedule"}]}}  # fmt: skip
    with pytest.raises(CustomResourceInvalid, match=r"spec\.tolerations"):
        validate_custom(flavor)
