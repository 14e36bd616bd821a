"""The run directory's state files as typed models: run.json (the launcher's record),
progress.json (rank 0's latest step) and result.json (rank 0's summary).

Readers are lenient: a field that is missing or of the wrong type reads as its default, so
a damaged file shows as an unknown value in `list` and `status` instead of breaking them
for every run. Writers give every field its declared type.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

RunState = Literal["pending", "running", "succeeded", "failed", "cancelled", "lost", "restarting"]
M = TypeVar("M", bound="_File")


class _File(BaseModel):
    # Other keys are kept (the runtime may add fields), but never trusted by the CLI.
    model_config = ConfigDict(extra="allow")

    @classmethod
    def lenient(cls: type[M], data: Any) -> M:
        """The model of `data`, dropping each field that does not validate."""
        raw = dict(data) if isinstance(data, dict) else {}
        raw = {k: v for k, v in raw.items() if isinstance(k, str)}
        for _ in range(len(cls.model_fields) + 1):
            try:
                return cls.model_validate(raw)
            except ValidationError as e:
                bad = {err["loc"][0] for err in e.errors() if err["loc"]}
                if not bad & set(raw):
                    break
                raw = {k: v for k, v in raw.items() if k not in bad}
        return cls()


class Failure(BaseModel):
    """Why a local run failed, recorded by its launcher when it ends (alchemist_jobs.failures):
    the rank torchrun names as the root cause, how it ended, and its last lines."""

    rank: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    summary: str = ""
    lines: list[str] = Field(default_factory=list)


class RunRecord(_File):
    """run.json, written by the local launcher (and `cancel`)."""

    run_id: str = ""
    name: str = ""
    stack: str = "local"
    state: RunState = "pending"
    created: float | None = None
    ended: float | None = None
    launcher_pid: int | None = None
    launcher_start: int | None = Field(None, description="its start time, clock ticks since boot")
    workers: int = Field(0, ge=0)
    nodes: int = Field(1, ge=1)
    agents: list[int] = Field(default_factory=list, description="torchrun agents, node order")
    servers: list[int] = Field(default_factory=list, description="parameter-server processes")
    proc_starts: dict[str, int | None] = Field(
        default_factory=dict, description="pid -> start time: a pid is signalled only if both match"
    )
    exit_codes: list[int | None] | None = None
    message: str = ""
    detached: bool = False
    restarts: int = Field(
        0, ge=0, description="the group's restarts: each as it begins, all of them at the end"
    )
    restart_events: list[str] = Field(
        default_factory=list,
        description="one line per restart, as it began: the rank that "
        "failed and how ('rank 1 failed (ValueError: ...); restarting 1/3')",
    )
    algorithm: str = Field("", description="the spec's algorithm.name")
    failure: Failure | None = None


class Progress(_File):
    """progress.json, rewritten by rank 0 as it trains."""

    step: int | None = Field(None, ge=0)
    total_steps: int | None = Field(None, ge=0)
    epoch: float = Field(0.0, ge=0)
    epochs: float = Field(0.0, ge=0)
    loss: float | None = None
    samples_per_s: float = Field(0.0, ge=0)
    restarts: int = Field(0, ge=0)
    metrics: dict[str, float] = Field(
        default_factory=dict,
        description="the latest value of each metric a script reported "
        "(alchemist_jobs.report.report(accuracy=...))",
    )


class Result(_File):
    """result.json, written by rank 0 when the job ends."""

    final_loss: float | None = None
    test_accuracy: float | None = None
    test_metrics: dict[str, float] = Field(
        default_factory=dict,
        description="the final evaluation: loss, accuracy where it "
        "applies, and a task's own metrics (task.entry's `metrics`)",
    )
    samples_per_s: float | None = None
    steps: int | None = None
    global_batch: int | None = None
    restarts: int = Field(0, ge=0)
    resumed_from_step: int | None = None
    world_size: int | None = None
