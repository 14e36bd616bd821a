"""The job spec: one typed config tree, from the YAML file to every worker and checkpoint.

Each field is documented once, here, where it is declared. `load_spec` turns a YAML file
(plus `--set key.path=value` overrides) into a `JobSpec`, or raises a `UserError` whose one
line names the file, the field path, the bad value and what is accepted.
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from alchemist_jobs.data.source import parse_s3_uri, resolve_local_source
from alchemist_jobs.errors import UserError, shown
from alchemist_jobs.frameworks import IGNORED_BY_OWN_FRAMEWORK, FrameworkName, get
from alchemist_jobs.input_files import load_yaml, read_text
from alchemist_jobs.job_env import check_requirement
from alchemist_jobs.secret_scan import value_looks_secret

BUILTIN_TASKS = ("digits", "synthetic")
DIGITS_SAMPLES = 1797  # sklearn's load_digits
DIGITS_TEST = 360  # its train_test_split(test_size=0.2), the built-in task's test split
# FILE.py:FUNCTION (a path relative to the spec) or package.module:FUNCTION
_ENTRY = re.compile(r"(?:[^:\0]+\.py|[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*):[A-Za-z_]\w*")
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"


BOOL_AS_NUMBER = "boolean_as_number"


class _Node(BaseModel):
    # Unknown fields are errors: a misspelled key must never be silently ignored.
    # allow_inf_nan: 1e309 reads as inf, which no field means (threads, sizes, rates)
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_numbers(cls, data: Any) -> Any:
        # pydantic's lax mode reads true as 1: `nodes: true` must not mean one node.
        if isinstance(data, dict):
            for key, v in data.items():
                field = cls.model_fields.get(key) if isinstance(v, bool) else None
                kinds = {field.annotation, *get_args(field.annotation)} if field else set()
                if kinds & {int, float} and bool not in kinds:
                    raise PydanticCustomError(
                        BOOL_AS_NUMBER, "{field} is a boolean, not a number", {"field": key, "value": v}
                    )
        return data


# --- what to train ---------------------------------------------------------------------


class SyntheticTask(_Node):
    """Generated classification data with a model of a chosen size (for communication-heavy
    runs and benchmarks)."""

    params: int = Field(1_000_000, ge=100, description="approximate model parameter count")
    samples: int = Field(8192, ge=16, description="training samples (test set is 1/4 of this)")
    features: int = Field(256, ge=2, description="input dimension")
    classes: int = Field(10, ge=2, description="number of classes")
    layers: int = Field(2, ge=1, le=16, description="hidden layers of the MLP")
    data_seed: int | None = Field(
        None,
        ge=0,
        description="seed of the generated data (default: hyper.seed); fixed, hyper.seed "
        "varies only the initialisation and the data order over the same data",
    )


class DigitsTask(_Node):
    """scikit-learn's bundled 8x8 digits (1797 images, 10 classes), split 80/20."""

    hidden: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [64], description="hidden layer widths of the MLP"
    )


