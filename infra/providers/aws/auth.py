"""How jobs reach an EKS cluster, written into the contract's neutral `auth` (method
`presigned-request`): the request each user presigns with their own AWS identity, which the
jobs half signs without knowing whose it is (alchemist_jobs/kubernetes/presigned_token.py).

The token is what `aws eks get-token` makes (awscli customizations/eks/get_token.py, and
aws-iam-authenticator pkg/token/token.go, which verifies it): `k8s-aws-v1.` + base64url
(unpadded) of a presigned STS GetCallerIdentity URL, valid 60 s, whose signature covers the
header `x-k8s-aws-id: <cluster name>`. The authenticator replays the URL against STS to learn
the caller, and the signed header ties the token to one cluster; EKS accepts it for 15 minutes.
"""

from __future__ import annotations

from typing import Any

import pulumi

METHOD = "presigned-request"
TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
URL_EXPIRES_S = 60  # as the aws CLI: the authenticator replays the URL at once
TOKEN_LIFETIME_S = 15 * 60  # what EKS accepts (aws-iam-authenticator's token expiry)


def cluster_auth(
    cluster_name: str,
    region: str,
    endpoint: pulumi.Input[str] | None = None,
    certificate_authority: pulumi.Input[str] | None = None,
) -> dict[str, Any]:
    """The stack output's `auth` (alchemist_jobs.contract.ClusterAuth) for an EKS cluster."""
    auth: dict[str, Any] = {
        "method": METHOD,
        "label": "EKS cluster",
        "cluster": cluster_name,
        "region": region,
        "server": endpoint,
        "certificate_authority": certificate_authority,
        "kubeconfig_command": f"aws eks update-kubeconfig --name {cluster_name} --region {region}",
        "request": {
            "service": "sts",
            "operation": "get_caller_identity",
            "header": CLUSTER_ID_HEADER,
            "header_value": cluster_name,
            "token_prefix": TOKEN_PREFIX,
            "expires_s": URL_EXPIRES_S,
            "token_lifetime_s": TOKEN_LIFETIME_S,
        },
        # where the CLI looks up the API server and its CA when the output lacks them
        "lookup": {
            "service": "eks",
            "operation": "describe_cluster",
            "params": {"name": cluster_name},
            "server_field": "cluster.endpoint",
            "certificate_authority_field": "cluster.certificateAuthority.data",
        },
    }
    return {k: v for k, v in auth.items() if v is not None}
