"""An add-on with its own cloud identity: an IAM role for one service account (IRSA), then its chart or EKS add-on."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi

from infra.versions import ChartPin

ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"


def irsa_trust_policy(oidc_arn: pulumi.Input[str], oidc_url: pulumi.Input[str],
                      namespace: str, service_account: str) -> pulumi.Output[str]:  # fmt: skip
    """An IAM trust policy letting one Kubernetes service account assume the role (IRSA)."""

    def policy(args: list[str]) -> str:
        arn, url = args
        issuer = url.removeprefix("https://")
        return json.dumps({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow",
                "Principal": {"Federated": arn},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {"StringEquals": {
                    f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                    f"{issuer}:aud": "sts.amazonaws.com",
                }},
            }],
        })  # fmt: skip

    return pulumi.Output.all(oidc_arn, oidc_url).apply(policy)


@dataclass
class CloudIdentityAddonArgs:
    """Who the add-on is (service account), what it may do (policies), and how it is installed.

    Exactly one of `chart` (a Helm chart; the service account is created by the chart at
    `service_account_path` in its values) or `eks_addon` (an EKS managed add-on by name).
    """

    aws_provider: Any
    oidc_provider_arn: pulumi.Input[str]
    oidc_provider_url: pulumi.Input[str]
    service_account: str
    namespace: str = "kube-system"
    policy_arns: list[str] = field(default_factory=list)
    inline_policy: dict[str, Any] | None = None
    chart: ChartPin | None = None
    values: dict[str, Any] = field(default_factory=dict)
    service_account_path: tuple[str, ...] = ("controller", "serviceAccount")
    helm_hooks: bool = False  # the chart needs Helm hooks: helm.v3.Release (helm.v4.Chart skips them)
    eks_addon: str | None = None
    cluster_name: pulumi.Input[str] | None = None
    configuration_values: dict[str, Any] | None = None
    depends_on: list[Any] = field(default_factory=list)


class CloudIdentityAddon(pulumi.ComponentResource):
    """IAM role (IRSA trust + policies) -> the chart or EKS add-on that runs as that role."""

    def __init__(self, name: str, args: CloudIdentityAddonArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:CloudIdentityAddon", name, None, opts)
        import pulumi_aws as aws

        if (args.chart is None) == (args.eks_addon is None):
            raise ValueError(f"{name}: give exactly one of chart and eks_addon")
        on_aws = pulumi.ResourceOptions(parent=self, provider=args.aws_provider)
        self.role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=irsa_trust_policy(
                args.oidc_provider_arn, args.oidc_provider_url, args.namespace, args.service_account
            ),
            opts=on_aws,
        )
        grants: list[Any] = [
            aws.iam.RolePolicyAttachment(
                f"{name}-policy-{i}", role=self.role.name, policy_arn=arn, opts=on_aws
            )
            for i, arn in enumerate(args.policy_arns)
        ]
        if args.inline_policy is not None:
            grants.append(aws.iam.RolePolicy(
                f"{name}-policy", role=self.role.id, policy=json.dumps(args.inline_policy), opts=on_aws
            ))  # fmt: skip
        # The add-on starts only once its role may act, or its first calls fail.
        after = pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *grants])
        if args.eks_addon is not None:
            self.installed = aws.eks.Addon(
                f"{name}-addon",
                cluster_name=args.cluster_name,
                addon_name=args.eks_addon,
                service_account_role_arn=self.role.arn,
                configuration_values=json.dumps(args.configuration_values)
                if args.configuration_values
                else None,
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                opts=pulumi.ResourceOptions.merge(after, pulumi.ResourceOptions(provider=args.aws_provider)),
            )
        else:
            self.installed = self._chart(name, args, after)
        self.register_outputs({"role_arn": self.role.arn})

    def _chart(self, name: str, args: CloudIdentityAddonArgs, opts: pulumi.ResourceOptions) -> Any:
        import pulumi_kubernetes as kubernetes

        pin = args.chart
        assert pin is not None
        values = _copy_dicts(args.values)  # a copy we may extend (values may hold Outputs)
        node = values
        for key in args.service_account_path:
            node = node.setdefault(key, {})
        node.update(
            {"create": True, "name": args.service_account, "annotations": {ROLE_ANNOTATION: self.role.arn}}
        )
        chart_type = kubernetes.helm.v3.Release if args.helm_hooks else kubernetes.helm.v4.Chart
        return chart_type(
            f"{name}-chart",
            chart=pin.chart,
            version=pin.version,
            repository_opts={"repo": pin.repo},
            namespace=args.namespace,
            values=values,
            opts=opts,
        )


def _copy_dicts(value: Any) -> Any:
    return {k: _copy_dicts(v) for k, v in value.items()} if isinstance(value, dict) else value