class TaskSpec(_Node):
    """Exactly one of `builtin`, `entry`, `script` or `module`."""

    builtin: Literal["digits", "synthetic"] | None = None
    entry: str | None = Field(
        None,
        max_length=512,
        description="your own model through the built-in trainer: `FILE.py:FUNCTION` (a file "
        "in the spec's directory) or `package.module:FUNCTION`, returning the model, train "
        "and test sets and loss (docs/bring-your-model.md); every algorithm applies",
    )
    script: str | None = Field(None, description="path of a torchrun-compatible script")
    module: str | None = Field(None, description="a module run as `python -m MODULE`")
    args: list[str] = Field(default_factory=list, description="arguments for script/module")
    framework: FrameworkName = Field(  # the registry's names (alchemist_jobs/frameworks.py)
        "torch",
        description="what a script/module trains with: torch (torchrun's variables), "
        "tensorflow (TF_CONFIG) or jax (JAX_COORDINATOR_ADDRESS...); docs/frameworks.md",
    )
    digits: DigitsTask = Field(default_factory=DigitsTask)
    synthetic: SyntheticTask = Field(default_factory=SyntheticTask)  # type: ignore[arg-type]  # mypy's dataclass_transform misses Field(default, ...)'s positional default

    @field_validator("args", mode="before")
    @classmethod
    def _scalars_as_strings(cls, v: Any) -> Any:
        # `args: [--epochs, 10]` is natural YAML; a command line is strings all the same.
        if isinstance(v, list):
            return [
                str(a).lower() if isinstance(a, bool) else str(a) if isinstance(a, (int, float)) else a
                for a in v
            ]
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> TaskSpec:
        given = [k for k in ("builtin", "entry", "script", "module") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                f"needs exactly one of builtin ({'|'.join(BUILTIN_TASKS)}), entry, script or "
                f"module; got {', '.join(given) or 'none'}"
            )
        if self.module is not None and not re.fullmatch(r"[A-Za-z_][\w.]*", self.module):
            raise ValueError(f"module {self.module!r} is not a dotted Python module name")
        if self.entry is not None and not _ENTRY.fullmatch(self.entry):
            raise ValueError(f"entry {shown(self.entry)} is not FILE.py:FUNCTION or package.module:FUNCTION")
        if (self.builtin or self.entry) and self.framework != "torch":
            raise ValueError(
                f"framework {self.framework} is for script and module tasks; "
                f"built-in and entry tasks train with torch"
            )
        return self

    @property
    def kind(self) -> str:
        if self.builtin:
            return self.builtin
        return "entry" if self.entry else "script" if self.script else "module"

    @property
    def trained_by_alchemist(self) -> bool:
        """The built-in trainer runs it (built-in and entry tasks), not the user's own loop."""
        return bool(self.builtin or self.entry)

    @property
    def entry_point(self) -> str:
        """The function that builds the task: the user's, or a built-in task's own."""
        if self.entry:
            return self.entry
        if self.builtin:
            return f"alchemist_jobs.runtime.tasks:{self.builtin}"
        raise ValueError(f"a {self.kind} task runs its own loop: it has no entry point")

    def worker_args(self) -> list[str]:
        """What each worker runs after the bootstrap, the same words on every stack: the
        built-in trainer (built-in and entry tasks), or the user's script or module."""
        if self.trained_by_alchemist:
            return ["trainer"]
        if self.script:
            return ["script", self.script, *self.args]
        assert self.module is not None  # exactly one of the four (_exactly_one)
        return ["module", self.module, *self.args]

    @property
    def entry_file(self) -> str | None:
        """The FILE.py of a `FILE.py:FUNCTION` entry (relative to the spec), else None."""
        if self.entry and self.entry.rpartition(":")[0].endswith(".py"):
            return self.entry.rpartition(":")[0]
        return None

    @property
    def train_set_size(self) -> int:
        """Training samples of a built-in task, known without building it."""
        if self.builtin == "digits":
            return DIGITS_SAMPLES - DIGITS_TEST
        if self.builtin == "synthetic":
            return self.synthetic.samples
        raise ValueError(f"not a built-in task: {self.kind}")


# --- how to train: the algorithm ---------------------------------------------------------

# How an algorithm uses the link, which is what the planner models (planner/model.py).
GRADIENTS = "gradients"  # every step: gradient buckets all-reduced as backward produces them
MODEL = "model"  # every `steps_per_exchange` steps: one all-reduce of the model's change
SERVER = "server"  # through parameter servers: the pace is the servers', not a ring's


class _Algo(_Node):
    """One algorithm in one place: its spec fields (the subclass), the worker's strategy, its
    parameter servers and what the planner needs. Nothing else asks an algorithm's name."""

    strategy: ClassVar[str]  # "module:attribute" that builds the worker's Strategy
    if TYPE_CHECKING:  # each subclass's own Literal field (the union's discriminator)
        name: str
    # "module:attribute" of the exchange's local arithmetic, which the planner's profile times
    # (planner/profile.py); None: the exchange has none worth timing.
    local_update: ClassVar[str | None] = None

    @property
    def exchange(self) -> str:
        return GRADIENTS

    @property
    def micro_batches(self) -> int:
        """Micro-batches accumulated per optimizer step."""
        return 1

    @property
    def steps_per_exchange(self) -> int:
        """Optimizer steps between the points where every worker waits for all the others."""
        return 1

    @property
    def server_shards(self) -> int:
        """Parameter-server shards the job needs (0: none)."""
        return 0

    @property
    def server_optimizer(self) -> bool:
        """The servers apply gradients with the job's optimizer (else: elastic differences)."""
        return False

    @property
    def staleness_limit(self) -> int | None:
        """Steps a worker may run ahead of the slowest (None: unbounded)."""
        return None

    @property
    def wire_format(self) -> str:
        """What one exchange sends per parameter: none (the parameter's own precision), fp16,
        bf16 or powersgd."""
        return "none"

    @property
    def overlapped(self) -> bool:
        """The exchange runs behind the next local steps."""
        return False

    @property
    def gradient_bucket_mb(self) -> float:
        """The gradient bucket size an all-reduce of gradients uses (DDP's default)."""
        return 25.0


