"""Secrets (kubeconfigs, the SSH key, the registry password, join tokens) never appear in clear anywhere."""

from __future__ import annotations

import pytest
from infra_helpers import KUBECONFIG, SSH_KEY

from infra.config import StackConfigError, parse

BASE = {
    "alchemist:provider": "existing",
    "alchemist:kubernetesVersion": "1.35",
    "alchemist:existing": "{}",
    "alchemist:images": '{"registry": "r.lab/x"}',
    "alchemist:sharedFs": '{"kind": "nfs", "server": "s", "share": "/x"}',
    "alchemist:teams": '[{"name": "research", "quota": {"gpu": 1, "cpu": 1, "memory": "1Gi"}}]',
}


@pytest.mark.parametrize("secret_keys,extra", [
    (set(), {"alchemist:kubeconfig": KUBECONFIG}),  # a secret set in plain text
    ({"alchemist:kubeconfig"}, {"alchemist:kubeconfig": KUBECONFIG, "alchemist:provider": "onprem",
                                "alchemist:existing": None}),
    ({"alchemist:sshPrivateKey", "alchemist:kubeconfig"}, {"alchemist:kubeconfig": KUBECONFIG,
                                                          "alchemist:sshPrivateKey": SSH_KEY}),
])  # fmt: skip
def test_config_errors_never_show_a_secret(secret_keys, extra):
    with pytest.raises(StackConfigError) as e:
        parse({k: v for k, v in {**BASE, **extra}.items() if v is not None}, secret_keys)
    message = str(e.value)
    assert "kubeconfig-token" not in message and "OPENSSH" not in message and "\n" not in message


def test_a_secret_set_in_plain_text_is_refused_without_echoing_it():
    with pytest.raises(StackConfigError) as e:
        parse({**BASE, "alchemist:kubeconfig": KUBECONFIG}, set())
    assert str(e.value) == (
        "alchemist:kubeconfig = <secret> is not accepted; accepted: a secret: "
        "`pulumi config set --secret alchemist:kubeconfig ...` (it is never stored in clear)"
    )
