"""processes.alive reads a pid from a run's own files (run.json's launcher_pid, a worker's
record), which a damaged or hostile file may fill with anything JSON holds: it answers False
for what no process can be, instead of raising (the CLI fuzz test found 2147483680 raising
OverflowError from os.kill in `alchemist list`)."""

from __future__ import annotations

import os

from alchemist_jobs.processes import alive


def test_a_pid_no_process_can_have_is_not_alive():
    for pid in (2**31 + 32, 2**63, 4194305, -1, 0, True, 1.0, "1", None):
        assert alive(pid) is False, pid


def test_this_process_is_alive():
    assert alive(os.getpid())