class SyncAlgo(_Algo):
    """Synchronous SGD: gradients all-reduced every step (DistributedDataParallel)."""

    strategy: ClassVar[str] = "alchemist_jobs.runtime.strategies.sync:SyncStrategy"
    name: Literal["sync"] = "sync"
    grad_accum: int = Field(1, ge=1, description="micro-batches accumulated per optimizer step")
    compression: Literal["none", "fp16", "bf16", "powersgd"] = Field(
        "none", description="DDP communication hook applied to gradient buckets"
    )
    powersgd_rank: int = Field(2, ge=1, description="matrix rank for PowerSGD compression")
    bucket_mb: float = Field(25.0, gt=0, description="DDP gradient bucket size, MiB")

    @property
    def micro_batches(self) -> int:
        return self.grad_accum

    @property
    def wire_format(self) -> str:
        return self.compression

    @property
    def gradient_bucket_mb(self) -> float:
        return self.bucket_mb


class AsyncAlgo(_Algo):
    """Asynchronous SGD through a parameter server that applies each update on arrival."""

    strategy: ClassVar[str] = "alchemist_jobs.runtime.strategies.async_ps:AsyncStrategy"
    name: Literal["async"] = "async"
    servers: int = Field(1, ge=1, le=64, description="parameter-server shards")
    staleness_bound: int | None = Field(
        None, ge=0, description="max steps a worker may run ahead of the slowest (SSP); none = unbounded"
    )

    @property
    def exchange(self) -> str:
        return SERVER

    @property
    def server_shards(self) -> int:
        return self.servers

    @property
    def server_optimizer(self) -> bool:
        return True

    @property
    def staleness_limit(self) -> int | None:
        return self.staleness_bound


class _BlockAlgo(_Algo):
    """bmuf and easgd: local steps, then an exchange of models every `tau` steps."""

    if TYPE_CHECKING:  # each subclass's own field (its own description and default)
        tau: int

    overlap: bool = Field(
        False,
        description="start each exchange on a snapshot and apply it one block later, "
        "while the next block's local steps run (hides the link's time)",
    )
    exchange_dtype: Literal["fp32", "fp16", "bf16"] = Field(
        "fp32", description="precision of the exchanged model differences on the wire"
    )

    @property
    def exchange(self) -> str:
        return MODEL

    @property
    def steps_per_exchange(self) -> int:
        return self.tau

    @property
    def wire_format(self) -> str:
        return "none" if self.exchange_dtype == "fp32" else self.exchange_dtype

    @property
    def overlapped(self) -> bool:
        return self.overlap


class BmufAlgo(_BlockAlgo):
    """Blockwise model-update filtering (Chen & Huo, 2016)."""

    strategy: ClassVar[str] = "alchemist_jobs.runtime.strategies.bmuf:BmufStrategy"
    local_update: ClassVar[str | None] = "alchemist_jobs.runtime.strategies.bmuf:timed_exchange"
    name: Literal["bmuf"] = "bmuf"
    tau: int = Field(8, ge=1, description="local steps per block")
    block_momentum: float | None = Field(
        None, ge=0, lt=1, description="eta: block momentum; none = 1 - 1/workers (Chen & Huo)"
    )
    block_lr: float = Field(1.0, gt=0, description="zeta: block learning rate")
    nesterov: bool = Field(True, description="restart workers from W_t + eta * Delta_t")
    reset_momentum: bool = Field(
        True,
        description="clear the local optimizer's momentum after each block (as CNTK "
        "does): it points along the old local path, not the new model",
    )


class EasgdAlgo(_BlockAlgo):
    """Elastic averaging SGD (Zhang, Choromanska & LeCun, 2015), synchronous variant."""

    strategy: ClassVar[str] = "alchemist_jobs.runtime.strategies.easgd:easgd_strategy"
    local_update: ClassVar[str | None] = "alchemist_jobs.runtime.strategies.easgd:timed_exchange"
    name: Literal["easgd"] = "easgd"
    tau: int = Field(8, ge=1, description="local steps between elastic exchanges")
    alpha: float = Field(0.1, gt=0, lt=1, description="moving rate of the elastic force")
    variant: Literal["sync", "async"] = Field("sync", description="all-reduce or parameter server")

    @model_validator(mode="after")
    def _sync_only(self) -> EasgdAlgo:
        if self.variant == "async" and (self.overlap or self.exchange_dtype != "fp32"):
            raise ValueError(
                "variant: sync for overlap or exchange_dtype (variant: async "
                "sends fp32 to its parameter server)"
            )
        return self

    @property
    def exchange(self) -> str:
        return MODEL if self.variant == "sync" else SERVER

    @property
    def server_shards(self) -> int:
        return 1 if self.variant == "async" else 0


