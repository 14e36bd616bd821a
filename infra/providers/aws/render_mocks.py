"""AWS under `infra/render.py`'s mocks: the outputs AWS and pulumi-eks compute (ids, ARNs, DNS
names, an EKS kubeconfig and OIDC issuer, ECR's repository URL and login) and the data-source
calls the program makes; everything else a resource has is its inputs."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from infra.render_mocks import fake_id

ACCOUNT = "123456789012"


class AwsMocks:
    """The AWS provider's `RenderMocks` (infra/render.py)."""

    # resource types `aws:...` and `eks:...`; provider resources `pulumi:providers:aws`
    packages: tuple[str, ...] = ("aws", "eks")
    # SDK modules every AWS render needs, imported once before `--jobs` forks
    preload: tuple[str, ...] = (
        "pulumi_eks", "pulumi_aws.ec2", "pulumi_aws.iam", "pulumi_aws.efs", "pulumi_aws.fsx", "pulumi_aws.ecr",
        "pulumi_aws.kms", "pulumi_aws.eks", "infra.providers.aws.cluster_addons", "infra.providers.aws.cluster",
    )  # fmt: skip

    def new_resource(
        self, t: str, name: str, inputs: dict[str, Any], region: str
    ) -> tuple[str, dict[str, Any]]:
        out = dict(inputs)
        rid = f"{name}-id"
        if t.startswith("aws:"):
            service = t.split(":")[1].split("/")[0]
            out.setdefault("arn", f"arn:aws:{service}:{region}:{ACCOUNT}:{name}")
        if t == "aws:ec2/vpc:Vpc":
            rid = fake_id(name, "vpc")
        elif t == "aws:ec2/subnet:Subnet":
            rid = fake_id(name, "subnet")
        elif t == "aws:ec2/securityGroup:SecurityGroup":
            rid = fake_id(name, "sg")
        elif t == "aws:efs/fileSystem:FileSystem":
            rid = fake_id(name, "fs")
            out["dnsName"] = f"{rid}.efs.{region}.amazonaws.com"
            out["arn"] = f"arn:aws:elasticfilesystem:{region}:{ACCOUNT}:file-system/{rid}"
        elif t == "aws:fsx/lustreFileSystem:LustreFileSystem":
            rid = fake_id(name, "fs")
            out.update(dnsName=f"{rid}.fsx.{region}.amazonaws.com", mountName="abcdefgh")
        elif t == "aws:ecr/repository:Repository":
            out.update(registryId=ACCOUNT,
                       repositoryUrl=f"{ACCOUNT}.dkr.ecr.{region}.amazonaws.com/{inputs.get('name', name)}")  # fmt: skip
        elif t == "aws:s3/bucket:Bucket":
            # The provider names a bucket from bucketPrefix plus a unique 26-character suffix.
            rid = (
                inputs.get("bucket")
                or inputs.get("bucketPrefix", "terraform-") + hashlib.sha256(name.encode()).hexdigest()[:26]
            )
            out.update(bucket=rid, arn=f"arn:aws:s3:::{rid}", region=region)
        elif t == "aws:efs/accessPoint:AccessPoint":
            rid = fake_id(name, "fsap")
            out["arn"] = f"arn:aws:elasticfilesystem:{region}:{ACCOUNT}:access-point/{rid}"
        elif t == "aws:ec2/launchTemplate:LaunchTemplate":
            rid = fake_id(name, "lt")
            out.update(latestVersion=1, defaultVersion=1)
        elif t == "aws:ec2/placementGroup:PlacementGroup":
            out.setdefault("name", name)
        elif t == "aws:iam/role:Role":
            out.update(arn=f"arn:aws:iam::{ACCOUNT}:role/{name}", name=name)
        elif t == "eks:index:Cluster":
            cluster = inputs.get("name", name)
            endpoint = f"https://{hashlib.sha256(cluster.encode()).hexdigest()[:32].upper()}.gr7.{region}.eks.amazonaws.com"
            kubeconfig = {
                "apiVersion": "v1", "kind": "Config", "current-context": cluster,
                "clusters": [{"name": cluster, "cluster": {
                    "server": endpoint, "certificate-authority-data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCm1vY2sKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="}}],
                "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
                "users": [{"name": cluster, "user": {"exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
                    "args": ["eks", "get-token", "--cluster-name", cluster, "--region", region]}}}],
            }  # fmt: skip
            oidc = f"oidc.eks.{region}.amazonaws.com/id/{hashlib.sha256(cluster.encode()).hexdigest()[:32].upper()}"
            out.update(
                kubeconfig=kubeconfig,
                kubeconfigJson=json.dumps(kubeconfig),
                oidcProviderUrl=oidc,
                oidcProviderArn=f"arn:aws:iam::{ACCOUNT}:oidc-provider/{oidc}",
                clusterSecurityGroupId=fake_id(cluster + "c", "sg"),
                nodeSecurityGroupId=fake_id(cluster + "n", "sg"),
            )
        return rid, out

    def call(self, token: str, args: dict[str, Any], region: str) -> dict[str, Any] | None:
        if token == "aws:eks/getCluster:getCluster":  # the EKS-made cluster security group
            name = args.get("name", "")
            return {"name": name, "id": name, "vpcConfig": {
                "clusterSecurityGroupId": fake_id(name + "-eks", "sg"), "controlPlaneEgressMode": "",
                "endpointPrivateAccess": True, "endpointPublicAccess": True, "publicAccessCidrs": [],
                "securityGroupIds": [], "subnetIds": [], "vpcId": ""}}  # fmt: skip
        if token == "aws:ecr/getAuthorizationToken:getAuthorizationToken":
            return {
                "userName": "AWS",
                "password": "mock-ecr-password",
                "authorizationToken": "QVdTOm1vY2stZWNyLXBhc3N3b3Jk",
                "proxyEndpoint": f"https://{ACCOUNT}.dkr.ecr.{region}.amazonaws.com",
                "expiresAt": "2099-01-01T00:00:00Z",
                "id": region,
            }
        return None
