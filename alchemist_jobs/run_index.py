"""The statuses of ended local runs, kept in one file so that listing thousands of runs reads one file.

An ended run (its launcher recorded succeeded, failed or cancelled) never changes again, so
`list` need not read its three files on every call. The index keeps each ended run's
status beside the modification time of its directory: every file the status comes from
(run.json, progress.json, result.json) is replaced atomically by a rename inside that
directory, which updates the directory's mtime, so an entry whose mtime still matches is the
status those files would give. The mtime is taken before the files are read, so a write that
lands during the read only makes the next listing read the run again.

The file lives in the private runs folder; a missing, corrupt or foreign-shaped index is
rebuilt from the runs themselves, never trusted over them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from alchemist_jobs.run_files import Progress, Result
from alchemist_jobs.rundir import read_json, write_json_atomic
from alchemist_jobs.scheduler import RunStatus

INDEX = ".ended-runs.json"
VERSION = 2  # 2: a status holds `failure`
MAX_INDEX_BYTES = 1 << 30  # read_json's own cap is for one run's files


def load(runs: Path) -> dict[str, tuple[int, dict[str, Any]]]:
    """run id -> (directory mtime in ns, the run's `as_json()` status) for every indexed run."""
    data = read_json(runs / INDEX, limit=MAX_INDEX_BYTES) or {}
    if data.get("version") != VERSION or not isinstance(data.get("runs"), dict):
        return {}
    out = {}
    for run_id, entry in data["runs"].items():
        if (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int)
                and isinstance(entry[1], dict) and entry[1].get("run_id") == run_id):
            out[run_id] = (entry[0], entry[1])
    return out


def save(runs: Path, entries: dict[str, tuple[int, dict[str, Any]]]) -> None:
    """Replace the index atomically; a listing that cannot write it still answers."""
    try:
        write_json_atomic(runs / INDEX, {"version": VERSION,
                                         "runs": {k: list(v) for k, v in entries.items()}},
                          indent=None)
    except OSError:
        pass


def status_from_json(doc: dict[str, Any]) -> RunStatus:
    """The RunStatus that `RunStatus.as_json()` wrote: the fields `list` shows (progress.json
    and result.json as their declared fields; `status RUN` reads every key)."""
    prog, res = doc.get("progress"), doc.get("result")
    return RunStatus(
        run_id=doc["run_id"], name=doc.get("name", ""), stack=doc.get("stack", "local"),
        state=doc["state"], created=doc.get("created"), ended=doc.get("ended"),
        workers=doc.get("workers", 0), restarts=doc.get("restarts", 0), step=doc.get("step"),
        total_steps=doc.get("total_steps"), message=doc.get("message", ""),
        run_dir=doc.get("run_dir"), exit_codes=doc.get("exit_codes"), failure=doc.get("failure"),
        progress=None if prog is None else Progress.model_validate(prog),
        result=None if res is None else Result.model_validate(res), source=doc)


def dir_mtime(entry: os.DirEntry) -> int:
    return entry.stat(follow_symlinks=False).st_mtime_ns
