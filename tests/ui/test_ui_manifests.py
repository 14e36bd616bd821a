"""The in-cluster dashboard's manifests: valid against the real Kubernetes schema
(kubernetes-validate, strict) for every stack and supported Kubernetes minor, bound to the
submitter Role only, Pod Security `restricted`, no credential in any object; and the pod's
command is one `alchemist ui` accepts, reaching the API server with its ServiceAccount."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml

from alchemist_jobs.ui import manifests as mf
from tests.k8s_stacks import SUPPORTED_KUBERNETES, stack_outputs


def _by_kind(objs):
    return {o["kind"]: o for o in objs}


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES)
def test_every_object_is_valid_for_every_stack(version):
    checked = 0
    for s in stack_outputs():
        for obj in mf.build(s.output):
            kubernetes_validate.validate(obj, f"{version}.0", strict=True)
            checked += 1
    assert checked == 5 * len(stack_outputs())


def test_rbac_is_the_namespaces_submitter_role_never_cluster_wide():
    for s in stack_outputs():
        objs = mf.build(s.output)
        kinds = [o["kind"] for o in objs]
        assert "ClusterRoleBinding" not in kinds and "ClusterRole" not in kinds
        rb = _by_kind(objs)["RoleBinding"]
        assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": "alchemist-job-submitter"}
        assert rb["subjects"] == [{"kind": "ServiceAccount", "name": mf.NAME,
                                   "namespace": s.output.namespace}]
        assert all(o["metadata"]["namespace"] == s.output.namespace for o in objs)


def test_the_role_it_binds_is_the_platforms_submitter_role():
    from infra.team_namespace import submitter_role

    assert submitter_role("team")["metadata"]["name"] == mf.SUBMITTER_ROLE


def test_no_credential_in_any_object():
    for s in stack_outputs():
        text = json.dumps(mf.build(s.output))
        secret = s.output.kubeconfig.get_secret_value() if s.output.kubeconfig else None
        if secret:
            token = yaml.safe_load(secret)["users"][0]["user"].get("token")
            assert token and token not in text
        assert "kubeconfig" not in text and "certificate_authority" not in text
        stack = json.loads(_by_kind(mf.build(s.output))["ConfigMap"]["data"]["stack.json"])
        assert stack["stack"] == s.name and "eks" not in stack and "auth" not in stack


def test_the_pod_is_restricted_and_listens_on_loopback_only():
    for s in stack_outputs():
        pod = _by_kind(mf.build(s.output))["Deployment"]["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == s.output.shared_fs.uid
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (c,) = pod["containers"]
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        cmd = c["command"]
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"


def test_the_pods_command_is_one_alchemist_ui_accepts():
    from alchemist_jobs.cli import build_parser

    for s in stack_outputs():
        cmd = mf.command(s.output)
        assert cmd[0] == "alchemist"
        args = build_parser(cmd[1:]).parse_args(cmd[1:])
        assert args.command == "ui" and args.in_cluster and args.stacks == [s.name]


def test_in_cluster_the_stack_output_gets_the_service_accounts_credentials(tmp_path,
                                                                           monkeypatch):
    """The pod's view: the ConfigMap's output plus a kubeconfig naming the mounted token."""
    from kubernetes import client, config

    from alchemist_jobs.ui.backends import Backends

    s = next(c for c in stack_outputs() if c.name == "dev")
    cm = _by_kind(mf.build(s.output))["ConfigMap"]
    (tmp_path / "stack.json").write_text(cm["data"]["stack.json"])
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token-value")
    (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    import alchemist_jobs.ui.incluster as incluster

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(incluster.in_cluster_kubeconfig, "__defaults__", (sa,))
    b = Backends(["dev"], outputs={"dev": tmp_path / "stack.json"}, in_cluster=True)
    out = b.stacks["dev"].scheduler.out
    kubeconfig = out.kubeconfig.get_secret_value()
    assert "sa-token-value" not in kubeconfig  # the path, read by the client, not the token
    cfg = client.Configuration()
    config.load_kube_config_from_dict(yaml.safe_load(kubeconfig), client_configuration=cfg,
                                      persist_config=False)
    assert cfg.host == "https://10.96.0.1:443"
    assert cfg.api_key["BearerToken"] == "Bearer sa-token-value"
    assert cfg.ssl_ca_cert == str(sa / "ca.crt")
    assert b.stacks["dev"].facts.queue == s.output.queue


def test_outside_a_pod_in_cluster_is_one_line(tmp_path, monkeypatch):
    from alchemist_jobs.errors import UserError
    from alchemist_jobs.ui.backends import Backends

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    (tmp_path / "s.json").write_text("{}")
    with pytest.raises(UserError, match=r"^--in-cluster: no Kubernetes service account"):
        Backends(["dev"], outputs={"dev": tmp_path / "s.json"}, in_cluster=True)


def test_the_cli_prints_them_for_kubectl_apply(tmp_path):
    from tests.ui.conftest import FIXTURES, cli

    proc = cli("ui", "--manifests", "--stack", "dev", "--outputs",
               f"dev={FIXTURES / 'dev.json'}", home=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    objs = list(yaml.safe_load_all(proc.stdout))
    assert [o["kind"] for o in objs] == ["ServiceAccount", "RoleBinding", "ConfigMap",
                                         "Deployment", "Service"]
    token = yaml.safe_load(json.loads((FIXTURES / "dev.json").read_text())["kubeconfig"])[
        "users"][0]["user"]["token"]
    assert token not in proc.stdout
    proc = cli("ui", "--manifests", home=tmp_path, timeout=120)
    assert proc.returncode == 2 and "exactly one cluster stack" in proc.stderr
