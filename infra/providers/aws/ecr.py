"""ECR: the images' repositories of an AWS stack, and the push login from ECR's authorization token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi

from infra.cluster_facts import HostedRepositories


class EcrRepositories:
    """The `HostedRegistry` of an AWS stack: one ECR repository per image, in the stack's account."""

    def __init__(self, aws_provider: Any):
        self.aws_provider = aws_provider

    def repositories(
        self, name: str, stack: str, images: Sequence[str], parent: pulumi.Resource
    ) -> HostedRepositories:
        import pulumi_aws as aws

        on_aws = pulumi.ResourceOptions(parent=parent, provider=self.aws_provider)
        ecr = {
            image: aws.ecr.Repository(
                f"{name}-{image}-repo",
                name=f"alchemist/{stack}/{image}",
                image_tag_mutability="IMMUTABLE",  # tags carry the source hash
                image_scanning_configuration={"scan_on_push": True},
                encryption_configurations=[{"encryption_type": "AES256"}],
                force_delete=True,  # `pulumi destroy` removes the images with the repository
                opts=on_aws,
            )
            for image in images
        }
        # ECR's token changes on every `pulumi up`: it reaches only the login command (infra/images.py)
        token = aws.ecr.get_authorization_token_output(
            registry_id=ecr[images[0]].registry_id,
            opts=pulumi.InvokeOutputOptions(provider=self.aws_provider),
        )
        return HostedRepositories(
            urls={image: repo.repository_url for image, repo in ecr.items()},
            host=token.proxy_endpoint.apply(lambda e: e.removeprefix("https://")),
            user=token.user_name,
            password=pulumi.Output.secret(token.password),
        )
