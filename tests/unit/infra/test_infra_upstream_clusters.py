"""The cluster and shared-file-system layers against upstream behaviour (issue 9, items 2-13; issue 17, items 2, 9, 10).

Each test names the upstream source its expectation comes from, read at the pinned version:
pulumi/pulumi-eks (commit 7bf0c1b1, after v4.3.0; the Python SDK is 4.4.0),
kubernetes-sigs/aws-efs-csi-driver (helm-chart-aws-efs-csi-driver-3.2.1),
kubernetes-sigs/aws-fsx-csi-driver (helm-chart-aws-fsx-csi-driver-1.17.0),
kubernetes-csi/csi-driver-nfs (v4.11.0), kubernetes/autoscaler (cluster-autoscaler-1.31.0 and
the cluster-autoscaler-chart-* tags), and the AWS and NVIDIA documentation named at each test.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
import yaml
from infra_helpers import DEPLOYER_CIDR, SHIPPED, STACKS, stack_config
from test_infra_config import engine_config

from infra.config import StackConfigError, parse
from infra.providers.aws.versions import AUTOSCALER_CHARTS, autoscaler_chart
from infra.providers.onprem.versions import K3S_VERSIONS
from infra.versions import KUBERNETES_VERSIONS

AWS_STACKS = [n for n in SHIPPED if n.startswith("aws-")]


# --- 9.2: the API CIDRs come from the deployer ------------------------------------------------


@pytest.mark.parametrize("name", AWS_STACKS)
def test_shipped_aws_stacks_leave_the_api_cidrs_to_the_deployer(name):
    assert "publicAccessCidrs" not in stack_config(name)["alchemist:aws"]
    config = engine_config(name, {})
    config["alchemist:aws"] = json.dumps({k: v for k, v in json.loads(config["alchemist:aws"]).items()
                                          if k != "publicAccessCidrs"})  # fmt: skip
    with pytest.raises(StackConfigError) as e:
        parse(config, where=f"stacks/Pulumi.{name}.yaml")
    line = str(e.value)
    assert line.startswith(
        f"stacks/Pulumi.{name}.yaml: alchemist:aws.publicAccessCidrs is missing; accepted: "
    )
    assert "pulumi config set --path 'alchemist:aws.publicAccessCidrs[0]'" in line and "\n" not in line


@pytest.mark.parametrize(
    "cidr", ["203.0.113.0/24", "198.51.100.7/32", "192.0.2.0/24", "10.0.0.0/8", "192.168.1.0/24"]
)
def test_documentation_and_private_ranges_are_no_deployer_network(cidr):
    with pytest.raises(StackConfigError) as e:
        parse(engine_config("aws-us-west-2", {"alchemist:aws.publicAccessCidrs": [DEPLOYER_CIDR, cidr]}))
    assert str(e.value).startswith(f"alchemist:aws.publicAccessCidrs[1] = '{cidr}' is not accepted; "
                                   "accepted: a public network you deploy from")  # fmt: skip


# --- 9.3: EBS CSI driver, so gp3 claims bind -----------------------------------------------------


# --- 9.4 / 17.2: each team its own subtree and uid -------------------------------------------------


def test_each_team_has_its_identity():
    cfg = parse(engine_config("dev", {}))
    assert [cfg.identity(t.name) for t in cfg.teams] == [(1000, 1000), (1001, 1001)]  # 1000 + index
    teams = [{"name": "a", "quota": {"gpu": 0, "cpu": 1, "memory": "1Gi"}, "uid": 5000, "gid": 6000},
             {"name": "b", "quota": {"gpu": 0, "cpu": 1, "memory": "1Gi"}}]  # fmt: skip
    assert parse(engine_config("dev", {"alchemist:teams": teams})).identity("a") == (5000, 6000)
    teams[1]["uid"] = 5000
    with pytest.raises(StackConfigError, match=r"alchemist:teams\[1\]\.uid = 5000 is not accepted; accepted: a uid "
                                               "no other team has"):  # fmt: skip
        parse(engine_config("dev", {"alchemist:teams": teams}))


# --- 9.5: NetworkPolicies enforced on EKS -------------------------------------------------------


# --- 9.6: access entries for the team principals ---------------------------------------------------


def test_principals_are_iam_arns_and_aws_only():
    bad = [{"name": "a", "quota": {"gpu": 0, "cpu": 1, "memory": "1Gi"}, "principals": ["ana"]}]
    with pytest.raises(
        StackConfigError, match=r"alchemist:teams\[0\]\.principals\[0\] = 'ana' is not accepted"
    ):
        parse(engine_config("aws-us-west-2", {"alchemist:teams": bad}))
    bad[0]["principals"] = ["arn:aws:iam::123456789012:role/x"]
    with pytest.raises(
        StackConfigError,
        match=r"alchemist:teams\[0\]\.principals = .* IAM principals only with provider 'aws'",
    ):
        parse(engine_config("dev", {"alchemist:teams": bad}))


# --- 9.8: autoscaler sees GPU nodes and matches the cluster -----------------------------------------


@pytest.mark.parametrize("minor", KUBERNETES_VERSIONS)
def test_autoscaler_chart_is_built_for_the_clusters_minor(minor):
    # appVersion of charts/cluster-autoscaler/Chart.yaml at tag cluster-autoscaler-chart-<version>
    version, app = AUTOSCALER_CHARTS[minor]
    assert app.rsplit(".", 1)[0] == minor and autoscaler_chart(minor).version == version


# --- 9.9: no Bottlerocket NVIDIA AMI under the GPU Operator ------------------------------------------


def test_bottlerocket_nvidia_is_refused_in_one_line():
    with pytest.raises(StackConfigError) as e:
        parse(
            engine_config("aws-us-west-2", {"alchemist:aws.gpuNodes.amiType": "BOTTLEROCKET_x86_64_NVIDIA"})
        )
    assert str(e.value).startswith("alchemist:aws.gpuNodes.amiType = 'BOTTLEROCKET_x86_64_NVIDIA' is not accepted; "
                                   "accepted: AL2023_x86_64_NVIDIA")  # fmt: skip


# --- 9.10: the host toolkit finds the operator's driver ------------------------------------------------


# --- 9.11: private registries: pull secrets and registries.yaml -----------------------------------------


def test_docker_config_is_the_dockerconfigjson_format():
    from infra.registry_access import docker_config

    doc = json.loads(docker_config("registry.lab:5000", "ci", "pw"))
    assert doc == {"auths": {"registry.lab:5000": {"username": "ci", "password": "pw",
                                                   "auth": base64.b64encode(b"ci:pw").decode()}}}  # fmt: skip


# --- 17.9: the on-prem install ----------------------------------------------------------------------


def test_ssh_host_keys_are_required():
    hosts = stack_config("onprem-lab")["alchemist:onprem"]["hosts"]
    assert all(h["hostKey"].startswith("ssh-ed25519 AAAA") for h in hosts)
    changed = [dict(h) for h in hosts]
    changed[2].pop("hostKey")
    with pytest.raises(StackConfigError) as e:
        parse(engine_config("onprem-lab", {"alchemist:onprem.hosts": changed}))
    assert str(e.value).startswith(
        "alchemist:onprem.hosts[2].hostKey is missing; accepted: the host's public SSH key"
    )


# --- 17.10: IMDS unreachable from pods ---------------------------------------------------------------


# --- issue 12, move 5: one add-on-with-identity component ---------------------------------------------


def test_stack_files_parse_as_shipped_plus_deployer_keys():
    for name in SHIPPED:
        text = (STACKS / f"Pulumi.{name}.yaml").read_text()
        assert "203.0.113." not in text and "198.51.100." not in text and "192.0.2." not in text
        parse(engine_config(name, {}))


# --- 9.12: on-prem exports the team's submitter identity, not the admin kubeconfig -----------------


def test_team_kubeconfig_keeps_the_cluster_and_drops_the_admin():
    from infra.providers.onprem.cluster import team_kubeconfig
    from infra.render import Recorder

    admin = Recorder._command_stdout(
        "cluster-kubeconfig", {}
    )  # what k3s's k3s.yaml looks like under the mocks
    team = yaml.safe_load(team_kubeconfig(admin, "Y2VydA==\na2V5\n", "research", "10.20.0.10"))
    (user,) = team["users"]
    assert user == {"name": "alchemist-submitter-research", "user": {"client-certificate-data": "Y2VydA==",
                                                                      "client-key-data": "a2V5"}}  # fmt: skip
    assert team["clusters"][0]["cluster"] == {"server": "https://10.20.0.10:6443",
                                              "certificate-authority-data": "bW9jaw=="}  # fmt: skip
    assert team["contexts"][0]["context"]["namespace"] == "research"
    assert "bW9jay1rZXk=" not in json.dumps(team)  # the admin's client key


# --- EFA on EFA-capable GPU instance types ------------------------------------------------------------

# The GPU types among the EFA device plugin's supportedInstanceLabels (aws/eks-charts
# stable/aws-efa-k8s-device-plugin/values.yaml, chart v0.5.30, commit bfe91c4, Apache-2.0),
# which follows https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types.
EFA_PLUGIN_GPU_TYPES = {
    "g4dn.8xlarge", "g4dn.12xlarge", "g4dn.16xlarge", "g4dn.metal",
    "g5.8xlarge", "g5.12xlarge", "g5.16xlarge", "g5.24xlarge", "g5.48xlarge",
    "g6.8xlarge", "g6.12xlarge", "g6.16xlarge", "g6.24xlarge", "g6.48xlarge",
    "g6e.8xlarge", "g6e.12xlarge", "g6e.16xlarge", "g6e.24xlarge", "g6e.48xlarge",
    "p3dn.24xlarge", "p4d.24xlarge", "p4de.24xlarge", "p5.4xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
}  # fmt: skip


def test_efa_table_lists_only_types_the_device_plugin_serves():
    from infra.providers.aws.instance_types import EFA_INTERFACES, group_efa

    assert set(EFA_INTERFACES) <= EFA_PLUGIN_GPU_TYPES
    assert group_efa(["p5.48xlarge"]) == 32 and group_efa(["g5.12xlarge", "g5.2xlarge"]) == 0


def test_efa_off_and_efa_on_a_type_without_it():
    cfg = parse(engine_config("aws-us-west-2", {"alchemist:aws.gpuNodes.efa": False}))
    assert cfg.aws.gpu_nodes.efa_interfaces == 0
    with pytest.raises(StackConfigError, match=r"alchemist:aws.gpuNodes.instanceTypes\[0\] = 'g5.2xlarge' is not "
                                               "accepted; accepted: an EFA instance type with efa: true"):  # fmt: skip
        parse(engine_config("aws-us-west-2", {"alchemist:aws.gpuNodes.instanceTypes": ["g5.2xlarge"],
                                              "alchemist:aws.gpuNodes.efa": True}))  # fmt: skip


# --- 9.13: kind node images by digest ------------------------------------------------------------------


# The day the shipped stacks' minor was last chosen (issue 9): every date below is read against it,
# not against the clock, so the suite says the same thing every day.
CHOSEN_ON = "2026-12-01"


@pytest.mark.parametrize("minor", KUBERNETES_VERSIONS)
def test_every_supported_minor_has_a_build_on_every_provider(minor):
    """kind: a node image by digest; k3s: a release of that minor; EKS: still offered (not past extended support)."""
    from infra.providers.aws.versions import EKS_STANDARD_SUPPORT_END, eks_extended_support_end
    from infra.providers.kind.versions import KIND_NODE_IMAGES, kind_node_image

    assert re.fullmatch(rf"kindest/node:v{re.escape(minor)}\.\d+", KIND_NODE_IMAGES[minor])
    assert re.fullmatch(re.escape(KIND_NODE_IMAGES[minor]) + r"@sha256:[0-9a-f]{64}", kind_node_image(minor))
    assert re.fullmatch(rf"v{re.escape(minor)}\.\d+\+k3s\d+", K3S_VERSIONS[minor])
    assert minor in AUTOSCALER_CHARTS and minor in EKS_STANDARD_SUPPORT_END
    # past the end of extended support EKS creates no cluster of that minor and upgrades the old ones
    assert eks_extended_support_end(minor) > CHOSEN_ON, (
        f"EKS stopped offering {minor} on {eks_extended_support_end(minor)}"
    )


def test_kind_digests_are_exactly_the_pinned_images():
    # one kind release's image list (infra/providers/kind/versions.py names it): no stale digest left behind
    from infra.providers.kind.versions import KIND_NODE_DIGESTS, KIND_NODE_IMAGES

    assert set(KIND_NODE_IMAGES) == set(KUBERNETES_VERSIONS) and set(KIND_NODE_DIGESTS) == set(
        KIND_NODE_IMAGES.values()
    )


def test_eks_extended_support_is_twelve_months_after_standard():
    # AWS EKS user guide, "Understand the Kubernetes version lifecycle on EKS": standard support
    # for 14 months, then extended support "for the next 12 months"
    from infra.providers.aws.versions import eks_extended_support_end

    assert (
        eks_extended_support_end("1.31") == "2026-11-26" and eks_extended_support_end("1.35") == "2028-03-27"
    )


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_stacks_run_a_minor_in_eks_standard_support(name):
    """The same minor on every stack (`alchemist stack diff`), and on EKS it is not on paid extended support."""
    from infra.providers.aws.versions import EKS_STANDARD_SUPPORT_END, eks_support_warning

    minor = stack_config(name)["alchemist:kubernetesVersion"]
    assert minor in KUBERNETES_VERSIONS
    assert (
        EKS_STANDARD_SUPPORT_END[minor] > CHOSEN_ON
        and eks_support_warning(minor, CHOSEN_ON, KUBERNETES_VERSIONS) is None
    )
    assert {stack_config(n)["alchemist:kubernetesVersion"] for n in SHIPPED} == {minor}


# --- the cluster layer's charts: values keys exist, hooks only where a Release runs them ------------------

CHARTS_DATA = json.loads(
    (STACKS.parent / "tests" / "fixtures" / "cluster_charts" / "charts.json").read_text()
)


@pytest.mark.parametrize("minor", KUBERNETES_VERSIONS)
def test_every_autoscaler_pin_was_read_upstream(minor):
    version, app = AUTOSCALER_CHARTS[minor]
    assert f"cluster-autoscaler@{version}" in CHARTS_DATA


# --- 9.13: an EKS version in standard support ------------------------------------------------------------


def test_a_minor_past_eks_standard_support_is_said_at_up():
    from infra.providers.aws.versions import eks_support_warning

    supported = ("1.33", "1.34", "1.35")
    line = eks_support_warning("1.31", "2026-12-01", supported)
    assert line == ("EKS 1.31: standard support ended 2025-11-26; the cluster runs on paid extended support; "
                    "choose 1.34 or 1.35 (alchemist:kubernetesVersion).")  # fmt: skip
    assert eks_support_warning("1.34", "2026-12-01", supported) is None
    assert eks_support_warning("1.35", "2027-03-27", supported) is None
    assert "no minor the program supports" in eks_support_warning("1.31", "2026-12-01", ("1.30", "1.31"))


def test_cluster_facts_eks_is_typed_like_the_contract():
    from alchemist_jobs.contract import ClusterAuth
    from infra.providers.aws.facts import EksFacts

    facts = EksFacts(cluster_name="c", region="us-west-2", endpoint="https://x", certificate_authority="Y2E=")
    auth = ClusterAuth.model_validate(facts.output())
    assert (auth.method, auth.label, auth.cluster, auth.region, auth.server, auth.certificate_authority) == (
        "presigned-request", "EKS cluster", "c", "us-west-2", "https://x", "Y2E="
    )  # fmt: skip
    assert auth.kubeconfig_command == "aws eks update-kubeconfig --name c --region us-west-2"
    assert auth.request is not None and (auth.request.service, auth.request.header_value) == ("sts", "c")
    assert facts.output().keys() >= {"method", "cluster", "region"}


# --- 17.9: the k3s installer runs only when its digest is the one the deployer reviewed -------------------


def test_shipped_onprem_stack_leaves_the_installer_digest_to_the_deployer():
    """The digest is the deployer's statement that they read this release's install.sh: the shipped
    stack cannot make it for them, and without it preview stops at one line that says how."""
    assert "k3sInstallerSha256" not in stack_config("onprem-lab")["alchemist:onprem"]
    with pytest.raises(StackConfigError) as e:
        parse(
            engine_config("onprem-lab", {"alchemist:onprem.k3sInstallerSha256": None}),
            where="stacks/Pulumi.onprem-lab.yaml",
        )
    line = str(e.value)
    minor = stack_config("onprem-lab")["alchemist:kubernetesVersion"]
    url = f"https://raw.githubusercontent.com/k3s-io/k3s/{K3S_VERSIONS[minor].replace('+', '%2B')}/install.sh"
    assert line.startswith("stacks/Pulumi.onprem-lab.yaml: alchemist:onprem.k3sInstallerSha256 is missing; ")
    assert f"curl -sfL {url} | sha256sum" in line and "\n" not in line
    with pytest.raises(StackConfigError) as e:
        parse(engine_config("onprem-lab", {"alchemist:onprem.k3sInstallerSha256": "AB" * 32}))
    assert str(e.value).startswith("alchemist:onprem.k3sInstallerSha256 = 'ABAB")