# Every algorithm by its name: a new one is its class above, added here.
ALGORITHMS: dict[str, type[_Algo]] = {
    cls.model_fields["name"].default: cls for cls in (SyncAlgo, AsyncAlgo, BmufAlgo, EasgdAlgo)
}
if TYPE_CHECKING:  # a union built at runtime is no type to a checker: any of them
    Algorithm = _Algo
else:
    Algorithm = Annotated[Union[tuple(ALGORITHMS.values())], Field(discriminator="name")]  # noqa: UP007 (a union built at runtime)


# --- hyper-parameters ---------------------------------------------------------------------


class Hyper(_Node):
    batch_size: int = Field(32, ge=1, description="per-worker batch size")
    lr: float = Field(0.1, gt=0, description="learning rate at the reference batch")
    epochs: float | None = Field(None, gt=0, description="passes over the training set")
    steps: int | None = Field(None, ge=1, description="optimizer steps (overrides epochs)")
    seed: int = Field(0, ge=0, description="seed of every random generator")
    optimizer: Literal["sgd", "adam", "adamw", "lars"] = "sgd"
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    lr_scaling: Literal["none", "linear", "sqrt"] = Field(
        "none", description="scale lr by global batch / reference_batch (linear) or its sqrt"
    )
    reference_batch: int = Field(32, ge=1, description="batch the lr was tuned for")
    warmup_epochs: float = Field(0.0, ge=0, description="linear lr warm-up length in epochs")
    warmup_steps: int = Field(0, ge=0, description="linear lr warm-up length in steps")
    lars_eta: float = Field(0.001, gt=0, description="LARS trust coefficient")
    schedule: Literal["constant", "cosine", "step"] = Field("constant", description="lr decay after warm-up")

    @model_validator(mode="after")
    def _length(self) -> Hyper:
        if self.epochs is None and self.steps is None:
            self.__dict__["epochs"] = 10.0
        return self


class DataSpec(_Node):
    path: str = Field(
        "data",
        description="where the data set lives, relative to the shared file system root",
        max_length=1024,
    )
    source: str | None = Field(
        None,
        max_length=1024,
        description="none: `path` on the shared file system; `s3://bucket/prefix`: an "
        "object-store prefix; otherwise a local directory (relative to the "
        "spec), uploaded for the run on cluster stacks (docs/datasets.md)",
    )
    cache: Literal["node", "shared", "none"] = Field(
        "node",
        description="where a `source` is staged: the node-local cache every job on the "
        "node shares, a cache on the shared file system, or the run only",
    )
    loader_workers: int = Field(0, ge=0, le=32, description="DataLoader worker processes")

    @field_validator("path")
    @classmethod
    def _inside_root(cls, v: str) -> str:
        # The data set is staged under the shared root: a job must not write outside it.
        if v.startswith(("/", "~")) or ".." in Path(v).parts or "\0" in v or not v.strip():
            raise ValueError("a path relative to the shared file system root, without '..'")
        return v


class CheckpointSpec(_Node):
    every_steps: int = Field(100, ge=1, description="write a checkpoint every N optimizer steps")
    keep: int = Field(3, ge=1, description="newest checkpoints kept")
    resume: bool = Field(True, description="a (re)started worker resumes from the newest one")
    stall_timeout_s: float | Literal["auto"] | None = Field(
        "auto",
        description="a worker that sees no optimizer step for this long (a stopped "
        "or hung peer) exits, so the group restarts from the newest checkpoint; auto: from "
        "the run's own step time (100 x its recent median, at least 60 s; the first step of "
        "an attempt gets 300 s); seconds: a fixed limit; null: never. Past the limit a "
        "rank still computing (its heartbeat's CPU time advancing) is waited for, up to 10 "
        "x the limit",
    )

    @field_validator("stall_timeout_s", mode="before")
    @classmethod
    def _stall_limit(cls, v: Any) -> Any:
        if v is None or v == "auto":
            return v
        try:
            ok = not isinstance(v, bool) and math.isfinite(float(v)) and float(v) > 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError("a number of seconds > 0, 'auto' or null")
        return float(v)


_Quantity = Annotated[str, Field(pattern=_QUANTITY)]


class CurveSpec(_Node):
    every_steps: int | None = Field(
        None,
        ge=1,
        description="rank 0 writes the model it would hand out now (bmuf: the "
        "global model, easgd: the centre) to the run's snapshots/ every N optimizer steps, "
        "with its wall time, for a learning curve evaluated off the training path "
        "(runtime/curve.py); the end-of-epoch evaluations are then skipped. none: off",
    )


