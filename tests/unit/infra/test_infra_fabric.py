"""A GPU node's network fabric is data its provider supplies: the neutral queueing and image
components take it from the provider registry and the cluster's facts, naming no fabric."""

from __future__ import annotations

import os
import re
from pathlib import Path

from alchemist_jobs.image_context import context_files, image_tag
from infra.images import ImagesArgs
from infra.providers import Provider, registry
from infra.providers.aws.fabric import EFA_RESOURCE, IMAGE_BUILD_ARGS
from infra.queueing import kueue_manager_config

REPO = Path(__file__).resolve().parents[3]


def test_every_providers_fabric_devices_are_left_out_of_kueue_quotas(monkeypatch):
    """Kueue never admits a request for a resource no ClusterQueue covers, so each provider's
    fabric resource is excluded, on every stack; one registered here counts too."""

    class Lab(Provider):
        name = "labnet"
        fabric_resource = "fabric.lab.test/rdma"

    monkeypatch.setattr(registry, "_registered", dict(registry._registered))
    registry.register(Lab())
    prefixes = kueue_manager_config()["resources"]["excludeResourcePrefixes"]
    assert prefixes == sorted({"fabric.lab.test/", EFA_RESOURCE.split("/")[0] + "/"})


def test_the_training_image_gets_the_fabrics_build_args_only_for_gpu_nodes():
    args = ImagesArgs(stack="s", registry=None, repo_root=REPO, version="0", gpu_nodes=True,
                      fabric_build_args=dict(IMAGE_BUILD_ARGS), frameworks=("jax",))  # fmt: skip
    assert args.train_build_args() == {"TORCH_BUILD": "cuda", **IMAGE_BUILD_ARGS, "FRAMEWORKS": "jax"}
    assert list(args.train_build_args()) == [
        "TORCH_BUILD",
        *IMAGE_BUILD_ARGS,
        "FRAMEWORKS",
    ]  # the tag hashes this order
    no_gpu = ImagesArgs(stack="s", registry=None, repo_root=REPO, version="0", fabric_build_args={"X": "1"})
    assert no_gpu.train_build_args() == {}


def test_the_providers_fabric_installer_is_in_the_training_images_context():
    """The AWS provider's EFA software reaches the image through the neutral hook: its installer,
    in its own package, named by path in the build context (FABRIC_INSTALL) with the version it
    installs (FABRIC_VERSION); the context the tag hashes holds it, so a change to it is a new
    tag, and no other file of infra/ is sent."""
    installer = IMAGE_BUILD_ARGS["FABRIC_INSTALL"]
    assert installer == "infra/providers/aws/fabric-install"
    assert os.access(REPO / installer, os.X_OK)
    assert re.fullmatch(r"[0-9]+(\.[0-9]+)+", IMAGE_BUILD_ARGS["FABRIC_VERSION"])
    assert set(IMAGE_BUILD_ARGS) == {"FABRIC_INSTALL", "FABRIC_VERSION"}
    train = context_files(REPO, "train")
    assert installer in train
    assert [p for p in train if p.startswith("infra/")] == sorted(
        p.relative_to(REPO).as_posix() for p in (REPO / "infra" / "providers").glob("*/fabric-install")
    )
    cuda = {"TORCH_BUILD": "cuda"}
    assert image_tag(REPO, "train", {**cuda, **IMAGE_BUILD_ARGS}) != image_tag(REPO, "train", cuda)


def test_the_default_fabric_installer_is_the_no_op_in_images():
    """Without a provider's installer the training image runs images/no-fabric-install, which
    installs nothing, and says so (ALCHEMIST_FABRIC_LIBRARIES=0)."""
    text = (REPO / "images" / "Dockerfile.train").read_text()
    assert re.search(r"^ARG FABRIC_INSTALL=images/no-fabric-install$", text, re.M)
    assert re.search(r"^ARG FABRIC_VERSION=$", text, re.M)
    assert "images/no-fabric-install" in context_files(REPO, "train")
    # the installer's layer comes before the Python packages: it outlives every pin change
    hook = text.index("COPY ${FABRIC_INSTALL} ")
    assert hook < text.index("pip install --require-hashes")
    assert text.index('"$FABRIC_VERSION"', hook) < text.index("ENV ALCHEMIST_FABRIC_LIBRARIES=", hook)
