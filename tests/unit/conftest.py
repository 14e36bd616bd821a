"""The unit tier runs in-process: a test here that starts a process (the CLI, a job, a render
in a subprocess, a helper binary) fails at that call, naming the tier it belongs to.

`scripts/test --fast` is the inner loop because of this rule: the whole tier takes a couple
of minutes on two cores only while no test in it waits on another process.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess

import pytest

MESSAGE = (
    "a unit test starts no process ({call}); a test that does belongs in tests/integration "
    "(or tests/system for a rendered stack)"
)


def _refuse(call: str):
    def refuse(*_args, **_kwargs):
        raise AssertionError(MESSAGE.format(call=call))

    return refuse


@pytest.fixture(autouse=True)
def _no_process_is_started(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("subprocess"))
    monkeypatch.setattr(_posixsubprocess, "fork_exec", _refuse("fork_exec"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"os.{name}"))
    yield
