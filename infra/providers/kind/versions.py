"""What the kind provider pins: kind's release, its node images by digest per Kubernetes minor, its local registry."""

from __future__ import annotations

# The node images kind v0.31.0 pre-built (its release notes list 1.31 to 1.35; 1.30 has none),
# for the minors of infra/versions.py KUBERNETES_VERSIONS.
KIND_VERSION = "v0.31.0"
KIND_NODE_IMAGES = {
    "1.32": "kindest/node:v1.32.11",
    "1.33": "kindest/node:v1.33.7",
    "1.34": "kindest/node:v1.34.3",
    "1.35": "kindest/node:v1.35.0",
}

# kind node images by digest (a tag can be re-pushed; a digest cannot), for the builds in
# KIND_NODE_IMAGES above. Source: the "Images pre-built for this release" list of the
# kind v0.31.0 release notes (https://github.com/kubernetes-sigs/kind/releases/tag/v0.31.0); the
# 1.35 digest is also kind v0.31.0's default, pkg/apis/config/defaults/image.go at tag v0.31.0.
# Images of one release only: kind supports a node image with the kind release it was built for.
KIND_NODE_DIGESTS = {
    "kindest/node:v1.32.11": "sha256:5fc52d52a7b9574015299724bd68f183702956aa4a2116ae75a63cb574b35af8",
    "kindest/node:v1.33.7": "sha256:d26ef333bdb2cbe9862a0f7c3803ecc7b4303d8cea8e814b481b09949d353040",
    "kindest/node:v1.34.3": "sha256:08497ee19eace7b4b5348db5c6a1591d7752b164530a36f855cb0f2bdcbadd48",
    "kindest/node:v1.35.0": "sha256:452d707d4862f52530247495d180205e029056831160e22870e37e3f6c1ac31f",
}


def kind_node_image(kubernetes_minor: str) -> str:
    """The kind node image of this Kubernetes minor, pinned by digest."""
    image = KIND_NODE_IMAGES[kubernetes_minor]
    return f"{image}@{KIND_NODE_DIGESTS[image]}"


# The registry kind pulls from on a laptop (the documented kind local-registry recipe).
LOCAL_REGISTRY_IMAGE = "registry:2.8.3"