class SecretRef(_Node):
    """Where a secret environment variable's value comes from. The value itself is never
    written to the spec, a manifest, a log or a checkpoint: only this reference is.

    On cluster stacks `secret` and `key` name a Kubernetes Secret in the job's namespace
    (rendered as `valueFrom.secretKeyRef`). On the local stack the value is read at launch
    from `file` or from the launching environment's variable `from_env`.
    """

    secret: str | None = Field(None, description="Kubernetes Secret name (cluster stacks)")
    key: str | None = Field(None, description="key inside that Secret (cluster stacks)")
    file: str | None = Field(None, description="local stack: a file holding the value")
    from_env: str | None = Field(None, description="local stack: a variable of the launching environment")


class Resources(_Node):
    """Per node, on every stack: a node is one pod on a cluster, one torchrun agent (a
    simulated node) locally, and its `procs_per_node` workers share it. Each worker gets
    cpu / procs_per_node threads (OMP_NUM_THREADS, at least 1); a pod requests exactly
    these figures. Per process is derived, never declared."""

    cpu: float = Field(1.0, gt=0, description="CPUs per node, shared by its workers")
    memory: _Quantity = Field("2Gi", description="memory per node (a pod's request and limit)")
    gpu: int = Field(0, ge=0, description="GPUs per node; 0 trains on CPU with gloo")
    gpu_fallback: bool = Field(
        False, description="train on CPU when no usable GPU is found, instead of failing"
    )


class PrecisionSpec(_Node):
    """Numeric precision of built-in tasks. Unset, each field takes the device's safe default
    (runtime/precision.py): on a GPU TF32 matmuls, and bf16 autocast where the GPU computes
    bfloat16 natively; on CPU neither. `{tf32: false, autocast: none}` is plain float32."""

    autocast: Literal["none", "bf16"] | None = Field(
        None,
        description="bf16: forward in bfloat16 autocast (weights stay float32); none: "
        "float32; unset: bf16 on GPUs that support it, none on CPU",
    )
    tf32: bool | None = Field(
        None, description="let float32 matmuls use TF32 tensor cores; unset: on GPUs only"
    )


MAX_NODES = 1024  # the Kubernetes backend sizes pod names for this many (manifests.MAX_NAME)


