"""The local agent's own cost around a job (issue 41.5, bench/framework_start.py): torch's
dynamic rendezvous named each event through two `inspect.stack()` calls (0.2-0.5 s of every
start here); the agent's interpreter teardown took 0.7-0.9 s after the job was over. The
agent names events from the frame alone, the same names, and exits at once after torchrun,
with torchrun's own exit code and nothing of its output lost."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(300)


def test_rendezvous_events_get_the_same_names_without_inspecting_the_stack(monkeypatch):
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    from alchemist_jobs import agent

    upstream = dynamic_rendezvous.get_method_name
    monkeypatch.setattr(dynamic_rendezvous, "get_method_name", upstream)  # restored afterwards

    def _record():  # as DynamicRendezvousHandler._record calls it
        return dynamic_rendezvous.get_method_name()

    def next_rendezvous():
        return _record()

    assert next_rendezvous() == "next_rendezvous"  # upstream's own answer
    agent.cheap_rendezvous_event_names()
    assert dynamic_rendezvous.get_method_name is not upstream

    def no_stack(*args, **kwargs):
        raise AssertionError("inspect.stack() called")

    monkeypatch.setattr(inspect, "stack", no_stack)
    assert next_rendezvous() == "next_rendezvous"
    assert dynamic_rendezvous.get_method_name(10_000) == "no_method_name"  # deeper than the stack


SCRIPT = """
import os, sys
print(f"worker {os.environ['RANK']} says hi", flush=True)
sys.exit(int(os.environ.get("FAIL_RANK", "-1") == os.environ["RANK"]) * 3)
"""


@pytest.mark.parametrize("fail", [False, True])
def test_the_agent_exits_with_torchruns_code_and_its_whole_output(fail, tmp_path):
    (tmp_path / "w.py").write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO), **({"FAIL_RANK": "1"} if fail else {}))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "alchemist_jobs.agent",
            "--standalone",
            "--nnodes=1",
            "--nproc-per-node=2",
            "--max-restarts=0",
            str(tmp_path / "w.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    out = r.stdout + r.stderr
    assert "worker 0 says hi" in out and "worker 1 says hi" in out, out
    if fail:
        assert r.returncode == 1 and "ChildFailedError" in out and "exitcode  : 3" in out, out
    else:
        assert r.returncode == 0, out
