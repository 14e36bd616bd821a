"""Session fixtures of the infra tests that render stacks: every stack (and policy-breaking
variants) rendered once. The helpers are the infra unit tier's (`tests/unit/infra/infra_helpers.py`,
`chart_data.py`, and its test modules' case builders), shared, not copied."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

INFRA_UNIT = Path(__file__).resolve().parents[2] / "unit" / "infra"
if str(INFRA_UNIT) not in sys.path:
    sys.path.insert(0, str(INFRA_UNIT))

from infra_helpers import (  # noqa: E402
    DEPLOYER_SETS,
    KUBECONFIG,
    REGISTRY_PASSWORD,
    SHIPPED,
    SSH_KEY,
    STACKS,
    deployer_sets,
    existing_stack_config,
    render_many,
)


@pytest.fixture(scope="session")
def existing_stack_file(tmp_path_factory) -> Path:
    """The on-prem lab as an `existing` cluster: same lab, a kubeconfig instead of SSH."""
    config = existing_stack_config()
    path = tmp_path_factory.mktemp("stacks") / "Pulumi.onprem-existing.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


@pytest.fixture(scope="session")
def renders(existing_stack_file) -> dict[str, dict[str, Any]]:
    """Every shipped stack, plus the variants the policy and secret tests need, rendered once."""
    jobs: dict[str, dict[str, Any]] = {
        name: {"stack_file": STACKS / f"Pulumi.{name}.yaml", "sets": deployer_sets(name)} for name in SHIPPED
    }
    aws = STACKS / "Pulumi.aws-us-west-2.yaml"
    jobs.update({
        # one config per policy that breaks exactly that policy
        "break:storage-encrypted": {"stack_file": aws, "sets": {**DEPLOYER_SETS, "alchemist:sharedFs.encrypted": False}},
        "break:imdsv2-on-gpu-nodes": {"stack_file": aws, "sets": {**DEPLOYER_SETS,
                                                                 "alchemist:aws.gpuNodes.requireImdsv2": False}},
        "break:no-open-endpoints": {"stack_file": aws, "sets": {"alchemist:aws.publicAccessCidrs": ["0.0.0.0/0"]}},
        "allowed:no-open-endpoints": {"stack_file": aws, "sets": {
            "alchemist:aws.publicAccessCidrs": ["0.0.0.0/0"], "alchemist:allowOpenEndpoints": True}},
        "break:team-pod-security": {"stack_file": STACKS / "Pulumi.dev.yaml",
                                    "sets": {"alchemist:podSecurity": "privileged"}},
        "fsx": {"stack_file": aws, "sets": {**DEPLOYER_SETS, "alchemist:sharedFs": {"kind": "fsx-lustre", "deploymentType": "PERSISTENT_2",
                                                                  "perUnitStorageThroughput": 250}}},
        # team principals on EKS (access entries), the GPU Operator's driver on k3s
        "principals": {"stack_file": aws, "sets": {**DEPLOYER_SETS, "alchemist:teams": [
            {"name": "research", "quota": {"gpu": 12, "cpu": 96, "memory": "768Gi"}, "uid": 2001,
             "principals": ["arn:aws:iam::123456789012:role/research-submitters"]},
            {"name": "applied", "quota": {"gpu": 4, "cpu": 32, "memory": "256Gi"}, "groups": ["oidc:applied-ml"],
             "principals": ["arn:aws:iam::123456789012:role/applied-ci", "arn:aws:iam::123456789012:user/ana"]}]}},
        # an instance type whose EFA devices do RDMA read (issue 23.6)
        "p4d": {"stack_file": aws, "sets": {**DEPLOYER_SETS, "alchemist:aws.gpuNodes.instanceTypes": ["p4d.24xlarge"],
                                             "alchemist:aws.gpuNodes.gpusPerNode": 8}},
        "onprem-operator": {"stack_file": STACKS / "Pulumi.onprem-lab.yaml", "sets": {**deployer_sets("onprem-lab"),
                                                                                   "alchemist:onprem.gpuDriver": "operator"}},
        # secrets: an SSH key for k3s, a kubeconfig and a registry password for an existing cluster
        "secret:onprem-ssh": {"stack_file": STACKS / "Pulumi.onprem-lab.yaml", "sets": deployer_sets("onprem-lab"),
                              "secrets": {"alchemist:sshPrivateKey": SSH_KEY}},
        "secret:existing": {"stack_file": existing_stack_file, "secrets": {
            "alchemist:kubeconfig": KUBECONFIG, "alchemist:registryPassword": REGISTRY_PASSWORD}},
    })  # fmt: skip
    results = render_many(jobs)
    for name, result in results.items():
        assert result["error"] is None, f"{name}: {result['error']}"
    return results


# The checkout the `alchemist stack` tests write replicas into, as the in-process ones use it.
from test_infra_stack_cli import root  # noqa: E402, F401
