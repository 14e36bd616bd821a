"""The scheduler interface every backend implements (after TorchX's `Scheduler`).

`dryrun(spec, ...)` is pure: it returns the request (a process list locally, manifests on
Kubernetes) that `schedule(request)` would carry out, printable with `describe()`. Then
`status`, `logs`, `cancel` and `list` act on runs by id.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Iterator

# Run states, the same words on every backend.
PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST = (
    "pending", "running", "succeeded", "failed", "cancelled", "lost")
FINAL_STATES = (SUCCEEDED, FAILED, CANCELLED, LOST)
# A cluster job replacing a lost or failed pod: not final, not yet running again.
RESTARTING = "restarting"


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
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES


class Request(abc.ABC):
    """What `schedule` would do, fully resolved and printable."""

    run_id: str

    @abc.abstractmethod
    def describe(self) -> str:
        """Human-readable (and, where it makes sense, copy-pasteable) form."""


class Scheduler(abc.ABC):
    stack: str

    @abc.abstractmethod
    def dryrun(self, spec: Any, spec_dir: Any) -> Request: ...

    @abc.abstractmethod
    def schedule(self, request: Request) -> Any:
        """Start the run; returns a handle the CLI can `wait` on."""

    @abc.abstractmethod
    def status(self, run_id: str) -> RunStatus: ...

    @abc.abstractmethod
    def logs(self, run_id: str, rank: int = 0, follow: bool = False) -> Iterator[str]: ...

    @abc.abstractmethod
    def cancel(self, run_id: str) -> RunStatus: ...

    @abc.abstractmethod
    def list(self) -> list[RunStatus]: ...
