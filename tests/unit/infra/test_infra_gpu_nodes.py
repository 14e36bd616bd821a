"""Which nodes GPU pods go to: the stack output's node selector and Kueue's gpu flavor name the labels the stack's GPU nodes carry.

The program labels the GPU nodes it makes `alchemist.io/pool: gpu` (k3s agents, EKS node
groups). Nothing labels an `existing` cluster's nodes that way (issue 36.3): there the
selector is `existing.gpuNodeSelector`, by default the label the GPU Operator the platform
installs puts on every node with an NVIDIA GPU (`nvidia.com/gpu.present: "true"`, judged
against the operator's source in tests/system/test_scheduling.py).
"""

from __future__ import annotations

import pytest
from infra_helpers import KUBECONFIG, existing_stack_config

from infra.config import StackConfigError, parse, pulumi_value


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
