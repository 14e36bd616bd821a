"""The training and interactive images: built from the lock file, tagged by content, pushed, exported by digest.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_images.py`."""

from __future__ import annotations

from infra_helpers import REPO, resources

from alchemist_jobs.image_context import context_files, context_hash, image_tag
from infra.images import BUILD_SCRIPT, LOGIN_SCRIPT
from infra.providers.aws.fabric import IMAGE_BUILD_ARGS


def test_builds_push_and_export_digests(renders):
    r = renders["aws-us-west-2"]
    builds = {
        b["name"]: b["inputs"] for b in resources(r, "command:local:Command") if b["name"].endswith("-build")
    }
    train, interactive = builds["images-train-build"], builds["images-interactive-build"]
    assert train["create"] == interactive["create"] == BUILD_SCRIPT
    assert train["environment"]["DOCKERFILE"] == "images/Dockerfile.train"
    assert (
        interactive["environment"]["BUILD_ARGS"]
        == "TRAIN_IMAGE=" + r["outputs"]["alchemist"]["images"]["train"]
    )
    # Tag and trigger are the content hash of each image's own build context (image_context),
    # with the training image's build arguments.
    args = {"TORCH_BUILD": "cuda", **IMAGE_BUILD_ARGS}
    for image, inputs in (("train", train), ("interactive", interactive)):
        assert inputs["triggers"][0] == context_hash(REPO, image, args)
        assert inputs["environment"]["TAG"] == image_tag(REPO, image, args)
    assert train["environment"]["TAG"] != interactive["environment"]["TAG"]
    assert "docker push" in BUILD_SCRIPT and "RepoDigests" in BUILD_SCRIPT


def test_registry_token_is_no_input_of_the_builds(renders):
    """Issue 9.7: ECR's token changes on every `pulumi up`; any input that changes re-runs a
    pulumi-command Command's create (pulumi-command v1.2.1, provider/pkg/provider/local/
    command.go: Update runs `update`, or `create` when there is none), and IMMUTABLE tags then
    collide. Only the login command may carry the token; the builds' inputs are the content."""
    for stack in ("aws-us-west-2", "secret:existing"):
        cmds = {c["name"]: c for c in resources(renders[stack], "command:local:Command")}
        for image in ("train", "interactive"):
            build = cmds[f"images-{image}-build"]
            assert build["secret_inputs"] == [], (stack, build["secret_inputs"])
            assert not {"REGISTRY_PASSWORD", "REGISTRY_USER"} & set(build["inputs"]["environment"])
        login = cmds["images-login"]
        assert login["inputs"]["create"] == LOGIN_SCRIPT
        assert login["inputs"]["environment"]["REGISTRY_PASSWORD"] == "[secret]"
    assert "REGISTRY_PASSWORD" not in BUILD_SCRIPT


def test_stacks_with_gpu_nodes_build_torchs_cuda_build_and_with_efa_the_efa_software(renders):
    """A stack's GPU pods run its training image: a CPU build of torch there fails every GPU
    job ("resources.gpu=1: no usable GPU"), and an EFA stack's image needs NCCL's net plugin
    (runtime/nccl_net.py stops the worker without it): the p4d stack's build names the AWS
    provider's fabric installer, by its path in the build context, and its version."""
    fabric = "FABRIC_INSTALL=infra/providers/aws/fabric-install FABRIC_VERSION=1.51.0"
    expected = {"dev": None, "onprem-lab": "TORCH_BUILD=cuda", "aws-us-west-2": f"{fabric} TORCH_BUILD=cuda",
                "p4d": f"{fabric} TORCH_BUILD=cuda"}  # fmt: skip
    # the installer is in the context the tag is computed from, so its content is in the tag
    assert "infra/providers/aws/fabric-install" in context_files(REPO, "train")
    for stack, build_args in expected.items():
        out = renders[stack]["outputs"]["alchemist"]
        assert (out["gpu"]["per_node"] > 0) == (build_args is not None), stack
        assert ("fabric" in out["gpu"]) == ("FABRIC_INSTALL=" in (build_args or "")), stack
        train = next(
            c["inputs"]
            for c in resources(renders[stack], "command:local:Command")
            if c["name"] == "images-train-build"
        )
        assert train["environment"].get("BUILD_ARGS") == build_args, stack
        args = dict(a.split("=") for a in (build_args or "").split())
        assert train["environment"]["TAG"] == image_tag(REPO, "train", args), stack
