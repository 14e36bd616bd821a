"""Every shipped stack, rendered under Pulumi's mocks: assertions on the properties it registers.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_stacks.py`."""

from __future__ import annotations

import json
import re

import pytest
from infra_helpers import DEPLOYER_CIDR, KUBECONFIG, SHIPPED, one, resources, stack_config

from alchemist_jobs.contract import MANAGED_BY_LABEL, StackOutput
from infra.providers.aws.shared_fs import FSX_CSI_CHART
from infra.providers.aws.versions import EFS_CSI_CHART, autoscaler_chart
from infra.providers.kind.versions import KIND_NODE_IMAGES
from infra.providers.onprem.versions import K3S_VERSIONS
from infra.versions import CHARTS, GRAFANA_IMAGE_TAG

CHART = "kubernetes:helm.sh/v4:Chart"


DIGEST = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


@pytest.mark.parametrize("name", SHIPPED)
def test_output_is_the_contract(renders, name):
    r = renders[name]
    out = r["outputs"]["alchemist"]
    parsed = StackOutput.parse(out, source=name)
    config = stack_config(name)
    assert parsed.stack == name
    assert parsed.provider == config["alchemist:provider"]
    assert parsed.namespace == parsed.queue == config["alchemist:teams"][0]["name"]
    assert parsed.shared_fs.kind == config["alchemist:sharedFs"]["kind"]
    assert (parsed.shared_fs.pvc, parsed.shared_fs.mount_path) == ("alchemist-shared", "/shared")
    assert DIGEST.match(parsed.images.train) and DIGEST.match(parsed.images.interactive)
    assert parsed.gpu.resource == "nvidia.com/gpu"
    assert parsed.gpu.node_selector == {"alchemist.io/pool": "gpu"}
    assert parsed.gpu.tolerations == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert parsed.monitoring.pod_monitor_labels == {"alchemist.io/scrape": "true"}
    assert parsed.monitoring.prometheus_url == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
    assert parsed.monitoring.grafana_url == "http://kube-prometheus-stack-grafana.monitoring.svc:80"
    # TensorBoard listens on its pod's loopback: reached only through port-forward
    assert parsed.monitoring.tensorboard_url == "http://127.0.0.1:6006"
    if parsed.provider == "aws":
        assert "kubeconfig" not in out
        region = config["alchemist:aws"]["region"]
        assert out["auth"]["method"] == "presigned-request"
        assert out["auth"]["request"]["header_value"] == f"alchemist-{name}"  # the token's cluster
        assert out["auth"]["cluster"] == f"alchemist-{name}" and out["auth"]["region"] == region
        assert out["auth"]["server"].endswith(f".{region}.eks.amazonaws.com")
        assert out["auth"]["certificate_authority"]
        assert r["secret_outputs"] == []
    else:
        assert "eks" not in out and "auth" not in out
        # the kubeconfig, and only it, is secret: the stack's, and each team's own where it has one
        own = [f"alchemist.teams[{i}].kubeconfig" for i, t in enumerate(out["teams"]) if "kubeconfig" in t]
        assert sorted(r["secret_outputs"]) == sorted(["alchemist.kubeconfig", *own])
        assert own or parsed.provider == "kind"  # kind's admin kubeconfig serves every team


def test_gpus_per_node(renders):
    per_node = {n: renders[n]["outputs"]["alchemist"]["gpu"]["per_node"] for n in SHIPPED}
    assert per_node["dev"] == 0
    assert per_node["onprem-lab"] == 8
    assert per_node["aws-us-west-2"] == per_node["aws-eu-west-1"] == 4


@pytest.mark.parametrize("name", SHIPPED)
def test_charts_are_the_pinned_ones(renders, name):
    charts = {r["inputs"]["chart"]: r["inputs"] for r in resources(renders[name], CHART)}
    for key in ("gpu-operator", "kueue", "kube-prometheus-stack"):
        pin = CHARTS[key]
        assert charts[pin.chart]["version"] == pin.version
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", pin.version), "a pin is an exact version"
        if pin.repo:
            assert charts[pin.chart]["repositoryOpts"] == {"repo": pin.repo}
    assert CHARTS["kueue"].chart == "oci://registry.k8s.io/kueue/charts/kueue"
    kps = charts["kube-prometheus-stack"]["values"]
    assert kps["grafana"]["image"]["tag"] == GRAFANA_IMAGE_TAG and GRAFANA_IMAGE_TAG.startswith("11.6.")