class JobSpec(_Node):
    """One training job. Saved, resolved, in the run directory and in every checkpoint."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
    task: TaskSpec
    nodes: int = Field(1, ge=1, le=MAX_NODES)
    procs_per_node: int = Field(1, ge=1, le=256)
    resources: Resources = Field(default_factory=Resources)  # type: ignore[arg-type]  # mypy's dataclass_transform misses Field(default, ...)'s positional default
    algorithm: Algorithm = Field(default_factory=SyncAlgo)  # type: ignore[arg-type]  # mypy's dataclass_transform misses Field(default, ...)'s positional default
    hyper: Hyper = Field(default_factory=Hyper)  # type: ignore[arg-type]  # mypy's dataclass_transform misses Field(default, ...)'s positional default
    data: DataSpec = Field(default_factory=DataSpec)  # type: ignore[arg-type]  # mypy's dataclass_transform misses Field(default, ...)'s positional default
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)  # type: ignore[arg-type]  # mypy's dataclass_transform misses Field(default, ...)'s positional default
    precision: PrecisionSpec = Field(default_factory=PrecisionSpec)  # type: ignore[arg-type]  # mypy's dataclass_transform misses Field(default, ...)'s positional default
    curve: CurveSpec = Field(default_factory=CurveSpec)  # type: ignore[arg-type]  # mypy's dataclass_transform misses Field(default, ...)'s positional default
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables")
    secret_env: dict[str, SecretRef] = Field(
        default_factory=dict, description="environment variables whose values are secrets"
    )
    ship_secrets: list[str] = Field(
        default_factory=list,
        description="files shipped with the code although their name or content looks like a "
        "secret (gitignore patterns, relative to the spec's directory); readable wherever the "
        "code is: prefer secret_env",
    )
    priority: Literal["batch", "interactive"] = Field(
        "batch", description="queue priority on cluster stacks (PriorityClass alchemist-<priority>)"
    )
    image: str | None = Field(None, description="container image on cluster stacks")
    requirements: list[str] | str = Field(
        default_factory=list,
        description="the job's own Python packages: requirement strings, or a requirements file "
        "in the spec's directory; resolved once against the platform's lock into a hash-pinned "
        "lock, installed once per lock (docs/dependencies.md)",
    )
    max_restarts: int = Field(3, ge=0, le=100, description="worker-group restarts before failing")
    rendezvous_timeout_s: int = Field(
        900,
        ge=60,
        le=24 * 3600,
        description="cluster stacks: how long pods wait for each other and for pod 0 (seconds)",
    )
    metrics: bool = Field(True, description="serve Prometheus metrics from every worker")

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def global_batch(self) -> int:
        return self.world_size * self.hyper.batch_size

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        allowed = get(self.task.framework).algorithms
        if allowed is not None and self.algorithm.name not in allowed:
            raise ValueError(
                f"algorithm.name={self.algorithm.name} needs torch; a "
                f"{self.task.framework} script brings its own training loop "
                f"(accepted: {', '.join(allowed)}; sync is the default)"
            )
        if isinstance(self.algorithm, AsyncAlgo) and self.algorithm.servers > self.world_size:
            raise ValueError(
                f"algorithm.servers={self.algorithm.servers} exceeds the {self.world_size} workers"
            )
        for key, value in [*self.env.items(), *((k, "") for k in self.secret_env)]:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", key):
                raise ValueError(f"env key {shown(key)} is not a valid environment variable name")
            if "\0" in value:
                raise ValueError(f"env.{key}: a NUL character cannot be in an environment value")
        both = sorted(set(self.env) & set(self.secret_env))
        if both:
            raise ValueError(f"env and secret_env both set {both[0]}; accepted: one of them")
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


# --- loading -----------------------------------------------------------------------------


def apply_override(raw: dict, assignment: str, source: str = "--set") -> None:
    """Apply one `key.path=value` to the raw spec dict; the value is parsed as YAML."""
    if "=" not in assignment:
        raise UserError(f"{source} {shown(assignment)}: expected KEY.PATH=VALUE, e.g. hyper.lr=0.05")
    path, _, text = assignment.partition("=")
    keys = path.strip().split(".")
    if not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", k) for k in keys) or len(keys) > 8:
        raise UserError(
            f"{source} {shown(assignment)}: {shown(path)} is not a dotted field path; accepted: e.g. hyper.lr"
        )
    if keys[0] == "env" and len(keys) == 2:
        # An environment value is a string as written: --set env.X=5 is "5" and 0.10 stays
        # "0.10"; a quoted YAML string loses its quotes.
        try:
            parsed = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            parsed = None
        value: Any = parsed if isinstance(parsed, str) else text
    else:
        try:
            value = load_yaml(text, f"{source} {shown(assignment)}") if text.strip() else ""
        except UserError as e:
            if "accepted: a YAML mapping" not in str(e):
                raise  # too deep, too large, duplicate keys: refused, not taken as text
            value = text
    node = raw
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        elif not isinstance(child, dict):
            raise UserError(
                f"{source} {shown(assignment)}: {'.'.join(keys[: i + 1])} is a value, not a section"
            )
        node = child
    node[keys[-1]] = value


def _describe_error(err: Mapping[str, Any]) -> tuple[str, str]:
    """(field path, what is accepted) for one pydantic error, in the spec's own words."""
    loc = [str(p) for p in err["loc"]]
    guess = _closest_field(loc) if err["type"] == "extra_forbidden" else None
    # Discriminated unions put the tag in the path (algorithm.bmuf.tau): drop it.
    if len(loc) >= 2 and loc[0] == "algorithm" and loc[1] in ALGORITHMS:
        loc = [loc[0]] + loc[2:]
    kind, ctx, msg = err["type"], err.get("ctx") or {}, err["msg"]
    accepted = {
        "extra_forbidden": "no such field (check the spelling; see examples/ for every field)",
        "missing": "a value is required",
        "union_tag_invalid": "one of sync, async, bmuf, easgd",
        "union_tag_not_found": "a `name` of sync, async, bmuf or easgd",
        BOOL_AS_NUMBER: "a number (true and false are not numbers)",
    }.get(kind)
    if kind == BOOL_AS_NUMBER:
        loc.append(str(ctx["field"]))
    if accepted is None:
        if kind == "literal_error":
            accepted = "one of " + ctx.get("expected", "").replace("'", "")
        elif kind in ("greater_than_equal", "greater_than", "less_than", "less_than_equal"):
            op = {"greater_than_equal": ">=", "greater_than": ">", "less_than": "<", "less_than_equal": "<="}[
                kind
            ]
            bound = next(iter(ctx.values()))
            accepted = f"a number {op} {bound}"
        elif kind == "string_pattern_mismatch" and ctx.get("pattern") == _QUANTITY:
            accepted = (
                "a Kubernetes quantity such as 2Gi, 512Mi or 1.5 (a number, optionally "
                "with a suffix: Ki Mi Gi Ti Pi Ei, k M G T P E or m)"
            )
        elif kind == "string_pattern_mismatch":
            accepted = f"a string matching {ctx.get('pattern')}"
        elif kind == "value_error":
            accepted = msg.removeprefix("Value error, ")
        else:
            accepted = msg[0].lower() + msg[1:]
    if guess is not None:
        accepted = f"no such field; did you mean {guess}? (see examples/ for every field)"
    return ".".join(loc) or "(top level)", accepted


