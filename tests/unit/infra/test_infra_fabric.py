"""A GPU node's network fabric is data its provider supplies: the neutral queueing and image
components take it from the provider registry and the cluster's facts, naming no fabric."""

from __future__ import annotations

from pathlib import Path

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
