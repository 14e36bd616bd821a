"""The training and interactive images: built from the lock file, tagged by content, pushed, exported by digest."""

from __future__ import annotations

import re
import shutil

from infra_helpers import REPO

from alchemist_jobs.image_context import context_files, context_hash, image_tag
from infra.images import BUILD_SCRIPT


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
    assert context_files(REPO, "interactive") == ["requirements.lock", "scripts/lock-sections"]
    train = context_files(REPO, "train")
    assert {
        "requirements.lock",
        "scripts/lock-sections",
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "alchemist_jobs/spec.py",
    } <= set(train)
    assert all(
        p
        in (
            "requirements.lock",
            "scripts/lock-sections",
            "pyproject.toml",
            "README.md",
            "LICENSE",
            "images/no-fabric-install",
        )
        or re.fullmatch(r"infra/providers/\w+/fabric-install", p)
        or p.startswith(("alchemist_jobs/", "monitoring/"))
        for p in train
    )
    # pyproject.toml packages monitoring/ inside alchemist_jobs: the install needs it
    assert "monitoring/rules/alchemist.rules.yaml" in train
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in train)


def test_builds_for_linux_amd64_whatever_the_deployer_runs():
    for line in BUILD_SCRIPT.splitlines():
        if re.search(r"docker (build|pull)", line):
            assert "--platform linux/amd64" in line, line


def _copy_tree(tmp_path):
    for path in ("images", "alchemist_jobs", "monitoring", "scripts"):
        shutil.copytree(REPO / path, tmp_path / path, ignore=shutil.ignore_patterns("__pycache__"))
    for path in ("requirements.lock", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / path, tmp_path / path)
    for installer in (REPO / "infra" / "providers").glob("*/fabric-install"):  # FABRIC_INSTALL
        dest = tmp_path / installer.relative_to(REPO)
        dest.parent.mkdir(parents=True)
        shutil.copy2(installer, dest)
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
    (root / "infra" / "providers" / "aws" / "fabric.py").write_text("x = 1\n")  # the rest of infra/
    assert context_hash(root, "train") == train
    # A provider's fabric installer (FABRIC_INSTALL) is in the context: changing it is a new tag.
    with (root / "infra" / "providers" / "aws" / "fabric-install").open("a") as f:
        f.write("# changed\n")
    assert context_hash(root, "train") != train
    (root / "infra" / "providers" / "aws" / "fabric-install").write_bytes(
        (REPO / "infra" / "providers" / "aws" / "fabric-install").read_bytes()
    )
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


def test_a_stacks_frameworks_are_a_build_argument_of_its_training_image():
    """`alchemist:images: {frameworks: [...]}` puts TensorFlow or JAX into the stack's training
    image (FRAMEWORKS, one spelling per set as images/build writes it), and so into its tag."""
    import pytest
    from test_infra_config import engine_config

    from infra.config import StackConfigError, parse
    from infra.images import ImagesArgs

    cfg = parse(engine_config("dev", {"alchemist:images": {"frameworks": ["tensorflow", "jax", "jax"]}}))
    args = ImagesArgs(
        stack="dev", registry=None, repo_root=REPO, version="0", frameworks=tuple(cfg.images.frameworks)
    )
    assert args.train_build_args() == {"FRAMEWORKS": "jax,tensorflow"}
    assert image_tag(REPO, "train", args.train_build_args()) != image_tag(REPO, "train", {})
    assert parse(engine_config("dev", {})).images.frameworks == []
    with pytest.raises(StackConfigError) as e:
        parse(engine_config("dev", {"alchemist:images": {"frameworks": ["pytorch"]}}))
    assert str(e.value).startswith("alchemist:images.frameworks[0] = 'pytorch' is not accepted")
