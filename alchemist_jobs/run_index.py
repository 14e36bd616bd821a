"""The statuses of ended local runs, kept in one file so that listing thousands of runs reads one file.

An ended run (its launcher recorded succeeded, failed or cancelled) never changes again, so
`list` need not read its three files on every call. The index keeps each ended run's
status beside the modification time of its directory: every file the status comes from
(run.json, progress.json, result.json) is replaced atomically by a rename inside that
directory, which updates the directory's mtime, so an entry whose mtime still matches is the
status those files would give. The mtime is taken before the files are read, so a write that
lands during the read only makes the next listing read the run again.

The file is JSON lines: `{"version": 3}`; `[[run_id, mtime_ns, created, state], ...]`, one
for each run; then each run's as_json() document, in that order. A document stays encoded
until something needs its fields, so `list --json` prints it as it is: decoding and
re-encoding 10,000 documents was most of such a listing.

The file lives in the private runs folder; a missing, corrupt or foreign-shaped index is
rebuilt from the runs themselves, never trusted over them.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from alchemist_jobs.run_files import Progress, Result
from alchemist_jobs.rundir import write_text_atomic
from alchemist_jobs.scheduler import RunStatus, decode_all

INDEX = ".ended-runs.jsonl"
OLD_INDEX = ".ended-runs.json"  # the version 2 index, one JSON document
VERSION = 3  # 3: JSON lines, each document kept encoded
HEADER = json.dumps({"version": VERSION})
MAX_INDEX_BYTES = 1 << 30


class Entry(NamedTuple):
    """One ended run: its directory's mtime, what a listing sorts and filters on, and its
    `as_json()` document as JSON text."""

    mtime: int
    created: float | None
    state: str
    text: str

    @classmethod
    def of(cls, mtime: int, status: RunStatus) -> Entry:
        return cls(mtime, status.created, status.state, json.dumps(status.as_json()))


def statuses(entries: Iterable[Entry]) -> list[RunStatus]:
    return [status_from_json(doc) for doc in decode_all(e.text for e in entries)]


def load(runs: Path) -> dict[str, Entry]:
    """run id -> Entry for every indexed run; {} for an index that is not one."""
    try:
        fd = os.open(runs / INDEX, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang `list`
        with open(fd, encoding="utf-8") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_INDEX_BYTES:
                return {}
            lines = f.read().split("\n")
        if len(lines) < 3 or lines[0] != HEADER or lines[-1] != "":
            return {}
        heads, texts = json.loads(lines[1]), lines[2:-1]
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(heads, list) or len(heads) != len(texts):
        return {}
    out = {}
    for head, text in zip(heads, texts):
        if not (isinstance(head, list) and len(head) == 4):
            return {}
        run_id, mtime, created, state = head
        # An entry speaks for the run it names only: its document opens with that id, as
        # as_json() writes it (a listing looks up only ids that need no escaping).
        if (isinstance(run_id, str) and isinstance(mtime, int) and isinstance(state, str)
                and (created is None or isinstance(created, (int, float)))
                and text.startswith(f'{{"run_id": "{run_id}", ')):
            out[run_id] = Entry(mtime, created, state, text)
    return out


def save(runs: Path, entries: dict[str, Entry]) -> None:
    """Replace the index atomically; a listing that cannot write it still answers."""
    heads = json.dumps([[run_id, e.mtime, e.created, e.state] for run_id, e in entries.items()])
    try:
        write_text_atomic(runs / INDEX, "\n".join([HEADER, heads, *(e.text for e in entries.values())])
                          + "\n")
        (runs / OLD_INDEX).unlink(missing_ok=True)
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
        algorithm=doc.get("algorithm"),
        progress=None if prog is None else Progress.model_validate(prog),
        result=None if res is None else Result.model_validate(res), source=doc)


def dir_mtime(entry: os.DirEntry) -> int:
    return entry.stat(follow_symlinks=False).st_mtime_ns
