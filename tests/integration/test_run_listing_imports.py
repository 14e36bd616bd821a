"""`list` and `status` start fast: in a fresh interpreter neither imports torch (nor numpy)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.unit.test_run_listing import many  # noqa: F401 (the fixture)


def test_listing_imports_no_training_stack(tmp_path, many):  # noqa: F811 (the fixture)
    """`list` and `status` start fast: neither imports torch (nor numpy)."""
    import subprocess
    import sys

    code = (
        "import sys, contextlib, io; from alchemist_jobs.cli import main\n"
        "for argv in (['list', '--json'], ['list'], ['status', sys.argv[1], '--json']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        assert main([*argv, '--home', sys.argv[2]]) == 0\n"
        "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, many[0].run_id, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
