"""Which nodes GPU pods go to: the stack output's node selector and Kueue's gpu flavor name the labels the stack's GPU nodes carry.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_gpu_nodes.py`."""

from __future__ import annotations

import pytest
import yaml
from infra_helpers import KUBECONFIG, REGISTRY_PASSWORD, existing_stack_config, render, resources

from infra.cluster_facts import GPU_NODE_LABELS
from infra.config import GPU_PRESENT_LABELS


def gpu_selectors(result) -> tuple[dict, dict]:
    """(the output's gpu.node_selector, the gpu ResourceFlavor's nodeLabels) of a render."""
    (flavor,) = [
        r["inputs"]
        for r in resources(result, "kubernetes:kueue.x-k8s.io/v1beta1:ResourceFlavor")
        if r["inputs"]["metadata"]["name"] == "gpu"
    ]
    return result["outputs"]["alchemist"]["gpu"]["node_selector"], flavor["spec"]["nodeLabels"]


@pytest.mark.parametrize("name", ["dev", "onprem-lab", "aws-us-west-2"])
def test_stacks_that_make_their_gpu_nodes_select_the_pool_label(renders, name):
    assert gpu_selectors(renders[name]) == (GPU_NODE_LABELS, GPU_NODE_LABELS)


def test_an_existing_cluster_selects_what_the_gpu_operator_labels(renders):
    assert gpu_selectors(renders["secret:existing"]) == (GPU_PRESENT_LABELS, GPU_PRESENT_LABELS)


def test_an_existing_clusters_selector_is_its_config(tmp_path):
    config = existing_stack_config()
    config["alchemist:existing"]["gpuNodeSelector"] = {"node.lab.internal/accelerator": "a100"}
    path = tmp_path / "Pulumi.lab-a100.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    result = render(
        path,
        stack="lab-a100",
        secrets={"alchemist:kubeconfig": KUBECONFIG, "alchemist:registryPassword": REGISTRY_PASSWORD},
    )
    assert result["error"] is None, result["error"]
    wanted = {"node.lab.internal/accelerator": "a100"}
    assert gpu_selectors(result) == (wanted, wanted)
