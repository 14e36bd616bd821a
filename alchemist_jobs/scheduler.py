"""The scheduler interface every backend implements (after TorchX's `Scheduler`).

`dryrun(spec, spec_dir)` is pure: it returns the request (a process list locally, manifests
on Kubernetes) that `schedule(request)` would carry out, printable with `describe()`.
`schedule` returns a handle; `wait(handle)` blocks until the run ends and `interrupt(handle)`
stops it. `status` (TorchX's `describe`), `progress`, `logs`, `cancel`, `list` and `remove`
act on runs by id. Backends return typed values and print nothing: all printing is the
CLI's (following a run: commands/follow.py). Schedulers are built in one place, stacks.py.
"""

from __future__ import annotations

import abc
import builtins
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from alchemist_jobs.errors import UserError
from alchemist_jobs.run_files import Progress, Result
from alchemist_jobs.stack_kinds import CLUSTER, Capabilities

# Run states, the same words on every backend.
PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST = (
    "pending",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "lost",
)
FINAL_STATES = (SUCCEEDED, FAILED, CANCELLED, LOST)
# A cluster job replacing a lost or failed pod: not final, not yet running again.
RESTARTING = "restarting"
# The most of a log `read_log` returns at once: a long log is read in chunks.
LOG_CHUNK_BYTES = 256 * 1024


@dataclass
class Placement:
    """Where one process of a run runs: a rank (role "worker") or a parameter-server shard
    (role "server", `index` is its shard)."""

    index: int
    state: str
    node: str = ""
    restarts: int = 0
    pid: int | None = None
    started: float | None = None
    updates: int | None = None  # a server shard's model version
    role: str = "worker"


@dataclass
class Artifacts:
    """Where a run's files are that this machine can read (None: not readable here)."""

    spec_file: Path | None = None  # the spec as submitted
    tensorboard_dir: Path | None = None  # the event files of every attempt
    checkpoints_dir: Path | None = None  # runtime/checkpoint.py's files


@dataclass
class RunStatus:
    run_id: str
    name: str
    stack: str
    state: str
    created: float | None = None
    ended: float | None = None
    workers: int = 0
    restarts: int = 0
    step: int | None = None
    total_steps: int | None = None
    message: str = ""
    run_dir: str | None = None  # where the run keeps its files (the shared file system)
    progress: Progress | None = None  # rank 0's latest report
    result: Result | None = None  # rank 0's summary, once the job has ended
    exit_codes: list[int | None] | None = None  # local: the agents' exit codes
    # Cluster: the restarts that spent max_restarts (a preemption's restart spends none).
    restarts_counted: int | None = None
    # Cluster: pods long past their deletion deadline that hold the run (job_state.stuck_pod).
    stuck_pods: list[dict[str, Any]] = field(default_factory=list)
    # Local: why a failed run failed (run_files.Failure as a dict), recorded at its end.
    failure: dict[str, Any] | None = None
    algorithm: str | None = None  # the spec's algorithm.name, where the backend knows it
    # The job's own packages (`requirements:`): sha256, packages and lock text (job_env.py).
    requirements: dict[str, Any] | None = None
    # The document an ended run's status was read from (run_index): as_json gives it back
    # as it is, which a listing of 10,000 runs felt. Not part of the status itself.
    source: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    # Backend-specific facts a backend reads back itself (pods, sizes); the CLI never does.
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def metrics(self) -> dict[str, float]:
        """The run's metrics by name: what a script reported last (report(accuracy=...)),
        then the final evaluation's (accuracy, a task's own; its loss as test_loss)."""
        return run_metrics(self.progress, self.result)

    @property
    def duration_s(self) -> float | None:
        """Seconds from creation to the end (to now while it runs)."""
        if self.created is None:
            return None
        return max(0.0, (self.ended if self.ended is not None else time.time()) - self.created)

    def as_json(self) -> dict[str, Any]:
        """The documented `--json` shape of a run (docs/cli.md)."""
        if self.source is not None:
            return self.source
        return dict(
            run_id=self.run_id,
            name=self.name,
            stack=self.stack,
            state=self.state,
            created=self.created,
            ended=self.ended,
            workers=self.workers,
            restarts=self.restarts,
            step=self.step,
            total_steps=self.total_steps,
            message=self.message,
            run_dir=self.run_dir,
            exit_codes=self.exit_codes,
            restarts_counted=self.restarts_counted,
            stuck_pods=self.stuck_pods,
            failure=self.failure,
            algorithm=self.algorithm,
            metrics=self.metrics,
            requirements=self.requirements,
            duration_s=None if self.duration_s is None else round(self.duration_s, 3),
            progress=None
            if self.progress is None
            else self.progress.model_dump(include=set(Progress.model_fields)),
            result=None if self.result is None else self.result.model_dump(include=set(Result.model_fields)),
        )


def run_metrics(progress: Progress | None, result: Result | None) -> dict[str, float]:
    out = dict(progress.metrics) if progress is not None else {}
    if result is not None:
        out.update(("test_loss" if k == "loss" else k, v) for k, v in result.test_metrics.items())
        if result.test_accuracy is not None:
            out["accuracy"] = result.test_accuracy
    return out


@dataclass
class Listed:
    """A run as `list --json` orders, filters and prints it: its `as_json()` document already
    encoded (the local index of ended runs keeps it so)."""

    run_id: str
    state: str
    created: float | None
    json_text: str


