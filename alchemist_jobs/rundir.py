"""The run directory on the shared file system: one per run, the same layout on every stack.

    <root>/runs/<run id>/
        spec.yaml              the resolved job spec
        run.json               launcher state: state, pids, times, exit code (local stack)
        progress.json          rank 0's latest step, loss, throughput (rewritten atomically)
        result.json            rank 0's summary at the end (loss, accuracy, wall time...)
        logs/rank-<N>.log      each worker's stdout and stderr, all attempts appended
        logs/agent-<K>.log     the torchrun agent of node K
        workers/rank-<N>.json  where each worker runs and serves its metrics
        checkpoints/           step-<S>.pt, written atomically
        tensorboard/           rank 0's event files

Workers and launchers share only this module, so neither needs the other's code.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

RUNS = "runs"


def default_root() -> Path:
    """The local stack's shared-file-system root: $ALCHEMIST_HOME, else ~/.alchemist."""
    env = os.environ.get("ALCHEMIST_HOME")
    return Path(env).expanduser() if env else Path.home() / ".alchemist"


def new_run_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def write_json_atomic(path: Path, data: Any, fsync: bool = False) -> None:
    """Write JSON so a reader sees the old or the new file, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, default=str)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class RunDir:
    def __init__(self, path: Path):
        self.path = Path(path)

    @property
    def run_id(self) -> str:
        return self.path.name

    # files
    spec = property(lambda self: self.path / "spec.yaml")
    state_file = property(lambda self: self.path / "run.json")
    progress_file = property(lambda self: self.path / "progress.json")
    result_file = property(lambda self: self.path / "result.json")
    logs = property(lambda self: self.path / "logs")
    workers = property(lambda self: self.path / "workers")
    checkpoints = property(lambda self: self.path / "checkpoints")
    tensorboard = property(lambda self: self.path / "tensorboard")

    def rank_log(self, rank: int) -> Path:
        return self.logs / f"rank-{rank}.log"

    def agent_log(self, node: int) -> Path:
        return self.logs / f"agent-{node}.log"

    def worker_file(self, rank: int) -> Path:
        return self.workers / f"rank-{rank}.json"

    def create(self) -> None:
        for d in (self.path, self.logs, self.workers, self.checkpoints, self.tensorboard):
            d.mkdir(parents=True, exist_ok=True)

    def state(self) -> dict:
        return read_json(self.state_file) or {}

    def update_state(self, **changes: Any) -> dict:
        data = self.state()
        data.update(changes)
        write_json_atomic(self.state_file, data)
        return data

    def progress(self) -> dict | None:
        return read_json(self.progress_file)

    def result(self) -> dict | None:
        return read_json(self.result_file)

    def worker_records(self) -> list[dict]:
        out = []
        for p in sorted(self.workers.glob("rank-*.json")):
            rec = read_json(p)
            if rec:
                out.append(rec)
        return sorted(out, key=lambda r: r.get("rank", 0))


def runs_root(root: Path) -> Path:
    return Path(root) / RUNS


def find_run(root: Path, ref: str) -> RunDir | None:
    """A run by exact id, or by a unique prefix of one (`digits-2026` is enough)."""
    base = runs_root(root)
    exact = base / ref
    if (exact / "spec.yaml").exists():
        return RunDir(exact)
    matches = sorted(p for p in base.glob(f"{ref}*") if (p / "spec.yaml").exists()) if base.exists() else []
    if len(matches) == 1:
        return RunDir(matches[0])
    return None


def all_runs(root: Path) -> list[RunDir]:
    base = runs_root(root)
    if not base.exists():
        return []
    runs = [RunDir(p) for p in base.iterdir() if (p / "spec.yaml").exists()]
    return sorted(runs, key=lambda r: r.state().get("created", 0))
