"""The training image's network fabric hook when no provider names an installer:
images/no-fabric-install, run as the Dockerfile runs it, installs nothing and prints nothing,
and refuses a version meant for a provider's installer in one line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NO_OP = REPO / "images" / "no-fabric-install"


def _run(tmp_path: Path, version: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TMPDIR": str(tmp_path), "TORCH_BUILD": "cpu"}
    return subprocess.run(["sh", str(NO_OP), version], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_the_default_installs_nothing(tmp_path):
    done = _run(tmp_path, "")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert list(tmp_path.iterdir()) == []


def test_a_version_without_a_providers_installer_is_refused(tmp_path):
    done = _run(tmp_path, "1.51.0")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "FABRIC_VERSION=1.51.0 without FABRIC_INSTALL; accepted: a provider's installer "
        "(infra/providers/NAME/fabric-install) with its version, or neither"
    )
    assert done.stdout == "" and list(tmp_path.iterdir()) == []