def decode_all(texts: Iterable[str]) -> list[dict[str, Any]]:
    """JSON documents (`Listed.json_text`) decoded in one go: one `json.loads` per document
    takes twice as long."""
    return json.loads("[" + ",".join(texts) + "]")


def listing_order(run: RunStatus | Listed) -> tuple[float, str]:
    """`list()`'s order: oldest first."""
    return run.created or 0.0, run.run_id


class Request(abc.ABC):
    """What `schedule` would do, fully resolved and printable."""

    run_id: str

    @abc.abstractmethod
    def describe(self) -> str:
        """Human-readable (and, where it makes sense, copy-pasteable) form."""

    def as_json(self) -> dict[str, Any]:
        """The `--dry-run --json` shape (docs/cli.md); backends add what they start."""
        return {"run_id": self.run_id, "describe": self.describe()}


RequestT = TypeVar("RequestT", bound=Request)
HandleT = TypeVar("HandleT")


class Scheduler(abc.ABC, Generic[RequestT, HandleT]):
    stack: str
    # What the CLI and the dashboard may do with this stack's runs (stack_kinds.py): they
    # ask this, never the stack's name.
    capabilities: ClassVar[Capabilities] = CLUSTER

    @property
    def runs_on_its_own(self) -> bool:
        """True: a scheduled run lives on its own (a cluster job) and the CLI may return at
        once; False: the run's processes are the CLI's children (local, unless detached)."""
        return self.capabilities.runs_on_its_own

    @abc.abstractmethod
    def dryrun(self, spec: Any, spec_dir: Any, run_id: str | None = None) -> RequestT: ...

    @abc.abstractmethod
    def schedule(self, request: RequestT, warm: Any = None) -> HandleT:
        """Start the run; returns a handle to `wait` on. `warm` is an agent interpreter the
        CLI started early (warm_agent.WarmAgent): a backend uses it for its first process or
        discards it."""

    @abc.abstractmethod
    def run_id(self, handle: HandleT) -> str: ...

    def wait(self, handle: HandleT, tick: Callable[[], None] | None = None, poll: float = 2.0) -> RunStatus:
        """Block until the run ends, polling `status` (TorchX waits the same way)."""
        while True:
            st = self.status(self.run_id(handle))
            if tick:
                tick()
            if st.finished:
                return st
            time.sleep(poll)

    def interrupt(self, handle: HandleT) -> RunStatus:
        """The CLI that started the run is stopped (Ctrl-C, a fault of its own): end the run."""
        return self.cancel(self.run_id(handle))

    @abc.abstractmethod
    def status(self, run_id: str) -> RunStatus:
        """TorchX's `describe`: the run's state and progress."""

    def progress(self, status: RunStatus) -> dict[str, Any] | None:
        """Rank 0's newest progress report of a running run (step, loss, ...), if any."""
        if status.progress is None:
            return None
        return status.progress.model_dump(include=set(Progress.model_fields))

    def describe(self, run_id: str) -> RunStatus:
        return self.status(run_id)

    @abc.abstractmethod
    def logs(
        self, run_id: str, rank: int = 0, follow: bool = False, stop: threading.Event | None = None
    ) -> Iterator[str]:
        """Rank N's log lines; with `follow`, until the run ends or `stop` is set."""

    @abc.abstractmethod
    def cancel(self, run_id: str) -> RunStatus: ...

    @abc.abstractmethod
    def list(self) -> list[RunStatus]: ...

    def list_json(self) -> builtins.list[Listed]:
        """`list()` with each run's `as_json()` encoded, in the same order."""
        return [Listed(r.run_id, r.state, r.created, json.dumps(r.as_json())) for r in self.list()]

    # -- what the dashboard shows --------------------------------------------------------

    def read_log(self, status: RunStatus, rank: int, offset: int) -> tuple[int, bytes, int]:
        """(offset, up to LOG_CHUNK_BYTES of rank `rank`'s log from it, the log's size); an
        offset past the end (a replaced log) starts over at 0. This default reads the whole
        log through `logs` (a pod's log has no offsets)."""
        try:
            data = "".join(self.logs(status.run_id, rank=rank, follow=False)).encode()
        except UserError as e:
            if "has written no log yet" not in str(e):
                raise
            data = b""
        if offset > len(data):
            offset = 0
        return offset, data[offset : offset + LOG_CHUNK_BYTES], len(data)

    def placements(self, status: RunStatus) -> builtins.list[Placement]:
        """Each rank (and parameter-server shard) with where it runs."""
        return []

    def artifacts(self, status: RunStatus) -> Artifacts:
        """The run's files this machine can read."""
        return Artifacts()

    def sample(self, status: RunStatus) -> dict[str, Any] | None:
        """The run's latest numbers for a chart (step, loss, ...); None once it has ended
        (its history is what was sampled)."""
        return None if status.finished else self.progress(status)

    def owner(self, status: RunStatus) -> str | None:
        """The user who started the run, where the backend knows it."""
        owner = status.extra.get("owner")
        return owner if isinstance(owner, str) else None

    def run_ids(self) -> builtins.list[str] | None:
        """Every run's id, read without reading any run's state (a home of thousands of runs);
        None where only `list()` can say."""
        return None

    def remove(self, run_id: str, force: bool = False) -> RunStatus:
        """Delete a run and its files; a run that has not ended only with `force` (which
        cancels it first)."""
        raise UserError(
            f"rm: stack {self.stack}: removing runs is done on the local stack; "
            "on a cluster stack `alchemist cancel RUN` deletes the run's JobSet"
        )
