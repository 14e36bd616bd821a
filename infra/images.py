"""The training and interactive images, built from images/ and pushed to the stack's registry; digests exported."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_command as command

from alchemist_jobs.image_context import IMAGES, context_hash, image_tag
from infra.cluster import Registry

# Runs on the deployer's Docker, for linux/amd64 whatever the deployer's own architecture. A tag
# already in the registry holds the same content (the tag is the content hash; a hosted
# registry's tags are immutable), so it is pulled, not rebuilt. Only the digest goes to stdout: it is the output.
BUILD_SCRIPT = r"""set -euo pipefail
if docker manifest inspect "$IMAGE:$TAG" >/dev/null 2>&1; then
  docker pull --platform linux/amd64 "$IMAGE:$TAG" >&2
else
  args=()
  for a in ${BUILD_ARGS:-}; do args+=(--build-arg "$a"); done
  docker build --platform linux/amd64 --file "$DOCKERFILE" --tag "$IMAGE:$TAG" ${args[@]+"${args[@]}"} . >&2
  docker push "$IMAGE:$TAG" >&2
fi
docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$IMAGE:$TAG" \
  | grep "^$IMAGE@" | head -n 1 | cut -d @ -f 2
"""
# The registry login is its own command: its short-lived password (a hosted registry's token can
# change on every `pulumi up`) would otherwise be an input of the builds and re-run them each time. The password
# comes in through the (secret) environment, never the command line.
LOGIN_SCRIPT = r"""set -euo pipefail
printf '%s' "$REGISTRY_PASSWORD" | docker login --username "$REGISTRY_USER" --password-stdin "$REGISTRY_HOST" >&2
"""


@dataclass
class ImagesArgs:
    stack: str
    registry: Registry
    repo_root: Path
    version: str  # the package version (the tag's first part comes from image_context)
    gpu_nodes: bool = False  # the cluster has GPU nodes: torch's CUDA build (TORCH_BUILD=cuda)
    # what the GPU nodes' network fabric needs in the training image (ClusterFacts.fabric_build_args)
    fabric_build_args: dict[str, str] = field(default_factory=dict)
    frameworks: tuple[str, ...] = ()  # images.frameworks: TensorFlow, JAX (FRAMEWORKS=...)

    def train_build_args(self) -> dict[str, str]:
        """The training image's build arguments (images/Dockerfile.train); the tags of both
        images are hashed with them, as images/build does."""
        out = {"TORCH_BUILD": "cuda"} if self.gpu_nodes else {}
        if self.gpu_nodes:
            out.update(self.fabric_build_args)
        if self.frameworks:  # one spelling per set, as images/build writes it
            out["FRAMEWORKS"] = ",".join(sorted(set(self.frameworks)))
        return out


class Images(pulumi.ComponentResource):
    """Build both images on the deployer's Docker, push them, export `repo@sha256:digest` refs."""

    def __init__(self, name: str, args: ImagesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:Images", name, None, opts)
        reg = args.registry
        repos: dict[str, pulumi.Input[str]] = {}
        user, password, host = reg.user, reg.password, reg.host
        if reg.hosted is not None:
            hosted = reg.hosted.repositories(name, args.stack, IMAGES, self)
            repos, host = dict(hosted.urls), hosted.host
            user, password = hosted.user, pulumi.Output.secret(hosted.password)
        else:
            repos = {image: f"{reg.prefix}/{image}" for image in IMAGES}

        previous: list[Any] = []
        if password is not None:
            login = command.local.Command(
                f"{name}-login",
                create=LOGIN_SCRIPT,
                interpreter=["/bin/bash", "-c"],
                environment={
                    "REGISTRY_HOST": host,
                    "REGISTRY_USER": user or "",
                    "REGISTRY_PASSWORD": pulumi.Output.secret(password),
                },
                logging=command.local.Logging.STDERR,
                opts=pulumi.ResourceOptions(parent=self),
            )
            previous = [login]
        self.refs: dict[str, pulumi.Output[str]] = {}
        train_args = args.train_build_args()
        for image in IMAGES:
            # Nothing here may change between two `up`s of the same tree: any change re-runs it.
            env: dict[str, pulumi.Input[str]] = {
                "IMAGE": repos[image],
                "TAG": image_tag(args.repo_root, image, train_args),
                "DOCKERFILE": f"images/Dockerfile.{image}",
            }
            if image == "train" and train_args:
                env["BUILD_ARGS"] = " ".join(f"{k}={v}" for k, v in sorted(train_args.items()))
            if image == "interactive":
                env["BUILD_ARGS"] = pulumi.Output.concat("TRAIN_IMAGE=", self.refs["train"])
            build = command.local.Command(
                f"{name}-{image}-build",
                create=BUILD_SCRIPT,
                interpreter=["/bin/bash", "-c"],
                dir=str(args.repo_root),
                environment=env,
                triggers=[context_hash(args.repo_root, image, train_args), repos[image]],
                logging=command.local.Logging.STDERR,
                opts=pulumi.ResourceOptions(parent=self, depends_on=previous),
            )
            previous = [build]
            self.refs[image] = pulumi.Output.concat(
                repos[image], "@", build.stdout.apply(lambda s: s.strip())
            )
        self.register_outputs(dict(self.refs))
