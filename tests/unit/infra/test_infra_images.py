"""The training and interactive images: built from the lock file, pushed, exported by digest."""

from __future__ import annotations

import re
import shutil

from infra_helpers import REPO, resources

from infra.images import BUILD_SCRIPT, source_hash


def test_training_image_installs_the_lock_then_the_package():
    text = (REPO / "images" / "Dockerfile.train").read_text()
    lock, package = text.index("pip install -r requirements.lock"), text.index("pip install --no-deps .")
    assert lock < package
    assert "ENTRYPOINT" not in text  # pods run `torchrun ...` as their command
    assert re.search(r"^USER 1000:1000$", text, re.M)


def test_interactive_image_is_the_training_image_plus_jupyterlab():
    text = (REPO / "images" / "Dockerfile.interactive").read_text()
    assert "FROM ${TRAIN_IMAGE}" in text
    assert re.search(r"pip install jupyterlab==\d+\.\d+\.\d+", text)


def test_build_context_sends_only_what_the_image_copies():
    ignore = (REPO / "images" / "Dockerfile.train.dockerignore").read_text().split()
    assert ignore[ignore.index("*"):][:5] == ["*", "!requirements.lock", "!pyproject.toml", "!README.md", "!alchemist_jobs/"]


def test_builds_push_and_export_digests(renders):
    r = renders["aws-us-west-2"]
    builds = {b["name"]: b["inputs"] for b in resources(r, "command:local:Command") if b["name"].endswith("-build")}
    train, interactive = builds["images-train-build"], builds["images-interactive-build"]
    assert train["create"] == interactive["create"] == BUILD_SCRIPT
    assert train["environment"]["DOCKERFILE"] == "images/Dockerfile.train"
    assert interactive["environment"]["BUILD_ARG"] == "TRAIN_IMAGE=" + r["outputs"]["alchemist"]["images"]["train"]
    assert train["triggers"][0] == source_hash(REPO)
    tag = train["environment"]["TAG"]
    assert tag.endswith(source_hash(REPO)[:12])
    assert "docker push" in BUILD_SCRIPT and "RepoDigests" in BUILD_SCRIPT


def test_source_hash_follows_the_lock_and_the_package(tmp_path):
    for path in ("images", "alchemist_jobs"):
        shutil.copytree(REPO / path, tmp_path / path, ignore=shutil.ignore_patterns("__pycache__"))
    for path in ("requirements.lock", "pyproject.toml"):
        shutil.copy(REPO / path, tmp_path / path)
    before = source_hash(tmp_path)
    assert source_hash(tmp_path) == before
    with (tmp_path / "requirements.lock").open("a") as f:
        f.write("extra==1.0\n")
    after_lock = source_hash(tmp_path)
    assert after_lock != before
    (tmp_path / "alchemist_jobs" / "new_module.py").write_text("x = 1\n")
    assert source_hash(tmp_path) != after_lock
