"""`alchemist interactive` on the local stack: a real shell with a worker's environment (moved
from tests/unit/k8s/test_k8s_interactive.py: it starts the CLI and a shell)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.unit.k8s.conftest import REPO


def test_local_interactive_is_a_shell_with_a_workers_environment(tmp_path):
    home = tmp_path / "home"
    script = (
        'echo "stack=$ALCHEMIST_STACK root=$ALCHEMIST_SHARED_ROOT '
        'tcp=$TORCH_DISABLE_SHARE_RDZV_TCP_STORE"\n'
        f"{sys.executable} -c \"import alchemist_jobs.runtime.bootstrap; print('importable')\"\n"
        "exit 3\n"
    )
    # No PYTHONPATH: the shell's python finds the package only through the worker's.
    env = dict(os.environ, SHELL="/bin/sh", PYTHONPATH="")
    cli = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); from alchemist_jobs.cli import main; "
        f"sys.exit(main(['interactive', '--home', {str(home)!r}]))"
    )
    res = subprocess.run(
        [sys.executable, "-c", cli],
        input=script,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 3  # the shell's own exit status
    assert f"stack=local root={home} tcp=1" in res.stdout
    assert "importable" in res.stdout  # the package is on the worker's PYTHONPATH
