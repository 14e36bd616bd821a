"""Secrets (kubeconfigs, the SSH key, the registry password, join tokens) never appear in clear anywhere.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_secrets.py`."""

from __future__ import annotations

import pytest
from infra_helpers import KUBECONFIG, REGISTRY_PASSWORD, SHIPPED, SSH_KEY

MOCK_KUBECONFIG_KEY = "bW9jay1rZXk="  # the client key in the kubeconfig the mocked k3s/kind hands back


MOCK_TOKEN = "mock-join-token"


MOCK_ECR_PASSWORD = "mock-ecr-password"


def _everything(render) -> str:
    """All the render printed: resources, inputs, outputs, logs."""
    return render["_stdout"] + render["_stderr"]


@pytest.mark.parametrize("name", [*SHIPPED, "secret:onprem-ssh", "secret:existing"])
def test_no_secret_in_clear(renders, name):
    text = _everything(renders[name])
    for secret in (SSH_KEY, SSH_KEY.splitlines()[1], KUBECONFIG, "kubeconfig-token-that-must-never-leak-4711",
                   REGISTRY_PASSWORD, MOCK_KUBECONFIG_KEY, MOCK_TOKEN, MOCK_ECR_PASSWORD):  # fmt: skip
        assert secret not in text, f"{name}: a secret appears in clear"


def test_where_the_ssh_key_goes_it_is_secret(renders):
    r = renders["secret:onprem-ssh"]
    remote = [x for x in r["resources"] if x["type"] == "command:remote:Command"]
    assert remote and all(x["inputs"]["connection"] == "[secret]" for x in remote)
    assert r["outputs"]["alchemist"]["kubeconfig"] == "[secret]"


def test_where_the_kubeconfig_and_registry_password_go_they_are_secret(renders):
    r = renders["secret:existing"]
    (provider,) = [x for x in r["resources"] if x["type"] == "pulumi:providers:kubernetes"]
    assert provider["secret_inputs"] == ["kubeconfig"]
    # The password goes to the login command only (as a secret); the builds never see it, so
    # a new token does not rebuild (infra/images.py).
    (login,) = [x for x in r["resources"] if x["name"] == "images-login"]
    assert "environment.REGISTRY_PASSWORD" in login["secret_inputs"]
    builds = [x for x in r["resources"] if x["name"].endswith("-build")]
    assert builds and not any("REGISTRY_PASSWORD" in str(b["inputs"]) for b in builds)
    # the default team's kubeconfig where it always was, and each team's own
    assert sorted(r["secret_outputs"]) == [
        "alchemist.kubeconfig",
        "alchemist.teams[0].kubeconfig",
        "alchemist.teams[1].kubeconfig",
    ]


def test_ecr_password_is_secret(renders):
    (login,) = [x for x in renders["aws-us-west-2"]["resources"] if x["name"] == "images-login"]
    assert "environment.REGISTRY_PASSWORD" in login["secret_inputs"]
    builds = [x for x in renders["aws-us-west-2"]["resources"] if x["name"].endswith("-build")]
    assert len(builds) == 2 and not any("REGISTRY_PASSWORD" in str(b["inputs"]) for b in builds)
