"""How a script worker that used torch.distributed ends: as `python script.py` would (its exit
code, its threads joined, its atexit handlers run, its open files flushed), but never by an
abort in the interpreter's teardown after its work is done.

The abort: gloo's run-loop thread drops its last reference to a finished collective after the
Python code has moved on, and that drop takes the GIL; once the interpreter is finalizing,
CPython ends such a thread with pthread_exit, whose forced unwind through a noexcept C++
destructor calls std::terminate. A collective still in flight at exit hits that window every
time; `destroy_process_group()` followed by exit hits it now and then (under plain torchrun
too), which is how users meet it."""

from __future__ import annotations

import json
import re

import pytest

from alchemist_jobs.rundir import RunDir
from tests.conftest import cli

pytestmark = pytest.mark.timeout(300)

IN_FLIGHT_AT_EXIT = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(20_000_000)
# Python state captured with the collective (as DDP's backward captures autograd's), so the
# run-loop thread must take the GIL when it releases it.
with torch.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x):
    work = dist.all_reduce(t, async_op=True)
del work
"""

EXIT_LIKE_PYTHON = """\
import atexit, os, sys, threading, time
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
rank = dist.get_rank()
out = open(f"left-open-{rank}.txt", "w")  # never closed: the exit must flush it
out.write("written before exit")
def late():
    time.sleep(0.5)
    with open(f"thread-{rank}.txt", "w") as fh:
        fh.write("joined")
threading.Thread(target=late).start()  # non-daemon: the exit waits for it
atexit.register(lambda: open(f"atexit-{rank}.txt", "w").write("ran"))
dist.destroy_process_group()
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""


def _job(tmp_path, script: str, name: str, env: dict[str, str] | None = None):
    (tmp_path / "train.py").write_text(script)
    spec = {"name": name, "task": {"script": "train.py"}, "procs_per_node": 2, "max_restarts": 0}
    if env:
        spec["env"] = env
    (tmp_path / "job.yaml").write_text(json.dumps(spec))
    return tmp_path / "job.yaml"


def _run(home):
    (path,) = (home / "runs").iterdir()
    return RunDir(path)


def test_a_collective_in_flight_at_exit_does_not_abort_the_worker(home, tmp_path):
    r = cli("run", str(_job(tmp_path, IN_FLIGHT_AT_EXIT, "inflight")), "--quiet", home=home)
    logs = "".join(p.read_text() for p in (_run(home).path / "logs").glob("*.log"))
    assert r.returncode == 0, r.stdout + r.stderr + logs
    assert "terminate called" not in logs and "exception not rethrown" not in logs
    assert _run(home).state()["state"] == "succeeded"


def test_a_distributed_script_exits_as_python_would(home, tmp_path):
    job = _job(tmp_path, EXIT_LIKE_PYTHON, "exits", env={"EXIT_CODE": "0"})
    r = cli("run", str(job), "--quiet", home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        # The script ran in its code snapshot's directory or the spec's: look in both.
        found = {p.name: p.read_text() for p in list(tmp_path.glob(f"*-{rank}.txt")) +
                 list(_run(home).path.rglob(f"*-{rank}.txt"))}
        assert found.get(f"left-open-{rank}.txt") == "written before exit", found
        assert found.get(f"thread-{rank}.txt") == "joined", found
        assert found.get(f"atexit-{rank}.txt") == "ran", found


def test_a_distributed_scripts_exit_code_is_kept(home, tmp_path):
    job = _job(tmp_path, EXIT_LIKE_PYTHON, "exits3", env={"EXIT_CODE": "3"})
    r = cli("run", str(job), "--quiet", home=home)
    assert r.returncode == 1
    # Every rank exits 3; the summary names whichever torchrun saw first.
    assert re.search(r"rank [01] failed: exit 3", r.stdout), r.stdout + r.stderr
