"""The training and interactive images: built from the lock file, tagged by content, pushed, exported by digest."""

from __future__ import annotations

import re
import shutil

from infra_helpers import REPO, resources

from alchemist_jobs.image_context import context_files, context_hash, image_tag
from infra.images import BUILD_SCRIPT, LOGIN_SCRIPT


def test_training_image_installs_the_lock_then_the_package():
    text = (REPO / "images" / "Dockerfile.train").read_text()
    lock = text.index("pip install --require-hashes --no-deps -r runtime.txt")
    # The runtime section, plus the cuda section for TORCH_BUILD=cuda only.
    assert 'cpu) sections=runtime ;; cuda) sections="runtime cuda"' in text
    assert text.index("lock-sections $sections") < lock < text.index("pip install --no-deps .")
    assert "ENTRYPOINT" not in text  # pods run `torchrun ...` as their command
    assert re.search(r"^USER 1000:1000$", text, re.M)


def test_interactive_image_is_the_training_image_plus_jupyterlab():
    text = (REPO / "images" / "Dockerfile.interactive").read_text()
    assert "FROM ${TRAIN_IMAGE}" in text
    # JupyterLab comes from the lock's interactive section, hash-checked, never pinned ad hoc.
    assert "lock-sections interactive" in text and "--require-hashes" in text
    assert not re.search(r"pip install[^\n]*jupyter", text, re.I)


def test_default_base_is_pinned_by_digest():
    text = (REPO / "images" / "Dockerfile.train").read_text()
    assert re.search(r"^ARG BASE_IMAGE=\S+:\S+@sha256:[0-9a-f]{64}$", text, re.M)


def test_build_context_sends_only_what_the_image_copies():
    ignore = (REPO / "images" / "Dockerfile.train.dockerignore").read_text().split()
    assert context_files(REPO, "interactive") == ["requirements.lock", "scripts/lock-sections"]
    train = context_files(REPO, "train")
    assert {"requirements.lock", "scripts/lock-sections", "pyproject.toml", "README.md", "LICENSE",
            "alchemist_jobs/spec.py"} <= set(train)
    assert all(p in ("requirements.lock", "scripts/lock-sections", "pyproject.toml", "README.md", "LICENSE",
                     "images/efa-install")
               or p.startswith(("alchemist_jobs/", "monitoring/")) for p in train)
    # pyproject.toml packages monitoring/ inside alchemist_jobs: the install needs it
    assert "monitoring/rules/alchemist.rules.yaml" in train
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in train)


def test_builds_push_and_export_digests(renders):
    r = renders["aws-us-west-2"]
    builds = {b["name"]: b["inputs"] for b in resources(r, "command:local:Command") if b["name"].endswith("-build")}
    train, interactive = builds["images-train-build"], builds["images-interactive-build"]
    assert train["create"] == interactive["create"] == BUILD_SCRIPT
    assert train["environment"]["DOCKERFILE"] == "images/Dockerfile.train"
    assert interactive["environment"]["BUILD_ARGS"] == "TRAIN_IMAGE=" + r["outputs"]["alchemist"]["images"]["train"]
    # Tag and trigger are the content hash of each image's own build context (image_context),
    # with the training image's build arguments.
    args = {"TORCH_BUILD": "cuda", "EFA": "1"}
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


def test_builds_for_linux_amd64_whatever_the_deployer_runs():
    for line in BUILD_SCRIPT.splitlines():
        if re.search(r"docker (build|pull)", line):
            assert "--platform linux/amd64" in line, line


def _copy_tree(tmp_path):
    for path in ("images", "alchemist_jobs", "monitoring", "scripts"):
        shutil.copytree(REPO / path, tmp_path / path, ignore=shutil.ignore_patterns("__pycache__"))
    for path in ("requirements.lock", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / path, tmp_path / path)
    return tmp_path


def test_context_hash_follows_what_the_builder_sends(tmp_path):
    root = _copy_tree(tmp_path)
    train, interactive = context_hash(root, "train"), context_hash(root, "interactive")
    assert (train, interactive) == (context_hash(REPO, "train"), context_hash(REPO, "interactive"))
    # Files the .dockerignore keeps out change nothing.
    (root / "docs").mkdir()
    (root / "docs" / "notes.md").write_text("x\n")
    (root / "alchemist_jobs" / "__pycache__").mkdir()
    (root / "alchemist_jobs" / "__pycache__" / "spec.cpython-311.pyc").write_bytes(b"\0")
    assert context_hash(root, "train") == train
    # A new module changes the training image, and so the interactive image built on it.
    (root / "alchemist_jobs" / "new_module.py").write_text("x = 1\n")
    assert context_hash(root, "train") != train
    assert context_hash(root, "interactive") != interactive
    # So do a pin and a build argument (another base image).
    before = context_hash(root, "train")
    with (root / "requirements.lock").open("a") as f:
        f.write("extra==1.0\n")
    assert context_hash(root, "train") != before
    after = context_hash(root, "train")
    assert context_hash(root, "train", {"BASE_IMAGE": "debian:12"}) != after


def test_stacks_with_gpu_nodes_build_torchs_cuda_build_and_with_efa_the_efa_software(renders):
    """A stack's GPU pods run its training image: a CPU build of torch there fails every GPU
    job ("resources.gpu=1: no usable GPU"), and an EFA stack's image needs NCCL's net plugin
    (runtime/nccl_net.py stops the worker without it)."""
    expected = {"dev": None, "onprem-lab": "TORCH_BUILD=cuda", "aws-us-west-2": "EFA=1 TORCH_BUILD=cuda"}
    for stack, build_args in expected.items():
        out = renders[stack]["outputs"]["alchemist"]
        assert (out["gpu"]["per_node"] > 0) == (build_args is not None), stack
        assert ("efa" in out["gpu"]) == ("EFA=1" in (build_args or "")), stack
        train = next(c["inputs"] for c in resources(renders[stack], "command:local:Command")
                     if c["name"] == "images-train-build")
        assert train["environment"].get("BUILD_ARGS") == build_args, stack
        args = dict(a.split("=") for a in (build_args or "").split())
        assert train["environment"]["TAG"] == image_tag(REPO, "train", args), stack


def test_a_stacks_frameworks_are_a_build_argument_of_its_training_image():
    """`alchemist:images: {frameworks: [...]}` puts TensorFlow or JAX into the stack's training
    image (FRAMEWORKS, one spelling per set as images/build writes it), and so into its tag."""
    import pytest
    from test_infra_config import engine_config

    from infra.config import StackConfigError, parse
    from infra.images import ImagesArgs

    cfg = parse(engine_config("dev", {"alchemist:images": {"frameworks": ["tensorflow", "jax", "jax"]}}))
    args = ImagesArgs(stack="dev", registry=None, repo_root=REPO, version="0",
                      frameworks=tuple(cfg.images.frameworks))
    assert args.train_build_args() == {"FRAMEWORKS": "jax,tensorflow"}
    assert image_tag(REPO, "train", args.train_build_args()) != image_tag(REPO, "train", {})
    assert parse(engine_config("dev", {})).images.frameworks == []
    with pytest.raises(StackConfigError) as e:
        parse(engine_config("dev", {"alchemist:images": {"frameworks": ["pytorch"]}}))
    assert str(e.value).startswith("alchemist:images.frameworks[0] = 'pytorch' is not accepted")