@pytest.mark.parametrize("name", SHIPPED)
def test_kueue_queues_hold_team_quotas(renders, name):
    r = renders[name]
    teams = stack_config(name)["alchemist:teams"]
    cqs = {
        x["inputs"]["metadata"]["name"]: x["inputs"]
        for x in resources(r, "kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue")
    }
    lqs = {
        x["inputs"]["metadata"]["namespace"]: x["inputs"]
        for x in resources(r, "kubernetes:kueue.x-k8s.io/v1beta1:LocalQueue")
    }
    assert set(cqs) == set(lqs) == {t["name"] for t in teams}
    for team in teams:
        spec = cqs[team["name"]]["spec"]
        quotas = {res["name"]: res["nominalQuota"] for g in spec["resourceGroups"] for f in g["flavors"]
                  for res in f["resources"]}  # fmt: skip
        assert quotas == {"cpu": team["quota"]["cpu"], "memory": team["quota"]["memory"],
                          "nvidia.com/gpu": team["quota"]["gpu"]}  # fmt: skip
        assert spec["cohort"] == "alchemist"
        assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": team["name"]}}
        assert lqs[team["name"]]["spec"] == {"clusterQueue": team["name"]}
    flavors = {
        x["inputs"]["metadata"]["name"]: x["inputs"]["spec"]
        for x in resources(r, "kubernetes:kueue.x-k8s.io/v1beta1:ResourceFlavor")
    }
    gpu = r["outputs"]["alchemist"]["gpu"]
    assert flavors["gpu"] == {"nodeLabels": gpu["node_selector"], "tolerations": gpu["tolerations"]}


# Each team's namespace quota, by hand from the stack config: the sum of every team's quota,
# which is what Kueue can at most admit to one of them (no borrowing limits). Issue 23: it was
# the team's own quota, which refused the pods of a workload Kueue admitted by borrowing.
COHORT_TOTALS = {
    "aws-eu-west-1": ("128", "1Ti", "16"),
    "aws-us-west-2": ("128", "1Ti", "16"),
    "dev": ("12", "48Gi", "0"),
    "onprem-lab": ("128", "1Ti", "16"),
}


@pytest.mark.parametrize("name", SHIPPED)
def test_team_namespace_quota_is_what_kueue_can_admit_the_team(renders, name):
    cpu, memory, gpu = COHORT_TOTALS[name]
    teams = [t["name"] for t in stack_config(name)["alchemist:teams"]]
    quotas = {x["inputs"]["metadata"]["namespace"]: x["inputs"]
              for x in resources(renders[name], "kubernetes:core/v1:ResourceQuota")}  # fmt: skip
    assert set(quotas) == set(teams)
    for team in teams:
        assert quotas[team]["metadata"]["name"] == "alchemist-team"
        assert quotas[team]["spec"] == {
            "hard": {
                "requests.cpu": cpu,
                "requests.memory": memory,
                "requests.nvidia.com/gpu": gpu,
                "persistentvolumeclaims": "20",
            }
        }


