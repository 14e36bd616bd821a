"""The AWS provider's fabric installer (infra/providers/aws/fabric-install, which the training
image runs as its FABRIC_INSTALL) runs nothing from the EFA installer's tarball unless its signature
verifies against AWS's EFA key, pinned by fingerprint (EC2 user guide, "Get started with EFA
and NCCL": 4E90 91BC BB97 A96B 26B1 5E59 A054 80B1 DD2D 3CCC).

The tarball, key and signature here are made for the test with a real gpg and served over
real HTTP; the installer inside only records how it was called. The flags it must get are
the user guide's for containers ("Install the EFA software in a container")."""

from __future__ import annotations

import functools
import os
import subprocess
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "infra" / "providers" / "aws" / "fabric-install"
VERSION = "9.9.0"
INSTALLER = """#!/bin/sh
printf '%s\\n' "$*" > "$RECORD"
[ -s "$EFA_INSTALLER_KEY" ] && echo key >> "$RECORD"
"""


def _gpg(home: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "", *args],
        env={**os.environ, "GNUPGHOME": str(home)},
        check=True,
        capture_output=True,
        **kw,
    )


def _tarball(path: Path, body: str) -> None:
    src = path.parent / "src" / "aws-efa-installer"
    src.mkdir(parents=True, exist_ok=True)
    (src / "efa_installer.sh").write_text(body)
    (src / "efa_installer.sh").chmod(0o755)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src, arcname="aws-efa-installer")


@pytest.fixture
def served(tmp_path):
    """A signed installer on an HTTP server, and the test key's fingerprint."""
    home, site = tmp_path / "gnupg", tmp_path / "site"
    home.mkdir(mode=0o700)
    site.mkdir()
    try:
        _gpg(home, "--quick-gen-key", "Test EFA <efa@example.invalid>", "ed25519", "sign", "never")
        (site / "aws-efa-installer.key").write_bytes(_gpg(home, "--armor", "--export").stdout)
        colons = _gpg(home, "--with-colons", "--fingerprint", text=True).stdout
        fingerprint = next(ln.split(":")[9] for ln in colons.splitlines() if ln.startswith("fpr"))
        tarball = site / f"aws-efa-installer-{VERSION}.tar.gz"
        _tarball(tarball, INSTALLER)
        _gpg(home, "--detach-sign", "-o", f"{tarball}.sig", str(tarball))
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env={**os.environ, "GNUPGHOME": str(home)})
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(SimpleHTTPRequestHandler, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, name="efa-site", daemon=True)
    thread.start()
    try:
        yield site, f"http://127.0.0.1:{server.server_port}", fingerprint
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _install(
    tmp_path: Path, url: str, fingerprint: str | None, version: str = VERSION, torch_build: str = "cuda"
):
    env = {
        **os.environ,
        "EFA_INSTALLER_URL": url,
        "EFA_LDCONF_DIR": str(tmp_path / "ld"),
        "RECORD": str(tmp_path / "record"),
        "TORCH_BUILD": torch_build,
    }
    env.pop("EFA_INSTALLER_FINGERPRINT", None)
    if fingerprint:
        env["EFA_INSTALLER_FINGERPRINT"] = fingerprint
    return subprocess.run(["sh", str(SCRIPT), version], env=env, capture_output=True, text=True, timeout=120)


def test_a_signed_installer_runs_with_the_container_flags_and_the_plugin_goes_on_the_loader_path(
    tmp_path, served
):
    _, url, fingerprint = served
    done = _install(tmp_path, url, fingerprint)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "record").read_text().splitlines() == [
        "-y --skip-kmod --skip-limit-conf --no-verify --check-signatures",
        "key",
    ]
    assert (tmp_path / "ld" / "alchemist-efa.conf").read_text().split() == [
        "/opt/amazon/ofi-nccl/lib",
        "/opt/amazon/efa/lib",
    ]


def test_a_key_that_is_not_awss_is_refused_before_anything_runs(tmp_path, served):
    _, url, _ = served  # the server's key signs the tarball, but it is not AWS's EFA key
    done = _install(tmp_path, url, None)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert "not AWS's EFA key 4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC" in done.stderr
    assert not (tmp_path / "record").exists() and not (tmp_path / "ld").exists()


def test_a_tarball_changed_after_signing_is_refused(tmp_path, served):
    site, url, fingerprint = served
    _tarball(site / f"aws-efa-installer-{VERSION}.tar.gz", INSTALLER + "echo changed\n")
    done = _install(tmp_path, url, fingerprint)
    assert done.returncode == 1
    assert f"aws-efa-installer-{VERSION}.tar.gz does not verify" in done.stderr
    assert not (tmp_path / "record").exists()


def test_a_version_that_is_not_a_version_is_refused(tmp_path):
    done = _install(tmp_path, "http://127.0.0.1:9", None, "1.51.0;id")
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "fabric-install: version '1.51.0;id'; accepted: digits and dots, e.g. 1.51.0"
    )
    done = _install(tmp_path, "http://127.0.0.1:9", None, "")
    assert done.returncode == 2
    assert done.stderr.strip() == "fabric-install: version ''; accepted: digits and dots, e.g. 1.51.0"


def test_an_image_without_torchs_cuda_build_is_refused_before_anything_is_downloaded(tmp_path):
    """NCCL's net plugin serves GPUs only: with torch's CPU build the installer stops in one line."""
    done = _install(tmp_path, "http://127.0.0.1:9", None, VERSION, "cpu")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "fabric-install: TORCH_BUILD=cpu; accepted: cuda (NCCL's net plugin serves GPUs only)"
    )
    assert not (tmp_path / "record").exists() and not (tmp_path / "ld").exists()
