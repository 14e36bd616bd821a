"""Every shipped stack, rendered under Pulumi's mocks: assertions on the properties it registers."""

from __future__ import annotations

import pytest
from infra_helpers import SHIPPED

from infra.versions import KUBERNETES_VERSIONS


def test_stacks_shipped():
    assert {"dev", "onprem-lab", "aws-us-west-2", "aws-eu-west-1"} <= set(SHIPPED)


def test_the_manifest_tests_cover_every_offered_kubernetes_minor():
    """docs/kubernetes.md says the manifest tests run on every minor the program offers."""
    from tests.k8s_stacks import SUPPORTED_KUBERNETES

    assert SUPPORTED_KUBERNETES == KUBERNETES_VERSIONS


# --- the contract -----------------------------------------------------------------------------


# --- platform, on every stack -------------------------------------------------------------------


# --- shared file system: the same PVC and path everywhere ---------------------------------------


# --- monitoring ---------------------------------------------------------------------------------


# --- provider-specific layers ------------------------------------------------------------------


def test_existing_kubeconfig_without_a_cluster_is_one_line():
    from infra.config import StackConfigError, parse

    raw = {
        "alchemist:provider": "existing",
        "alchemist:kubernetesVersion": "1.35",
        "alchemist:existing": "{}",
        "alchemist:images": '{"registry": "r.lab/x"}',
        "alchemist:sharedFs": '{"kind": "nfs", "server": "s", "share": "/x"}',
        "alchemist:teams": '[{"name": "research", "quota": {"gpu": 1, "cpu": 1, "memory": "1Gi"}}]',
        "alchemist:kubeconfig": "apiVersion: v1\nkind: Config\nusers: []\n",
    }
    with pytest.raises(StackConfigError, match="alchemist:kubeconfig.*current-context names a cluster"):
        parse(raw, {"alchemist:kubeconfig"})