@pytest.mark.parametrize("name", SHIPPED)
def test_team_namespaces_guard_rails(renders, name):
    r = renders[name]
    teams = [t["name"] for t in stack_config(name)["alchemist:teams"]]
    namespaces = {
        x["inputs"]["metadata"]["name"]: x["inputs"]["metadata"]["labels"]
        for x in resources(r, "kubernetes:core/v1:Namespace")
    }
    for team in teams:
        assert (
            namespaces[team]["pod-security.kubernetes.io/enforce"] == "restricted"
        )  # the default (issue 37.4)
        assert namespaces[team]["pod-security.kubernetes.io/warn"] == "restricted"
        in_ns = {
            x["type"].split(":")[-1]: x
            for x in resources(r)
            if x["inputs"].get("metadata", {}).get("namespace") == team
        }
        assert {"Role", "RoleBinding", "ResourceQuota", "LimitRange", "NetworkPolicy", "LocalQueue",
                "PersistentVolumeClaim"} <= set(in_ns)  # fmt: skip
        binding = next(x for x in resources(r, "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
                       if x["inputs"]["metadata"]["namespace"] == team)["inputs"]  # fmt: skip
        assert binding["subjects"] == [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": f"alchemist:{team}"}
        ]
        role = next(x for x in resources(r, "kubernetes:rbac.authorization.k8s.io/v1:Role")
                    if x["inputs"]["metadata"]["namespace"] == team
                    and x["inputs"]["metadata"]["name"] == "alchemist-job-submitter")["inputs"]  # fmt: skip
        # runs are JobSets: their Jobs are the controller's, read-only to submitters
        assert {"apiGroups": ["batch"], "resources": ["jobs"],
                "verbs": ["get", "list", "watch"]} in role["rules"]  # fmt: skip
    assert namespaces["gpu-operator"]["pod-security.kubernetes.io/enforce"] == "privileged"


@pytest.mark.parametrize("name", SHIPPED)
def test_network_policy_lets_prometheus_scrape_and_no_job_pod_in(renders, name):
    r = renders[name]
    team = stack_config(name)["alchemist:teams"][0]["name"]
    pols = {x["inputs"]["metadata"]["name"]: x["inputs"]["spec"] for x in resources(r, "kubernetes:networking.k8s.io/v1:NetworkPolicy")
            if x["inputs"]["metadata"]["namespace"] == team}  # fmt: skip
    assert pols["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    jobs = pols["alchemist-jobs"]
    assert jobs["podSelector"] == {"matchLabels": dict([MANAGED_BY_LABEL])}
    # only Prometheus, on the metrics ports: same-run traffic is each run's own policy
    assert jobs["ingress"] == [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
                                "ports": [{"protocol": "TCP", "port": 9400, "endPort": 9415}]}]  # fmt: skip
    dns = [
        e
        for e in jobs["egress"]
        if e.get("ports") == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    ]
    assert dns and dns[0]["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert len(jobs["egress"]) == 1


@pytest.mark.parametrize("name", SHIPPED)
def test_priority_classes(renders, name):
    pcs = {
        x["inputs"]["metadata"]["name"]: x["inputs"]
        for x in resources(renders[name], "kubernetes:scheduling.k8s.io/v1:PriorityClass")
    }
    assert set(pcs) == {"alchemist-interactive", "alchemist-batch"}
    assert pcs["alchemist-interactive"]["value"] > pcs["alchemist-batch"]["value"]
    assert not any(p["globalDefault"] for p in pcs.values())


@pytest.mark.parametrize("name", SHIPPED)
def test_shared_pvc_in_every_job_namespace(renders, name):
    r = renders[name]
    teams = [t["name"] for t in stack_config(name)["alchemist:teams"]]
    pvcs = {
        x["inputs"]["metadata"]["namespace"]: x["inputs"]
        for x in resources(r, "kubernetes:core/v1:PersistentVolumeClaim")
    }
    pvs = {
        x["inputs"]["metadata"]["name"]: x["inputs"]["spec"]
        for x in resources(r, "kubernetes:core/v1:PersistentVolume")
    }
    root = (
        set() if stack_config(name)["alchemist:sharedFs"]["kind"] == "efs" else {"kube-system"}
    )  # the prepare Job's
    assert set(pvcs) == {*teams, *root}  # monitoring no longer mounts the file system
    for ns, pvc in pvcs.items():
        assert pvc["metadata"]["name"] == (
            "alchemist-shared-root" if ns == "kube-system" else "alchemist-shared"
        )
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        assert pvc["spec"]["storageClassName"] == "alchemist-shared"
        pv = pvs[pvc["spec"]["volumeName"]]
        assert pv["claimRef"] == {"namespace": ns, "name": pvc["metadata"]["name"]}
        assert pv["accessModes"] == ["ReadWriteMany"] and pv["persistentVolumeReclaimPolicy"] == "Retain"
    sc = resources(r, "kubernetes:storage.k8s.io/v1:StorageClass")
    assert [s["inputs"]["metadata"]["name"] for s in sc if s["name"].startswith("shared-fs")] == [
        "alchemist-shared"
    ]
    # Each team's TensorBoard reads that team's PVC, read-only, at the path jobs use, and
    # serves only its runs on the pod's loopback.
    for team in teams:
        tb = one(r, "kubernetes:apps/v1:StatefulSet", f"monitoring-tensorboard-{team}")["inputs"]
        assert tb["metadata"]["namespace"] == team
        spec = tb["spec"]["template"]["spec"]
        assert spec["volumes"][0] == {
            "name": "shared",
            "persistentVolumeClaim": {"claimName": "alchemist-shared", "readOnly": True},
        }
        assert {"name": "shared", "mountPath": "/shared", "readOnly": True} in spec["containers"][0][
            "volumeMounts"
        ]
        assert spec["containers"][0]["image"] == r["outputs"]["alchemist"]["images"]["train"]
        command = spec["containers"][0]["command"]
        assert command[command.index("--logdir") + 1] == "/shared/runs"
        assert command[command.index("--host") + 1] == "127.0.0.1" and "--bind_all" not in command
        assert "ports" not in spec["containers"][0]
        # It reads the team's subtree (mode 0770) as the team's own identity.
        if team == r["outputs"]["alchemist"]["namespace"]:
            fs = r["outputs"]["alchemist"]["shared_fs"]
            assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]) == (
                fs["uid"],
                fs["gid"],
            )
    uids = [
        one(r, "kubernetes:apps/v1:StatefulSet", f"monitoring-tensorboard-{t}")["inputs"]["spec"]["template"][
            "spec"
        ]["securityContext"]["runAsUser"]
        for t in teams
    ]
    assert len(set(uids)) == len(uids)  # one identity per team, as the subtrees are owned
    assert not [
        x
        for x in resources(r, "kubernetes:core/v1:Service")
        if x["inputs"]["metadata"]["name"] == "tensorboard"
    ]  # nothing exposes TensorBoard


