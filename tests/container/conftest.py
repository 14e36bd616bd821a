"""Fixtures of the container tier: a base image, both images built from a clean copy of the
checkout, and the pieces a rendered job needs to run under podman. Skipped without podman.

Caching between runs of one machine: the debootstrap base image is kept under its tag, and
podman's layer cache makes an unchanged tree's rebuild cheap; a fresh machine builds all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# A registry-free base (images/debootstrap-base) unless the environment names another.
BASE = os.environ.get("ALCHEMIST_TEST_BASE_IMAGE", "localhost/alchemist-base:bookworm")
# runc and rlimits the sandboxed CI machines allow (images/containers.conf), unless the
# environment already chose podman's settings. Subprocesses (images/build) inherit it.
os.environ.setdefault("CONTAINERS_CONF", str(REPO / "images" / "containers.conf"))


# Building an image (the base by debootstrap, the training and interactive images, torch's
# 5.5 GB CUDA build) happens in a test or in the set-up of the first test that needs it, and
# takes minutes more on a loaded or slow machine than the suite's 300 s per test: whatever the
# container tier builds gets a timeout the slowest CI machine meets.
IMAGE_BUILD_TIMEOUT_S = 3600


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/container/" in str(item.fspath) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(IMAGE_BUILD_TIMEOUT_S))
    reason = None
    if not shutil.which("podman"):
        reason = "needs podman (scripts/setup installs it where apt-get is available)"
    elif os.geteuid() != 0:
        reason = "needs root (rootful podman with the runc runtime)"
    if reason:
        for item in items:
            if "tests/container/" in str(item.fspath):
                item.add_marker(pytest.mark.skip(reason=reason))


def _image_exists(ref: str) -> bool:
    return subprocess.run(["podman", "image", "exists", ref]).returncode == 0


@pytest.fixture(scope="session")
def base_image() -> str:
    if not _image_exists(BASE):
        if not BASE.startswith("localhost/"):
            subprocess.run(["podman", "pull", BASE], check=True)
        else:
            assert shutil.which("debootstrap"), "no base image and no debootstrap to make one"
            subprocess.run([str(REPO / "images" / "debootstrap-base"), BASE], check=True,
                           stdout=subprocess.DEVNULL, timeout=1800)
    return BASE


@pytest.fixture(scope="session")
def clean_checkout(tmp_path_factory) -> Path:
    """The tracked (and not ignored) files of the working tree, as a fresh clone would have them."""
    dest = tmp_path_factory.mktemp("checkout")
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, check=True, capture_output=True).stdout.split(b"\0")
    for rel in filter(None, (f.decode() for f in files)):
        src = REPO / rel
        if src.is_file() or src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel, follow_symlinks=False)
    return dest


@pytest.fixture(scope="session")
def images(base_image, clean_checkout) -> dict[str, str]:
    """{train, interactive}: references images/build printed, built from the clean checkout."""
    env = dict(os.environ, BUILDER="podman")
    proc = subprocess.run([str(clean_checkout / "images" / "build"), "--base", base_image],
                          cwd=clean_checkout, env=env, capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-5000:]
    refs = dict(line.split("=", 1) for line in proc.stdout.split())
    assert set(refs) == {"train", "interactive"}, proc.stdout
    return refs


@pytest.fixture(scope="session")
def jax_train_image(base_image, clean_checkout) -> str:
    """The training image with JAX (`images/build --frameworks jax`), for a JAX job's pods."""
    env = dict(os.environ, BUILDER="podman")
    proc = subprocess.run([str(clean_checkout / "images" / "build"), "--base", base_image,
                           "--frameworks", "jax", "--train-only"],
                          cwd=clean_checkout, env=env, capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-5000:]
    refs = dict(line.split("=", 1) for line in proc.stdout.split())
    assert set(refs) == {"train"}, proc.stdout
    return refs["train"]
