"""Every `alchemist` command in the docs that can run here (no cluster, no job started) runs as
written, in process; some start a process of their own (`stack list` asks the checkout's infra
in a subprocess)."""

from __future__ import annotations

import contextlib
import io
import shlex

import pytest

from alchemist_jobs import cli
from tests.conftest import REPO
from tests.unit.test_docs import commands, runnable_here


@pytest.mark.parametrize("doc,line", [c for c in commands() if runnable_here(c[1])])
def test_doc_commands_run_as_written(doc, line, home, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ALCHEMIST_WARM_AGENT", "0")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(shlex.split(line)[1:])
        except SystemExit as e:  # --version and --help exit through argparse
            code = e.code
    assert code == 0, f"{doc}: `{line}` exited {code}: {err.getvalue()[-500:]}"