@pytest.mark.parametrize("name", SHIPPED)
def test_prometheus_selects_podmonitor_dcgm_and_rules(renders, name):
    r = renders[name]
    charts = {x["inputs"]["chart"]: x["inputs"]["values"] for x in resources(r, CHART)}
    spec = charts["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]
    selector = spec["podMonitorSelector"]["matchLabels"]
    assert spec["serviceMonitorSelector"]["matchLabels"] == spec["ruleSelector"]["matchLabels"] == selector
    dcgm = charts["gpu-operator"]["dcgmExporter"]["serviceMonitor"]
    assert dcgm["enabled"] is True and dcgm["additionalLabels"] == selector
    pm = one(r, "kubernetes:monitoring.coreos.com/v1:PodMonitor", "monitoring-podmonitor-jobs")["inputs"]
    assert pm["metadata"]["labels"] == selector
    assert pm["spec"]["selector"]["matchLabels"] == {
        **dict([MANAGED_BY_LABEL]),
        "alchemist.io/scrape": "true",
    }
    endpoints = pm["spec"]["podMetricsEndpoints"]
    assert [e["port"] for e in endpoints] == ["metrics"] + [f"metrics-{r}" for r in range(1, 16)]
    assert all(e["path"] == "/metrics" and e["honorLabels"] is True for e in endpoints)
    teams = {t["name"] for t in stack_config(name)["alchemist:teams"]}
    assert set(pm["spec"]["namespaceSelector"]["matchNames"]) == teams
    sidecar = charts["kube-prometheus-stack"]["grafana"]["sidecar"]["dashboards"]
    assert (sidecar["label"], sidecar["labelValue"]) == ("grafana_dashboard", "1")


@pytest.mark.parametrize("name", ["aws-us-west-2", "aws-eu-west-1"])
def test_aws_gpu_node_group(renders, name):
    r = renders[name]
    cfg = stack_config(name)["alchemist:aws"]
    gpu = one(r, "eks:index:ManagedNodeGroup", "cluster-gpu-nodes")["inputs"]
    assert gpu["instanceTypes"] == cfg["gpuNodes"]["instanceTypes"] == ["g5.12xlarge"]
    assert gpu["amiType"] == "AL2023_x86_64_NVIDIA"
    assert gpu["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert gpu["labels"] == {"alchemist.io/pool": "gpu", "k8s.amazonaws.com/accelerator": "nvidia-a10g"}
    assert gpu["scalingConfig"] == {"minSize": 0, "maxSize": 4, "desiredSize": 0}
    assert gpu["ignoreScalingChanges"] is True and gpu["launchTemplate"]["id"].startswith("lt-")
    system = one(r, "eks:index:ManagedNodeGroup", "cluster-system-nodes")["inputs"]
    assert system["amiType"] == "AL2023_x86_64_STANDARD" and system["launchTemplate"]["id"].startswith("lt-")
    assert system["scalingConfig"] == {"minSize": 2, "maxSize": 4, "desiredSize": 2}
    autoscaler = next(
        x["inputs"] for x in resources(r, CHART) if x["inputs"]["chart"] == "cluster-autoscaler"
    )
    assert autoscaler["values"]["autoDiscovery"]["clusterName"] == f"alchemist-{name}"
    assert (
        autoscaler["version"] == autoscaler_chart(stack_config(name)["alchemist:kubernetesVersion"]).version
    )


@pytest.mark.parametrize("name", ["aws-us-west-2", "aws-eu-west-1"])
def test_aws_cluster_and_network(renders, name):
    r = renders[name]
    cfg = stack_config(name)["alchemist:aws"]
    (provider,) = resources(r, "pulumi:providers:aws")
    assert provider["inputs"]["region"] == cfg["region"]
    cluster = one(r, "eks:index:Cluster", "cluster-eks")["inputs"]
    assert cluster["version"] == stack_config(name)["alchemist:kubernetesVersion"]
    assert cluster["publicAccessCidrs"] == [DEPLOYER_CIDR] and cluster["endpointPrivateAccess"] is True
    assert cluster["skipDefaultNodeGroup"] is True and cluster["encryptionConfigKeyArn"].startswith(
        "arn:aws:kms:"
    )
    vpc = one(r, "aws:ec2/vpc:Vpc", "cluster-vpc")["inputs"]
    assert vpc["cidrBlock"] == cfg["vpcCidr"]
    subnets = resources(r, "aws:ec2/subnet:Subnet")
    assert sorted({s["inputs"]["availabilityZone"] for s in subnets}) == cfg["availabilityZones"]
    # a private and a public subnet per zone, and one for the object-store endpoints
    # (test_infra_object_store: test_aws_pods_reach_s3_and_sts_through_interface_endpoints_of_their_own)
    assert len(subnets) == 3 * len(cfg["availabilityZones"])
    assert sum(s["name"].startswith("object-store-endpoints-") for s in subnets) == len(
        cfg["availabilityZones"]
    )
    repos = resources(r, "aws:ecr/repository:Repository")
    assert sorted(x["inputs"]["name"] for x in repos) == [
        f"alchemist/{name}/interactive",
        f"alchemist/{name}/train",
    ]
    assert r["outputs"]["alchemist"]["images"]["train"].startswith(
        f"123456789012.dkr.ecr.{cfg['region']}.amazonaws.com/"
    )


@pytest.mark.parametrize("name", ["aws-us-west-2", "aws-eu-west-1"])
def test_efs_encrypted_with_mount_targets_and_csi_driver(renders, name):
    r = renders[name]
    zones = stack_config(name)["alchemist:aws"]["availabilityZones"]
    efs = one(r, "aws:efs/fileSystem:FileSystem", "shared-fs-efs")
    assert efs["inputs"]["encrypted"] is True
    targets = resources(r, "aws:efs/mountTarget:MountTarget")
    private = {s["name"]: s for s in resources(r, "aws:ec2/subnet:Subnet") if "private" in s["name"]}
    assert len(targets) == len(zones) == len(private)
    assert len({t["inputs"]["subnetId"] for t in targets}) == len(zones)
    assert all(t["inputs"]["fileSystemId"].startswith("fs-") for t in targets)
    sg = one(r, "aws:ec2/securityGroup:SecurityGroup", "shared-fs-efs-sg")["inputs"]
    assert sg["ingress"] == [{"protocol": "tcp", "fromPort": 2049, "toPort": 2049,
                              "cidrBlocks": [stack_config(name)["alchemist:aws"]["vpcCidr"]]}]  # fmt: skip
    release = one(r, "kubernetes:helm.sh/v3:Release", "shared-fs-efs-csi-chart")[
        "inputs"
    ]  # v3: the chart has hooks
    assert (release["chart"], release["version"]) == (
        "aws-efs-csi-driver",
        EFS_CSI_CHART.version,
    )
    assert release["values"]["node"]["tolerations"] == [{"operator": "Exists"}]  # mounts on GPU nodes too
    sa = release["values"]["controller"]["serviceAccount"]
    assert sa["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    sc = one(r, "kubernetes:storage.k8s.io/v1:StorageClass", "shared-fs-storageclass")["inputs"]
    fs_id = targets[0]["inputs"]["fileSystemId"]
    assert sc["provisioner"] == "efs.csi.aws.com" and sc["parameters"]["fileSystemId"] == fs_id
    handles = {pv["inputs"]["metadata"]["name"]: pv["inputs"]["spec"]["csi"]["volumeHandle"]
               for pv in resources(r, "kubernetes:core/v1:PersistentVolume")}  # fmt: skip
    assert fs_id not in handles.values()  # nothing mounts the root: each team its access point
    assert handles and all(re.fullmatch(f"{fs_id}::fsap-[0-9a-f]+", h) for h in handles.values()), handles


def test_fsx_lustre_variant(renders):
    r = renders["fsx"]
    fsx = one(r, "aws:fsx/lustreFileSystem:LustreFileSystem", "shared-fs-fsx")["inputs"]
    assert fsx["deploymentType"] == "PERSISTENT_2" and fsx["storageCapacity"] == 1200
    assert fsx["perUnitStorageThroughput"] == 250
    chart = one(r, CHART, "shared-fs-fsx-csi-chart")["inputs"]
    assert (chart["chart"], chart["version"]) == ("aws-fsx-csi-driver", FSX_CSI_CHART.version)
    pv = resources(r, "kubernetes:core/v1:PersistentVolume")[0]["inputs"]["spec"]
    assert pv["csi"]["driver"] == "fsx.csi.aws.com" and set(pv["csi"]["volumeAttributes"]) == {
        "dnsname",
        "mountname",
    }
    assert r["outputs"]["alchemist"]["shared_fs"] == {
        "kind": "fsx-lustre",
        "pvc": "alchemist-shared",
        "mount_path": "/shared",
        "uid": 1000,
        "gid": 1000,
    }


def test_onprem_k3s_over_ssh(renders):
    r = renders["onprem-lab"]
    cfg = stack_config("onprem-lab")["alchemist:onprem"]
    cmds = {c["name"]: c for c in resources(r, "command:remote:Command")}
    version = K3S_VERSIONS[stack_config("onprem-lab")["alchemist:kubernetesVersion"]]
    server = cmds["cluster-server-lab-cp-1"]["inputs"]
    assert (
        f"INSTALL_K3S_VERSION='{version}'" in server["create"] and "--tls-san 10.20.0.10" in server["create"]
    )
    assert server["connection"] == "[secret]"  # pulumi-command keeps the whole SSH connection secret
    for host in cfg["hosts"]:
        if host["role"] != "agent":
            continue
        agent = cmds[f"cluster-agent-{host['name']}"]
        assert "--server https://10.20.0.10:6443" in agent["inputs"]["create"]
        assert agent["inputs"]["stdin"] == "[secret]"  # the join token, never on the command line
        gpu_flags = ("--node-taint nvidia.com/gpu=true:NoSchedule", "--default-runtime nvidia",
                     "--node-label alchemist.io/pool=gpu")  # fmt: skip
        if host.get("gpus"):
            assert all(f in agent["inputs"]["create"] for f in gpu_flags)
            runtime = cmds[f"cluster-nvidia-runtime-{host['name']}"]["inputs"]["create"]
            assert "nvidia-container-toolkit=" in runtime and "nvidia-smi" in runtime
        else:
            assert not any(f in agent["inputs"]["create"] for f in gpu_flags)
    for secret_cmd in ("cluster-token", "cluster-kubeconfig"):
        assert cmds[secret_cmd]["inputs"]["logging"] == "none"
        assert "stdout" in cmds[secret_cmd]["additional_secret_outputs"]
    nfs = one(r, CHART, "shared-fs-nfs-csi")["inputs"]
    assert (nfs["chart"], nfs["version"]) == ("csi-driver-nfs", CHARTS["csi-driver-nfs"].version)
    sc = one(r, "kubernetes:storage.k8s.io/v1:StorageClass", "shared-fs-storageclass")["inputs"]
    assert sc["provisioner"] == "nfs.csi.k8s.io" and sc["parameters"] == {
        "server": "10.20.0.5",
        "share": "/export/alchemist",
    }
    gpu_op = next(
        x["inputs"]["values"] for x in resources(r, CHART) if x["inputs"]["chart"] == "gpu-operator"
    )
    assert gpu_op["driver"] == {"enabled": False} and gpu_op["toolkit"] == {"enabled": False}


def test_dev_kind_cluster(renders):
    r = renders["dev"]
    cmds = {c["name"]: c["inputs"] for c in resources(r, "command:local:Command")}
    kind = cmds["cluster-kind"]
    assert (
        f"--image {KIND_NODE_IMAGES[stack_config('dev')['alchemist:kubernetesVersion']]}@sha256:"
        in kind["create"]
    )
    assert "containerPath: /var/alchemist/shared" in kind["stdin"] and kind["delete"].startswith(
        "kind delete cluster"
    )
    assert "127.0.0.1:5001:5000" in cmds["cluster-registry"]["create"]
    paths = {pv["inputs"]["metadata"]["name"]: pv["inputs"]["spec"]["hostPath"]
             for pv in resources(r, "kubernetes:core/v1:PersistentVolume")}  # fmt: skip
    for team in ("research", "applied"):  # made with its owner by the prepare Job
        assert paths[f"alchemist-shared-{team}"] == {
            "path": f"/var/alchemist/shared/teams/{team}",
            "type": "Directory",
        }
    assert paths.pop("alchemist-shared.root") == {
        "path": "/var/alchemist/shared",
        "type": "DirectoryOrCreate",
    }
    assert all(p["path"].startswith("/var/alchemist/shared/teams/") for p in paths.values())  # no root mount
    assert r["outputs"]["alchemist"]["images"]["train"].startswith("localhost:5001/alchemist/train@sha256:")


def test_existing_exports_a_team_service_account_token_never_the_deployers_kubeconfig(renders):
    """Issue 23.12: the `existing` provider's output credential is the team's submitter
    ServiceAccount (bound to the submitter Role only), with the deployer's cluster entry."""
    import base64

    import yaml

    from infra.team_credential import SUBMITTER_ACCOUNT, TOKEN_SECRET, token_kubeconfig
    from infra.team_namespace import SUBMITTER_ROLE

    r = renders["secret:existing"]
    objs = [
        x["inputs"] for x in r["resources"] if x["type"].startswith("kubernetes:") and "kind" in x["inputs"]
    ]
    for ns in ("research", "applied"):  # every team its own (issue 36.2)
        mine = [o for o in objs if o["metadata"].get("namespace") == ns]
        (sa,) = [
            o for o in mine if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == SUBMITTER_ACCOUNT
        ]
        assert sa["automountServiceAccountToken"] is False
        (binding,) = [
            o for o in mine if o["kind"] == "RoleBinding" and o["metadata"]["name"] == SUBMITTER_ACCOUNT
        ]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": SUBMITTER_ROLE,
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SUBMITTER_ACCOUNT, "namespace": ns}]
        (token,) = [o for o in mine if o["kind"] == "Secret" and o["metadata"]["name"] == TOKEN_SECRET]
        assert token["type"] == "kubernetes.io/service-account-token"
        assert token["metadata"]["annotations"] == {"kubernetes.io/service-account.name": SUBMITTER_ACCOUNT}
    assert [
        s for s in objs if s["kind"] == "ServiceAccount" and s["metadata"]["name"] == SUBMITTER_ACCOUNT
    ] and all(
        s["metadata"]["namespace"] in ("research", "applied")
        for s in objs
        if s["kind"] == "ServiceAccount" and s["metadata"]["name"] == SUBMITTER_ACCOUNT
    )
    assert "kubeconfig-token-that-must-never-leak-4711" not in r["_stdout"] + r["_stderr"]
    # what the output holds: the deployer's cluster, the ServiceAccount's token, nothing else
    made = yaml.safe_load(
        token_kubeconfig(KUBECONFIG, {"token": base64.b64encode(b"sa-token").decode()}, "research")
    )
    assert made["users"] == [{"name": "alchemist-submitter-research", "user": {"token": "sa-token"}}]
    assert made["clusters"][0]["cluster"] == {
        "server": "https://k8s.lab.internal:6443",
        "certificate-authority-data": "bGFiLWNh",
    }
    assert made["contexts"][0]["context"]["namespace"] == "research"
    assert "kubeconfig-token-that-must-never-leak-4711" not in json.dumps(made)


def test_existing_cluster(renders):
    r = renders["secret:existing"]
    out = StackOutput.parse(r["outputs"]["alchemist"], source="existing")
    assert out.provider == "existing" and out.gpu.per_node == 8 and out.shared_fs.kind == "nfs"
    (provider,) = resources(r, "pulumi:providers:kubernetes")
    assert provider["inputs"]["kubeconfig"] == "[secret]"
    gpu_op = next(
        x["inputs"]["values"] for x in resources(r, CHART) if x["inputs"]["chart"] == "gpu-operator"
    )
    assert gpu_op["toolkit"] == {"enabled": True} and gpu_op["driver"] == {"enabled": False}
    assert out.images.train.startswith("registry.lab.internal:5000/alchemist/train@sha256:")
