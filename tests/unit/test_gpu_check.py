"""The GPU check refuses to run, loudly and in one line, where there is no GPU."""

from __future__ import annotations

import subprocess

import pytest
import torch

from tests.conftest import REPO


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: run the check itself")
def test_gpu_check_fails_loudly_without_a_gpu():
    r = subprocess.run([str(REPO / "bench" / "gpu_check.sh")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "no usable GPU" in r.stderr
    assert "PASS" not in r.stdout
