"""The JSON shapes of /api/v1 (pydantic), shared by the dashboard and the CLI's `--json`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

# The largest job spec the API accepts, in bytes (a spec is a few hundred bytes).
MAX_SPEC_BYTES = 64 * 1024
# A point of a chart: (step, value).
Point = tuple[float, float]


class Problem(BaseModel):
    """Every error: one line, in the CLI's words (field, value, what is accepted)."""

    detail: str


class SignIn(BaseModel):
    """A browser signing in (POST /api/v1/session)."""

    token: str = Field(
        max_length=200,
        description="the one-time token of the URL `alchemist "
        "ui` printed (spent by the first browser), or the scripts' token",
    )


class SignedIn(BaseModel):
    session: bool = Field(
        description="a session cookie was set (false where the dashboard needs no token: a pod's loopback)"
    )


class RunSummary(BaseModel):
    """One run as the runs table shows it."""

    stack: str
    run_id: str
    name: str
    state: str = Field(description="pending, running, restarting, succeeded, failed, cancelled or lost")
    reason: str = Field("", description="why it waits, restarts or failed; the backend's words")
    owner: str | None = Field(None, description="who started it, where the stack records it")
    workers: int = 0
    restarts: int = 0
    step: int | None = None
    total_steps: int | None = None
    progress: float | None = Field(None, description="step / total_steps, 0..1")
    loss: float | None = None
    samples_per_s: float | None = None
    accuracy: float | None = None
    algorithm: str | None = Field(None, description="sync, async, bmuf or easgd")
    metrics: dict[str, float] = Field(
        default_factory=dict,
        description="the run's metrics by name: what its script reported "
        "last (report(accuracy=...)) and its final evaluation's",
    )
    duration_s: float | None = Field(None, description="from creation to the end (or now)")
    created: float | None = Field(None, description="Unix time")
    ended: float | None = None


class StackProblem(BaseModel):
    """A stack whose runs could not be listed (unreachable cluster...), in one line."""

    stack: str
    detail: str


class RunList(BaseModel):
    runs: list[RunSummary]
    total: int = Field(description="runs matching the filter, before `limit`")
    problems: list[StackProblem] = []


class RankState(BaseModel):
    rank: int
    state: str = Field(description="running, finished, exited, or the run's state")
    restarts: int = 0
    node: str = ""
    pid: int | None = None
    started: float | None = None


class ServerState(BaseModel):
    """A parameter-server shard of an async run (workers/server-<K>.json)."""

    shard: int
    state: str = Field(description="running, finished, exited, or the run's state")
    restarts: int = 0
    node: str = ""
    pid: int | None = None
    started: float | None = None
    updates: int | None = Field(None, description="updates applied (the shard's version)")


class Checkpoint(BaseModel):
    name: str
    step: int | None = None
    holder: str = Field(
        "every rank",
        description="whose state: `every rank` (one file of a "
        "collective strategy), `rank N` (an async worker's own), `server K` "
        "(a parameter-server shard's)",
    )
    bytes: int
    modified: float


class Links(BaseModel):
    """Where to see more of the run; absent where the stack has no such service."""

    tensorboard: str | None = None
    grafana: str | None = None
    prometheus: str | None = None


class RunDetail(RunSummary):
    spec: dict[str, Any] = Field(default_factory=dict, description="the resolved job spec")
    ranks: list[RankState] = []
    servers: list[ServerState] = Field(
        default_factory=list, description="parameter-server shards (async runs)"
    )
    checkpoints: list[Checkpoint] = []
    links: Links = Field(default_factory=Links)
    result: dict[str, Any] | None = Field(None, description="rank 0's summary at the end")
    failed_rank: int | None = Field(
        None, description="the rank whose failure ended the run (local runs): the page opens its log"
    )
    failure_lines: list[str] = Field(
        default_factory=list, description="its last lines and torchrun's root cause"
    )
    requirements: dict[str, Any] | None = Field(
        None,
        description="the job's own packages (`requirements:`): the resolved lock's sha256, "
        "its packages and its text, as the run recorded them",
    )


class RunMetrics(BaseModel):
    """The run's charts: (step, value) points, oldest first."""

    stack: str
    run_id: str
    loss: list[Point] = []
    accuracy: list[Point] = []
    throughput: list[Point] = Field(default_factory=list, description="samples/s")
    communication: list[Point] = Field(
        default_factory=list, description="rank 0's seconds spent communicating"
    )
    metrics: dict[str, list[Point]] = Field(
        default_factory=dict, description="each metric a script reported, by name"
    )


class LogChunk(BaseModel):
    """Part of a rank's log; ask again from `next_offset` to follow it."""

    rank: int
    offset: int
    next_offset: int
    text: str
    finished: bool = Field(description="the run is over: nothing more will come")


class SpecBody(BaseModel):
    """A job spec to check or start, as the text of its YAML file."""

    stack: str = "local"
    spec: str = Field(max_length=MAX_SPEC_BYTES, description="the YAML text of a job spec")
    filename: str | None = Field(
        None, max_length=200, description="the uploaded file's name, for error messages"
    )


class Checked(BaseModel):
    """A spec that passed every check the CLI makes before anything starts."""

    stack: str
    name: str
    workers: int
    plan: str = Field(description="what would be started (the dry run)")


class Submitted(BaseModel):
    stack: str
    run_id: str


class StackFacts(BaseModel):
    """A stack as its `alchemist` output describes it; never its kubeconfig or a token."""

    name: str
    provider: str = Field(description="the stack's infra provider (`local` for this machine)")
    namespace: str | None = None
    queue: str | None = None
    gpu_resource: str | None = None
    gpus_per_node: int = 0
    fabric: str | None = Field(
        default=None, description="the GPU nodes' network fabric, as its provider calls it"
    )
    fabric_per_node: int = 0
    shared_fs: dict[str, str] = Field(
        default_factory=dict, description="kind, mount path, PVC (or local directory)"
    )
    images: dict[str, str] = {}
    monitoring: Links = Field(default_factory=Links)
    cluster: str | None = Field(default=None, description="the cluster's name, where its provider gives one")
    cluster_label: str | None = Field(default=None, description="what its provider calls the cluster")
    region: str | None = None