def _closest_field(loc: list[str]) -> str | None:
    """The field of the spec's model at loc[:-1] whose name is closest to the unknown
    loc[-1] (difflib), if one is close enough to be what was meant."""
    models: list[type[BaseModel]] = [JobSpec]
    for part in loc[:-1]:
        reached = [
            m
            for model in models
            if part in model.model_fields
            for m in _models_in(model.model_fields[part].annotation)
        ]
        if reached:
            models = reached
            continue
        # a union's tag (algorithm.bmuf.tau) picks its member; a list index or key keeps all
        tagged = [
            m
            for m in models
            if "name" in m.model_fields and part in get_args(m.model_fields["name"].annotation)
        ]
        models = tagged or models
    names = sorted({n for m in models for n in m.model_fields})
    found = difflib.get_close_matches(loc[-1], names, n=1, cutoff=0.6) if loc else []
    return found[0] if found else None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (X, X | None, a union, Annotated, list[X])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _inside_spec_dir(rel: str, field: str, spec_dir: Path, source: str) -> str:
    """A Python file the task names, as its path inside the spec's directory: the run
    executes its own copy of that directory, so a file outside it would run from wherever
    it lies, as it is then."""
    path = (spec_dir / rel).resolve()
    if not path.is_file():
        raise UserError(
            f"{source}: {field}: {rel!r} not found (looked for {path}); accepted: "
            "a path to a Python file, relative to the spec"
        )
    top = Path(spec_dir).resolve()
    if top not in path.parents:
        raise UserError(
            f"{source}: {field}: {rel!r} lies outside the spec's directory {top}; accepted: a "
            "file inside it (the run executes its own copy of that directory)"
        )
    return path.relative_to(top).as_posix()


def _requirements(given: list[str] | str, spec_dir: Path, source: str) -> list[str]:
    """`requirements:` as a list of checked requirement strings: a file's lines (comments and
    blank lines dropped) or the list as given. The run keeps the list, not the file."""
    where = "requirements"
    if isinstance(given, str):
        path = (spec_dir / given).resolve()
        if Path(spec_dir).resolve() not in path.parents or not path.is_file():
            raise UserError(
                f"{source}: requirements: {shown(given)} is not a file inside the "
                f"spec's directory; accepted: a requirements file beside the spec, "
                "or a list of requirements"
            )
        lines = [ln.split(" #")[0].strip() for ln in read_text(path, "requirements file").splitlines()]
        given, where = [ln for ln in lines if ln and not ln.startswith("#")], f"requirements ({given})"
    if len(given) > 200:
        raise UserError(f"{source}: requirements: {len(given)} requirements; accepted: at most 200")
    return [check_requirement(r, f"{source}: {where}") for r in given]


def _check_task(spec: JobSpec, spec_dir: Path, source: str) -> None:
    """Checks that need the task: the script or entry file exists; the batch fits the data."""
    spec.requirements = _requirements(spec.requirements, spec_dir, source)
    if spec.task.script is not None:
        spec.task.script = _inside_spec_dir(spec.task.script, "task.script", spec_dir, source)
    if spec.task.entry_file is not None:
        assert spec.task.entry is not None  # entry_file is entry's file
        function = spec.task.entry.rpartition(":")[2]
        rel = _inside_spec_dir(spec.task.entry_file, "task.entry", spec_dir, source)
        spec.task.entry = f"{rel}:{function}"
    if spec.data.source is not None:  # an S3 URI checked, a local directory made absolute
        if spec.data.source.startswith("s3://"):
            parse_s3_uri(spec.data.source, f"{source}: data.source")
        else:
            spec.data.source = resolve_local_source(spec.data.source, spec_dir, source)
    if spec.task.builtin is not None and spec.data.source is None:
        n = spec.task.train_set_size
        if spec.global_batch > n:
            raise UserError(
                f"{source}: hyper.batch_size: {spec.hyper.batch_size} x {spec.world_size} workers "
                f"= {spec.global_batch} exceeds the {n} training samples of task "
                f"{spec.task.builtin}; accepted: batch_size <= {n // spec.world_size}"
            )
        accum = spec.algorithm.micro_batches
        if spec.global_batch * accum > n:
            raise UserError(
                f"{source}: algorithm.grad_accum: {accum} micro-batches of {spec.global_batch} "
                f"exceed the {n} training samples of task {spec.task.builtin}; accepted: "
                f"grad_accum <= {n // spec.global_batch}"
            )


