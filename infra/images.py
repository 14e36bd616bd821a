"""The training and interactive images, built from images/ and pushed to the stack's registry; digests exported."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_command as command

from infra.cluster import Registry

IMAGES = ("train", "interactive")
# Everything an image is built from: a change to any of these rebuilds and re-pushes it.
BUILD_INPUTS = ("images/Dockerfile.train", "images/Dockerfile.interactive", "requirements.lock",
                "pyproject.toml", "README.md")  # fmt: skip

# Runs on the deployer's Docker. Only the digest goes to stdout, so it becomes the output;
# the registry password comes in through the (secret) environment, never the command line.
BUILD_SCRIPT = r"""set -euo pipefail
if [ -n "${REGISTRY_PASSWORD:-}" ]; then
  printf '%s' "$REGISTRY_PASSWORD" | docker login --username "$REGISTRY_USER" --password-stdin "$REGISTRY_HOST" >&2
fi
docker build --file "$DOCKERFILE" --tag "$IMAGE:$TAG" ${BUILD_ARG:+--build-arg "$BUILD_ARG"} . >&2
docker push "$IMAGE:$TAG" >&2
docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$IMAGE:$TAG" \
  | grep "^$IMAGE@" | head -n 1 | cut -d @ -f 2
"""


def source_hash(repo_root: Path) -> str:
    """A hash of every file the images are built from (Dockerfiles, lock, package source)."""
    h = hashlib.sha256()
    files = [repo_root / p for p in BUILD_INPUTS]
    files += sorted((repo_root / "alchemist_jobs").rglob("*.py"))
    for path in files:
        h.update(str(path.relative_to(repo_root)).encode())
        h.update(path.read_bytes() if path.exists() else b"<absent>")
    return h.hexdigest()


@dataclass
class ImagesArgs:
    stack: str
    registry: Registry
    repo_root: Path
    version: str  # the package version, the first part of every tag
    aws_provider: Any | None = None  # set when the registry is ECR


class Images(pulumi.ComponentResource):
    """Build both images on the deployer's Docker, push them, export `repo@sha256:digest` refs."""

    def __init__(self, name: str, args: ImagesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:Images", name, None, opts)
        reg = args.registry
        digest_of = source_hash(args.repo_root)
        tag = f"{args.version}-{digest_of[:12]}"
        repos: dict[str, pulumi.Input[str]] = {}
        user, password, host = reg.user, reg.password, reg.host
        if reg.ecr_repositories:
            import pulumi_aws as aws

            on_aws = pulumi.ResourceOptions(parent=self, provider=args.aws_provider)
            ecr = {
                image: aws.ecr.Repository(
                    f"{name}-{image}-repo",
                    name=f"alchemist/{args.stack}/{image}",
                    image_tag_mutability="IMMUTABLE",  # tags carry the source hash
                    image_scanning_configuration={"scan_on_push": True},
                    encryption_configurations=[{"encryption_type": "AES256"}],
                    force_delete=True,  # `pulumi destroy` removes the images with the repository
                    opts=on_aws,
                )
                for image in IMAGES
            }
            repos = {image: repo.repository_url for image, repo in ecr.items()}
            token = aws.ecr.get_authorization_token_output(
                registry_id=ecr["train"].registry_id, opts=pulumi.InvokeOutputOptions(provider=args.aws_provider)
            )
            user, password = token.user_name, pulumi.Output.secret(token.password)
            host = token.proxy_endpoint.apply(lambda e: e.removeprefix("https://"))
        else:
            repos = {image: f"{reg.prefix}/{image}" for image in IMAGES}

        self.refs: dict[str, pulumi.Output[str]] = {}
        previous: list[Any] = []
        for image in IMAGES:
            env: dict[str, pulumi.Input[str]] = {
                "IMAGE": repos[image],
                "TAG": tag,
                "DOCKERFILE": f"images/Dockerfile.{image}",
                "REGISTRY_HOST": host,
            }
            if image == "interactive":
                env["BUILD_ARG"] = pulumi.Output.concat("TRAIN_IMAGE=", self.refs["train"])
            if password is not None:
                env["REGISTRY_USER"] = user or ""
                env["REGISTRY_PASSWORD"] = pulumi.Output.secret(password)
            build = command.local.Command(
                f"{name}-{image}-build",
                create=BUILD_SCRIPT,
                interpreter=["/bin/bash", "-c"],
                dir=str(args.repo_root),
                environment=env,
                triggers=[digest_of, repos[image]],
                logging=command.local.Logging.STDERR,
                opts=pulumi.ResourceOptions(parent=self, depends_on=previous),
            )
            previous = [build]
            self.refs[image] = pulumi.Output.concat(repos[image], "@", build.stdout.apply(lambda s: s.strip()))
        self.register_outputs(dict(self.refs))
