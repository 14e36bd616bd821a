"""The scheduler interface is the whole interface: the CLI follows, interrupts and reads a run
through `Scheduler` alone, and schedulers are built in one place (stacks.py). The backend
here lives only in this test: a run held in memory that advances one state per poll."""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass
from typing import Iterator

import pytest

from alchemist_jobs.commands import follow as follow_mod
from alchemist_jobs.errors import JobFailed
from alchemist_jobs.scheduler import (CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED, Request,
                                      RunStatus, Scheduler)
from alchemist_jobs.spec import JobSpec
from tests.conftest import REPO

BACKENDS = {"LocalScheduler", "KubernetesScheduler"}


@dataclass
class MemoryRequest(Request):
    run_id: str

    def describe(self) -> str:
        return f"run {self.run_id} in memory"


class MemoryScheduler(Scheduler[MemoryRequest, str]):
    """A backend whose runs live on their own, in memory: each `status` moves a run one
    state further along `states`."""

    stack = "memory"

    def __init__(self, states: list[str], message: str = "") -> None:
        self.states, self.message = states, message
        self.polls: dict[str, int] = {}
        self.cancelled: list[str] = []

    def dryrun(self, spec, spec_dir, run_id=None) -> MemoryRequest:
        return MemoryRequest(run_id=run_id or "mem-1")

    def schedule(self, request: MemoryRequest, warm=None) -> str:
        self.polls[request.run_id] = 0
        return request.run_id

    def run_id(self, handle: str) -> str:
        return handle

    def status(self, run_id: str) -> RunStatus:
        n = self.polls[run_id]
        self.polls[run_id] = n + 1
        state = CANCELLED if run_id in self.cancelled else self.states[min(n, len(self.states) - 1)]
        return RunStatus(run_id=run_id, name="mem", stack=self.stack, state=state, workers=2,
                         message=self.message if state == FAILED else state)

    def progress(self, status: RunStatus) -> dict | None:
        return {"step": 7 * self.polls[status.run_id], "loss": 0.5}

    def logs(self, run_id: str, rank: int = 0, follow: bool = False,
             stop: threading.Event | None = None) -> Iterator[str]:
        yield f"rank {rank} line 1\n"
        if follow:  # a follower keeps reading until it is told the run is over
            assert stop is not None and stop.wait(60), "the follower never stopped the log"
        yield f"rank {rank} line 2\n"

    def cancel(self, run_id: str) -> RunStatus:
        self.cancelled.append(run_id)
        return self.status(run_id)

    def list(self) -> list[RunStatus]:
        return [self.status(r) for r in self.polls]


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow_mod, "POLL_S", 0.0)
    monkeypatch.setattr(follow_mod, "PROGRESS_EVERY_S", 0.0)


def _spec() -> JobSpec:
    return JobSpec.model_validate({"name": "mem", "task": {"builtin": "digits"}})


def test_a_backend_that_lives_on_its_own_is_followed_through_the_interface_alone(capsys):
    sched = MemoryScheduler([PENDING, RUNNING, RUNNING, SUCCEEDED])
    handle = sched.schedule(sched.dryrun(_spec(), "."))
    assert follow_mod.follow(sched, handle, _spec(), logs=True) == 0
    out, err = capsys.readouterr()
    assert "rank 0 line 1\nrank 0 line 2\n" in out  # the whole log, read to its end
    assert out.rstrip().endswith("run mem-1: succeeded (step 21  loss 0.5000)")
    assert [ln.strip() for ln in err.splitlines()] == [
        "pending: pending", "running: running", "step 14  loss 0.5000", "step 21  loss 0.5000",
        "succeeded: succeeded"]


def test_a_failed_run_ends_the_follow_with_its_message_and_how_to_read_its_logs(capsys):
    sched = MemoryScheduler([RUNNING, FAILED], message="rank 1 exited with 3")
    with pytest.raises(JobFailed, match=r"run mem-1 failed: rank 1 exited with 3; see "
                                        r"`alchemist logs mem-1 --stack memory --rank N`"):
        follow_mod.follow(sched, sched.schedule(MemoryRequest("mem-1")), _spec(), quiet=True)
    assert capsys.readouterr().err == ""  # quiet: no state lines


def test_interrupting_a_run_of_a_backend_without_processes_cancels_it():
    sched = MemoryScheduler([RUNNING])
    handle = sched.schedule(MemoryRequest("mem-2"))
    assert sched.interrupt(handle).state == CANCELLED
    assert sched.cancelled == ["mem-2"]


def _calls_and_checks(path) -> list[str]:
    """`Backend(...)` calls and `isinstance(x, Backend)` checks in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
            if name in BACKENDS:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} builds {name}")
            if name == "isinstance" and len(node.args) == 2 and \
                    BACKENDS & {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} asks which backend it has")
    return found


def test_schedulers_are_built_in_stacks_py_only_and_nothing_asks_which_one_it_has():
    found = [f for path in sorted((REPO / "alchemist_jobs").rglob("*.py"))
             if path.name != "stacks.py" for f in _calls_and_checks(path)]
    assert found == [], "\n".join(found)
    assert _calls_and_checks(REPO / "alchemist_jobs" / "stacks.py")  # the checker finds them
