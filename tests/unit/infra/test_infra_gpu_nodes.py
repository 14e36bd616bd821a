"""Which nodes GPU pods go to: the stack output's node selector and Kueue's gpu flavor name the labels the stack's GPU nodes carry.

The program labels the GPU nodes it makes `alchemist.io/pool: gpu` (k3s agents, EKS node
groups). Nothing labels an `existing` cluster's nodes that way (issue 36.3): there the
selector is `existing.gpuNodeSelector`, by default the label the GPU Operator the platform
installs puts on every node with an NVIDIA GPU (`nvidia.com/gpu.present: "true"`, judged
against the operator's source in tests/system/test_scheduling.py).
"""

from __future__ import annotations

import pytest
import yaml
from infra_helpers import KUBECONFIG, REGISTRY_PASSWORD, existing_stack_config, render, resources

from infra.cluster_facts import GPU_NODE_LABELS
from infra.config import GPU_PRESENT_LABELS, StackConfigError, parse, pulumi_value


def gpu_selectors(result) -> tuple[dict, dict]:
    """(the output's gpu.node_selector, the gpu ResourceFlavor's nodeLabels) of a render."""
    (flavor,) = [r["inputs"] for r in resources(result, "kubernetes:kueue.x-k8s.io/v1beta1:ResourceFlavor")
                 if r["inputs"]["metadata"]["name"] == "gpu"]
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
    result = render(path, stack="lab-a100",
                    secrets={"alchemist:kubeconfig": KUBECONFIG, "alchemist:registryPassword": REGISTRY_PASSWORD})
    assert result["error"] is None, result["error"]
    wanted = {"node.lab.internal/accelerator": "a100"}
    assert gpu_selectors(result) == (wanted, wanted)


@pytest.mark.parametrize("selector", [{"bad key!": "true"}, {"nvidia.com/gpu.present": "not a value"}, {}])
def test_a_bad_gpu_node_selector_is_one_line(selector):
    config = existing_stack_config()
    config["alchemist:existing"]["gpuNodeSelector"] = selector
    raw = {k: pulumi_value(v) for k, v in config.items()}
    raw["alchemist:kubeconfig"] = KUBECONFIG
    with pytest.raises(StackConfigError) as e:
        parse(raw, {"alchemist:kubeconfig"}, where="stacks/Pulumi.lab.yaml")
    assert str(e.value).startswith("stacks/Pulumi.lab.yaml: alchemist:existing.gpuNodeSelector"), str(e.value)
    assert "\n" not in str(e.value)
