"""A script worker's exit path (runtime/bootstrap.py `_exit_before_teardown`) flushes what the
program left open and adds nothing of its own to the worker's log."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

PROGRAM = """
import torch.distributed as dist  # holds the deprecated `reduce_op`, which warns when probed
from alchemist_jobs.runtime.bootstrap import _exit_before_teardown
f = open({path!r}, "w")
f.write("unflushed")
_exit_before_teardown(0)
"""


def test_the_exit_path_flushes_open_files_and_prints_no_warning(tmp_path):
    out = tmp_path / "left-open.txt"
    r = subprocess.run(
        [sys.executable, "-W", "default", "-c", PROGRAM.format(path=str(out))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "unflushed"
    assert "Warning" not in r.stderr, r.stderr
