"""The AWS provider's part of the guard rails (infra/policies.py): EFS, EBS, ECR and EKS storage
encrypted, IMDSv2 on GPU nodes, no security group or EKS endpoint open to the world.

Standard library only, as infra/policies.py: the policy pack's virtualenv has nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from infra.policies import GUARDED_PORTS, Resource, get, is_world


def _is_gpu_instance(instance_type: Any) -> bool:
    family = str(instance_type).split(".")[0]
    return len(family) >= 2 and family[0] in "gp" and family[1].isdigit()


# --- storage encrypted at rest ----------------------------------------------------------


def check_storage_encrypted(r: Resource) -> list[str]:
    p = r.props
    if (
        r.type in ("aws:efs/fileSystem:FileSystem", "aws:ebs/volume:Volume")
        and p.get("encrypted") is not True
    ):
        return [f"{r.name}: {r.type.split(':')[-1]} must set encrypted: true"]
    if r.type == "aws:ecr/repository:Repository":
        for enc in p.get("encryptionConfigurations") or []:
            if get(enc, "encryptionType") not in (None, "AES256", "KMS", "KMS_DSSE"):
                return [f"{r.name}: ECR repository encryption must be AES256 or KMS"]
    if r.type == "eks:index:Cluster":
        classes = p.get("storageClasses")
        if isinstance(classes, Mapping):
            bad = [n for n, sc in classes.items() if get(sc, "encrypted") is not True]
            if bad:
                return [f"{r.name}: EBS storage classes {', '.join(sorted(bad))} must set encrypted: true"]
    if r.type == "kubernetes:storage.k8s.io/v1:StorageClass" and p.get("provisioner") in (
        "ebs.csi.aws.com", "kubernetes.io/aws-ebs"
    ):  # fmt: skip
        if str(get(p, "parameters", "encrypted", default="")).lower() != "true":
            return [f'{r.name}: EBS StorageClass must set parameters.encrypted: "true"']
    if r.type == "aws:ec2/launchTemplate:LaunchTemplate":
        for bdm in p.get("blockDeviceMappings") or []:
            ebs = get(bdm, "ebs") or {}
            if str(ebs.get("encrypted", "")).lower() != "true":
                return [f"{r.name}: launch template volumes must be encrypted"]
    return []


# --- IMDSv2 on GPU nodes ------------------------------------------------------------------


def _gpu_node_group(p: Mapping[str, Any]) -> bool:
    ami = str(p.get("amiType") or "")
    return (
        p.get("gpu") is True
        or "NVIDIA" in ami
        or "GPU" in ami
        or any(_is_gpu_instance(t) for t in (p.get("instanceTypes") or []))
        or _is_gpu_instance(p.get("instanceType") or "")
    )


def check_imdsv2_on_gpu_nodes(r: Resource) -> list[str]:
    p = r.props
    if r.type in ("eks:index:ManagedNodeGroup", "eks:index:NodeGroupV2", "eks:index:NodeGroup"):
        if _gpu_node_group(p) and p.get("launchTemplate") is None and p.get("enableIMDSv2") is not True:
            return [f"{r.name}: GPU node group must set enableIMDSv2: true (instance metadata v2 only)"]
    if r.type == "aws:eks/nodeGroup:NodeGroup" and _gpu_node_group(p) and p.get("launchTemplate") is None:
        return [f"{r.name}: GPU node group needs a launch template with metadata httpTokens: required"]
    if r.type in ("aws:ec2/launchTemplate:LaunchTemplate", "aws:ec2/instance:Instance"):
        gpu = _is_gpu_instance(p.get("instanceType") or "") or get(p, "tags", "alchemist.io/pool") == "gpu"
        if gpu and get(p, "metadataOptions", "httpTokens") != "required":
            return [f"{r.name}: GPU instances must set metadataOptions.httpTokens: required"]
    return []


# --- no SSH or API endpoint open to the world ------------------------------------------


def _rule_opens(rule: Mapping[str, Any]) -> list[str]:
    """The guarded services an ingress rule opens to 0.0.0.0/0 or ::/0."""
    cidrs = [*(rule.get("cidrBlocks") or []), *(rule.get("ipv6CidrBlocks") or [])]
    cidrs += [c for c in (rule.get("cidrIpv4"), rule.get("cidrIpv6")) if c]
    if not any(is_world(c) for c in cidrs):
        return []
    protocol = str(rule.get("protocol", rule.get("ipProtocol", "tcp")))
    lo, hi = rule.get("fromPort", 0), rule.get("toPort", 65535)
    if protocol in ("-1", "all"):
        lo, hi = 0, 65535
    if protocol not in ("tcp", "6", "-1", "all"):
        return []
    return sorted({svc for port, svc in GUARDED_PORTS.items() if int(lo or 0) <= port <= int(hi or 65535)})


def check_no_open_endpoints(r: Resource) -> list[str]:
    p = r.props
    if r.type == "eks:index:Cluster" or r.type == "aws:eks/cluster:Cluster":
        vpc = p.get("vpcConfig") if r.type == "aws:eks/cluster:Cluster" else p
        if get(vpc, "endpointPublicAccess", default=True) is not False:
            cidrs = get(vpc, "publicAccessCidrs") or []
            if not cidrs or any(is_world(c) for c in cidrs):
                return [f"{r.name}: public API endpoint open to 0.0.0.0/0; list publicAccessCidrs or set "
                        "alchemist:allowOpenEndpoints: true"]  # fmt: skip
    if r.type == "aws:ec2/securityGroup:SecurityGroup":
        opened = sorted({s for rule in p.get("ingress") or [] for s in _rule_opens(rule)})
        if opened:
            return [f"{r.name}: security group opens {' and '.join(opened)} to 0.0.0.0/0"]
    if r.type in (
        "aws:ec2/securityGroupRule:SecurityGroupRule",
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    ):
        if r.type.endswith("SecurityGroupRule") and p.get("type") != "ingress":
            return []
        opened = _rule_opens(p)
        if opened:
            return [f"{r.name}: ingress rule opens {' and '.join(opened)} to 0.0.0.0/0"]
    if r.type in ("eks:index:ManagedNodeGroup", "aws:eks/nodeGroup:NodeGroup"):
        remote = p.get("remoteAccess")
        if isinstance(remote, Mapping) and not remote.get("sourceSecurityGroupIds"):
            return [f"{r.name}: node SSH (remoteAccess) without sourceSecurityGroupIds is open to 0.0.0.0/0"]
    return []


CHECKS: dict[str, tuple[Callable[[Resource], list[str]], ...]] = {
    "storage-encrypted": (check_storage_encrypted,),
    "imdsv2-on-gpu-nodes": (check_imdsv2_on_gpu_nodes,),
    "no-open-endpoints": (check_no_open_endpoints,),
}