def unhonoured(spec: JobSpec) -> str | None:
    """For a TensorFlow or JAX task, the first field set to something other than its default
    that such a script cannot honour, as `field: value ...; accepted: ...` (None: all fine)."""
    framework = spec.task.framework
    fw = get(framework)
    if not fw.own_loop:
        return None
    for section, why in IGNORED_BY_OWN_FRAMEWORK.items():
        top, _, only = section.partition(".")
        node = getattr(spec, top)
        default = type(node)()
        honoured = fw.algorithm_fields if top == "algorithm" else frozenset()
        for name in type(node).model_fields:
            if name == "name" or name in honoured or (only and name != only):
                continue
            value, dflt = getattr(node, name), getattr(default, name)
            if value != dflt:
                return (
                    f"{top}.{name}: {value!r} is not honoured by a script of "
                    f"task.framework {framework} ({why}); accepted: the default "
                    f"({_shown_default(dflt)})"
                )
    return None


def _shown_default(value: Any) -> str:
    return "unset" if value is None else repr(value)


def parse_spec(raw: Any, source: str, spec_dir: Path | None = None) -> JobSpec:
    """Validate a raw (already-YAML-parsed) spec; one UserError line on the first problem."""
    if not isinstance(raw, dict):
        raise UserError(f"{source}: the spec must be a YAML mapping, got {type(raw).__name__}")
    try:
        spec = JobSpec.model_validate(raw)
    except ValidationError as e:
        errors = e.errors()
        field, accepted = _describe_error(errors[0])
        value = errors[0].get("input")
        if errors[0]["type"] in ("union_tag_invalid", "union_tag_not_found"):
            field, value = field + ".name", (errors[0].get("ctx") or {}).get("tag")
        elif errors[0]["type"] == BOOL_AS_NUMBER:
            value = errors[0]["ctx"]["value"]
        text = "{...}" if isinstance(value, dict) else "[...]" if isinstance(value, list) else shown(value)
        if errors[0]["type"] == "missing":
            text = "(missing)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise UserError(
            f"{shown_source(source)}: {field[:80]}: {text} is invalid; accepted: {accepted[:120]}{more}"
        ) from None
    ignored = unhonoured(spec)  # a TensorFlow or JAX script's own loop would ignore it
    if ignored:
        raise UserError(f"{shown_source(source)}: {ignored}")
    _check_task(spec, spec_dir or Path.cwd(), source)
    _warn_secret_looking_env(spec, source)
    return spec


def _warn_secret_looking_env(spec: JobSpec, source: str) -> None:
    """`env:` values are not secrets by contract: they travel in clear (the dry run, the run's
    spec.yaml, every checkpoint). One warning line for each that detect-secrets takes for one;
    the value itself is never printed."""
    if not any(spec.env.values()):
        return

    for key, value in spec.env.items():
        kinds = value_looks_secret(key, value)
        if kinds:
            print(
                f"warning: {shown_source(source)}: env.{key}: the value looks like a secret "
                f"({kinds}), and env values travel in clear (dry run, the run's spec.yaml, "
                f"checkpoints); accepted: secret_env.{key} with file, from_env or a "
                "Kubernetes Secret",
                file=sys.stderr,
            )


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Read a job spec file, apply `--set` overrides, validate. Raises UserError."""
    path = Path(path)
    source = shown_source(str(path))
    raw = load_yaml(read_text(path, "job spec"), source)
    raw = {} if raw is None else raw
    for assignment in overrides:
        if not isinstance(raw, dict):
            break
        apply_override(raw, assignment)
    try:
        return parse_spec(raw, source, path.parent)
    except RecursionError:
        raise UserError(f"{source}: nested too deeply; accepted: a job spec") from None


def shown_source(source: str) -> str:
    """A file name as errors show it: at most 80 characters (the end, which names it)."""
    return source if len(source) <= 80 else "..." + source[-77:]


def script_spec(script: str | Path, args: list[str], overrides: Sequence[str] = ()) -> JobSpec:
    """`alchemist run train.py -- ARGS` without a YAML file: a script task named after the
    file, one process unless `--set procs_per_node=N` (or nodes) says otherwise."""
    script = Path(script)
    if not script.is_file():
        raise UserError(
            f"{shown_source(str(script))}: no such script; accepted: a Python file, or a job spec (YAML)"
        )
    name = re.sub(r"[^a-z0-9-]+", "-", script.stem.lower()).strip("-")[:40].strip("-") or "job"
    raw: dict[str, Any] = {"name": name, "task": {"script": script.name, "args": list(args)}}
    for assignment in overrides:
        apply_override(raw, assignment)
    return parse_spec(raw, shown_source(str(script)), script.parent)
