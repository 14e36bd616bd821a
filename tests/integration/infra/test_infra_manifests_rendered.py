"""Every plain Kubernetes object the program creates is valid against its stack's Kubernetes schema (strict).

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_manifests.py`."""

from __future__ import annotations

import kubernetes_validate
import pytest
from infra_helpers import SHIPPED, stack_config

# Custom resources are checked against their upstream CRD schemas (test_infra_crds.py);
# kubernetes-validate only knows the built-in API.
CUSTOM_GROUPS = ("kueue.x-k8s.io/", "monitoring.coreos.com/", "jobset.x-k8s.io/")


def plain_objects(render):
    for r in render["resources"]:
        inputs = r["inputs"]
        if r["type"].startswith("kubernetes:") and "apiVersion" in inputs and "kind" in inputs:
            if not inputs["apiVersion"].startswith(CUSTOM_GROUPS):
                yield r["name"], inputs


def _unmask(obj):
    """A Secret's data is recorded masked as one value; give the schema a map of strings instead."""
    if obj["kind"] == "Secret":
        obj = {**obj, **{k: {"masked": "masked"} for k in ("data", "stringData") if obj.get(k) == "[secret]"}}
    return obj


@pytest.mark.parametrize("name", [*SHIPPED, "secret:existing", "fsx"])
def test_plain_objects_match_the_kubernetes_schema(renders, name):
    render = renders[name]
    stack = name if name in SHIPPED else ("onprem-lab" if "existing" in name else "aws-us-west-2")
    version = stack_config(stack)["alchemist:kubernetesVersion"] + ".0"
    objects = list(plain_objects(render))
    kinds = {o["kind"] for _, o in objects}
    assert {
        "Namespace",
        "NetworkPolicy",
        "ResourceQuota",
        "LimitRange",
        "Role",
        "RoleBinding",
        "PriorityClass",
        "StorageClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "StatefulSet",
        "ServiceAccount",
        "Secret",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    } <= kinds
    for obj_name, obj in objects:
        try:
            kubernetes_validate.validate(_unmask(obj), version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{name}: {obj_name} ({obj['kind']}) is not valid Kubernetes {version}: {e.message}")
