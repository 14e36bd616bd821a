"""The GPU check as a process, without a GPU: it runs with the interpreter it is given, refuses
in one line where there is no GPU, its rows pass on CPU (--self-test), and the dependencies it
stages complete a bare Python that has only torch."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO

sys.path.insert(0, str(REPO))
from bench import gpu_check, gpu_deps  # noqa: E402

SCRIPT = str(REPO / "bench" / "gpu_check.sh")
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: run the check")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "PYTHONPATH")}
    return dict(env, **extra)


@no_gpu
def test_it_refuses_without_a_gpu_in_one_line():
    r = subprocess.run([SCRIPT], capture_output=True, text=True, timeout=300, env=_env(PYTHON=sys.executable))
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "no usable GPU" in r.stderr, r.stderr
    assert "PASS" not in r.stdout


@no_gpu
def test_without_PYTHON_it_runs_the_active_interpreter_not_a_guessed_venv(tmp_path):
    """A clone without .venv failed here before: the script preferred ./.venv/bin/python,
    else a python3 without torch. Now the python3 first on PATH is the one it runs."""
    marker = tmp_path / "ran"
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\necho "$@" >> {marker}\nexec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    env = _env(PATH=f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run([SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 1 and "no usable GPU" in r.stderr, r.stderr
    assert "bench/gpu_check.py" in marker.read_text()


# One row of each kind (the other algorithms' rows are the same code with another spec;
# `bench/gpu_check.sh --self-test` runs them all, docs/gpu.md gives its timings).
SELF_TEST_ROWS = [
    "algorithm/sync",
    "resume",
    "precision",
    "throughput",
    "ps/pinned",
    "metrics/cpu",
    "multi/sync",
    "local-nodes/2",
]


@pytest.mark.timeout(1800)  # six launches: about a minute idle, several on a busy 2-core machine
def test_the_rows_pass_on_cpu():
    """The check's logic on CPU: a launched run, a kill and resume, precision, throughput
    against the raw loop (its ratio is judged on GPUs only), a live /metrics, and the
    multi-GPU rows with two gloo processes standing in for two GPUs."""
    only = [a for row in SELF_TEST_ROWS for a in ("--only", row)]
    # a loaded 2-core machine is far slower than a GPU host: no 7-minute bound here
    r = subprocess.run(
        [SCRIPT, "--self-test", *only],
        capture_output=True,
        text=True,
        timeout=1800,
        env=_env(PYTHON=sys.executable, GPU_CHECK_TIMEOUT_S="1700"),
    )
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    rows = {
        line.split("|")[1].strip(): line.split("|")[2].strip()
        for line in r.stdout.splitlines()
        if line.startswith("| ") and "---" not in line
    }
    rows.pop("check")
    want = set(SELF_TEST_ROWS) - {"throughput"} | {"throughput/fp32", "throughput/default"}
    assert set(rows) == want
    assert rows.pop("ps/pinned") == "SKIP"  # pinning needs CUDA
    assert set(rows.values()) == {"PASS"}
    planned = {name for name, _, _ in gpu_check.plan(Path("."), gpu_check.self_test_mode())}
    assert set(SELF_TEST_ROWS) <= planned


def test_the_staged_distributions_complete_a_python_that_has_only_torch(tmp_path):
    """A bare interpreter (no site-packages) given torch, its own dependencies and numpy, plus
    exactly the distributions scripts/stage-gpu-deps stages (here this environment's copies of
    them), imports everything a worker, the launcher and the check import."""
    site = tmp_path / "site"
    site.mkdir()
    torch_deps = {
        r.split(";")[0].split()[0].split("=")[0].split("<")[0].split(">")[0]
        for r in metadata.requires("torch") or []
        if "extra ==" not in r
    }
    for dist in {"torch", "numpy", *torch_deps, *gpu_deps.STAGED}:
        try:
            files = metadata.distribution(dist).files or []
        except metadata.PackageNotFoundError:
            continue  # a platform-only dependency of torch this machine does not have
        for f in files:
            top = f.parts[0]
            src = Path(f.locate()).parents[len(f.parts) - 1] / top
            if top.endswith(".dist-info") or top == ".." or not src.exists():
                continue
            dest = site / top
            if not dest.exists():
                dest.symlink_to(src)
    code = (
        "import alchemist_jobs.runtime.trainer, alchemist_jobs.local_backend, "
        "alchemist_jobs.runtime.bootstrap, alchemist_jobs.runtime.parameter_server, "
        "alchemist_jobs.runtime.system_metrics, pynvml, psutil, bench.gpu_check, sys; "
        "from torch.utils.tensorboard import SummaryWriter; "
        f"SummaryWriter(log_dir={str(tmp_path / 'tb')!r}).close(); "
        "from alchemist_jobs.spec import JobSpec; JobSpec(name='x', task={'builtin': 'digits'}); "
        "print(sorted(m for m in sys.modules if '.' not in m))"
    )
    r = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=_env(PYTHONPATH=f"{site}:{REPO}"),
    )
    assert r.returncode == 0, r.stderr[-2000:]
