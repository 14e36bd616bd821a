"""A listing removes the index temp files of listings that died (a real process that has exited
gives the dead pid)."""

from __future__ import annotations

import os

from alchemist_jobs import run_index
from alchemist_jobs.local_backend import LocalScheduler
from tests.unit.test_home_and_index import indexed  # noqa: F401 (the fixture)


def test_orphan_temp_files_of_dead_listings_are_removed(indexed):  # noqa: F811 (the fixture)
    """A listing killed while it wrote the index leaves its temp file; the next one removes
    the temp files of processes that no longer exist (and leaves a live one's alone)."""
    import subprocess
    import sys

    root, path, _ = indexed
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    orphans = [
        path.with_name(f".{run_index.INDEX}.{dead}.tmp"),
        path.with_name(f".{run_index.INDEX}.{dead}.0123abcd.tmp"),
    ]
    live = path.with_name(f".{run_index.INDEX}.{os.getppid()}.0123abcd.tmp")
    for p in (*orphans, live):
        p.write_text("half an index")
    LocalScheduler(root).list()
    assert [p.exists() for p in orphans] == [False, False] and live.exists()
