"""The statuses of ended local runs, kept in one file so that listing thousands of runs reads one file.

An ended run (its launcher recorded succeeded, failed or cancelled) never changes again, so
`list` need not read its three files on every call. The index keeps each ended run's
status beside the modification time of its directory: every file the status comes from
(run.json, progress.json, result.json) is replaced atomically by a rename inside that
directory, which updates the directory's mtime, so an entry whose mtime still matches is the
status those files would give. The mtime is taken before the files are read, so a write that
lands during the read only makes the next listing read the run again.

The file is JSON lines: `{"version": 4, "sha256": ...}`; `[[run_id, mtime_ns, created,
state], ...]`, one for each run; then each run's as_json() document, in that order. A document
stays encoded until something needs its fields, so `list --json` prints it as it is: decoding
and re-encoding 10,000 documents was most of such a listing.

The run directories always win. Every document is validated in full before it is written
(each field's type, nesting and size bounded, its state an ended one that its head repeats,
its run directory the one it names), and the header holds the SHA-256 of everything after
it: a line cut in half, an edited field or a lying state fails that check, and then the whole
index is rebuilt from the run directories, never trusted in part. The file lives in the
private runs folder (rundir.check_home), is read without following links, and temp files
that killed listings left behind are removed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from alchemist_jobs.run_files import Failure, Progress, Result, RunRecord
from alchemist_jobs.rundir import RUN_REF, read_json, remove_dead_temp_files, trusted_owner, write_text_atomic
from alchemist_jobs.scheduler import CANCELLED, FAILED, SUCCEEDED, RunStatus, decode_all

INDEX = ".ended-runs.jsonl"
OLD_INDEX = ".ended-runs.json"  # the version 2 index, one JSON document
VERSION = 4  # 3: JSON lines, each document kept encoded; 4: validated, with a digest
MAX_INDEX_BYTES = 1 << 30
MAX_DOC_BYTES = 1 << 20  # a run's document: its message and failure lines are capped far below
MAX_DEPTH = 8  # the deepest a document nests (progress -> metrics -> value is 3)
ENDED = (SUCCEEDED, FAILED, CANCELLED)


class Entry(NamedTuple):
    """One ended run: its directory's mtime, what a listing sorts and filters on, and its
    `as_json()` document as JSON text."""

    mtime: int
    created: float | None
    state: str
    text: str

    @classmethod
    def of(cls, mtime: int, status: RunStatus) -> Entry:
        entry = cls(mtime, status.created, status.state, json.dumps(status.as_json()))
        _from_run_dir[status.run_id] = entry.text  # its state is the directory's own
        return entry


def statuses(entries: Iterable[Entry]) -> list[RunStatus]:
    return [status_from_json(doc) for doc in decode_all(e.text for e in entries)]


def load(runs: Path) -> dict[str, Entry]:
    """run id -> Entry for every indexed run; {} for an index that is not one, or that has
    a single entry that fails its checks (the caller rebuilds it from the run directories)."""
    _checked.clear()
    _from_run_dir.clear()
    try:
        remove_dead_temp_files(runs, [n for n in os.listdir(runs) if n.startswith(f".{INDEX}.")], of=INDEX)
        fd = os.open(runs / INDEX, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_INDEX_BYTES or not trusted_owner(st):
                return {}
            data = f.read()
        header, newline, body = data.partition(b"\n")
        head = json.loads(header)
        if not (
            isinstance(head, dict)
            and head.get("version") == VERSION
            and newline
            and head.get("sha256") == hashlib.sha256(body).hexdigest()
        ):
            return {}
        lines = body.decode("utf-8").split("\n")
        if len(lines) < 2 or lines[-1] != "":
            return {}
        heads, texts = json.loads(lines[0]), lines[1:-1]
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(heads, list) or len(heads) != len(texts):
        return {}
    out = {}
    for head, text in zip(heads, texts):
        entry = _entry(head, text)
        if entry is None or entry[0] in out:
            return {}  # one damaged entry: the whole index is rebuilt, none of it trusted
        out[entry[0]] = entry[1]
    # what save() validated and the digest vouches for is not checked again
    _checked.update((run_id, e.text) for run_id, e in out.items())
    return out


# run id -> the document text (that very object) which the last load() found as save() wrote it
_checked: dict[str, str] = {}
# run id -> the document text (that very object) Entry.of made from the run directory
_from_run_dir: dict[str, str] = {}


def _entry(head: Any, text: str) -> tuple[str, Entry] | None:
    """The entry a head and its document make, checked as far as it can be without decoding
    the document (save() validated it in full; the digest says it is what save wrote)."""
    if not (isinstance(head, list) and len(head) == 4):
        return None
    run_id, mtime, created, state = head
    if not (
        isinstance(run_id, str)
        and RUN_REF.fullmatch(run_id)
        and _int(mtime)
        and (created is None or _number(created))
        and state in ENDED
        and len(text) <= MAX_DOC_BYTES
        # an entry speaks for the run it names only: its document opens with that id,
        # as as_json() writes it
        and text.startswith(f'{{"run_id": "{run_id}", ')
    ):
        return None
    return run_id, Entry(mtime, created, state, text)


def save(runs: Path, entries: dict[str, Entry]) -> None:
    """Replace the index atomically with the entries that pass full validation (the others
    are read from their run directories again); a listing that cannot write it still
    answers."""
    valid = _valid(runs, entries)
    good = {run_id: e for run_id, e in entries.items() if run_id in valid}
    heads = json.dumps([[run_id, e.mtime, e.created, e.state] for run_id, e in good.items()])
    body = "\n".join([heads, *(e.text for e in good.values())]) + "\n"
    header = json.dumps({"version": VERSION, "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest()})
    try:
        write_text_atomic(runs / INDEX, header + "\n" + body)
        (runs / OLD_INDEX).unlink(missing_ok=True)
    except OSError:
        pass


def _valid(runs: Path, entries: dict[str, Entry]) -> set[str]:
    """The ids whose entries pass full validation (one decoding of all of them, each one
    alone only where that fails)."""
    ids = [
        run_id
        for run_id, e in entries.items()
        if _entry([run_id, e.mtime, e.created, e.state], e.text) is not None
    ]
    done = {run_id for run_id in ids if _checked.get(run_id) is entries[run_id].text}
    ids = [run_id for run_id in ids if run_id not in done]
    docs: list[dict[str, Any] | None]
    try:
        docs = list(decode_all(entries[run_id].text for run_id in ids))
    except (ValueError, RecursionError):
        docs = []
        for run_id in ids:
            try:
                docs.append(json.loads(entries[run_id].text))
            except (ValueError, RecursionError):
                docs.append(None)
    return done | {
        run_id
        for run_id, doc in zip(ids, docs)
        if valid_doc(doc, runs / run_id, entries[run_id])
        and _state_of_run_dir(runs / run_id, entries[run_id])
    }


def _state_of_run_dir(run_dir: Path, entry: Entry) -> bool:
    """Whether the state an entry claims is the one its run directory records: read from
    run.json unless the entry was just made from that directory (Entry.of)."""
    if _from_run_dir.get(run_dir.name) is entry.text:
        return True
    return RunRecord.lenient(read_json(run_dir / "run.json")).state == entry.state


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _opt(check, x: Any) -> bool:
    return x is None or check(x)


def _str(x: Any) -> bool:
    return isinstance(x, str)


def _count(x: Any) -> bool:
    return _int(x) and x >= 0


def _metrics(x: Any) -> bool:
    return isinstance(x, dict) and all(isinstance(k, str) and _number(v) for k, v in x.items())


# Each field of RunStatus.as_json() (scheduler.py) and the type a reader may rely on.
FIELDS = {
    "run_id": _str,
    "name": _str,
    "stack": _str,
    "state": _str,
    "created": lambda x: _opt(_number, x),
    "ended": lambda x: _opt(_number, x),
    "workers": _count,
    "restarts": _count,
    "step": lambda x: _opt(_count, x),
    "total_steps": lambda x: _opt(_count, x),
    "message": _str,
    "run_dir": _str,
    "exit_codes": lambda x: x is None or isinstance(x, list) and all(_opt(_int, c) for c in x),
    "restarts_counted": lambda x: _opt(_count, x),
    "stuck_pods": lambda x: isinstance(x, list) and all(isinstance(p, dict) for p in x),
    "failure": lambda x: x is None or isinstance(x, dict),
    "algorithm": lambda x: _opt(_str, x),
    "metrics": _metrics,
    "duration_s": lambda x: _opt(_number, x),
    "progress": lambda x: x is None or isinstance(x, dict),
    "result": lambda x: x is None or isinstance(x, dict),
}


def valid_doc(doc: Any, run_dir: Path, entry: Entry) -> bool:
    """Whether `doc` is an ended run's as_json() that a listing can show as it is: every
    field of its declared type, nested no deeper than MAX_DEPTH, its state and creation
    time those of its head, its run directory the one the index names it for."""
    # (a field added to as_json() since is kept; nesting and size bound it)
    if not (
        isinstance(doc, dict)
        and doc.keys() >= FIELDS.keys()
        and all(check(doc[k]) for k, check in FIELDS.items())
    ):
        return False
    if not (
        doc["state"] == entry.state
        and doc["created"] == entry.created
        and doc["run_id"] == run_dir.name
        and doc["run_dir"] == str(run_dir)
        and _depth(doc) <= MAX_DEPTH
    ):
        return False
    try:  # as status_from_json reads them, strictly: no value is coerced
        for key, model in (("progress", Progress), ("result", Result)):
            if doc[key] is not None:
                model.model_validate(doc[key], strict=True)
        if doc["failure"] is not None:
            Failure.model_validate(doc["failure"], strict=True)
    except ValueError:
        return False
    return True


def _depth(doc: Any) -> int:
    deepest, todo = 0, [(doc, 1)]
    while todo:
        x, d = todo.pop()
        deepest = max(deepest, d)
        if deepest > MAX_DEPTH:
            return deepest
        if isinstance(x, dict):
            todo += [(v, d + 1) for v in x.values()]
        elif isinstance(x, list):
            todo += [(v, d + 1) for v in x]
    return deepest


def status_from_json(doc: dict[str, Any]) -> RunStatus:
    """The RunStatus that `RunStatus.as_json()` wrote: the fields `list` shows (progress.json
    and result.json as their declared fields; `status RUN` reads every key)."""
    prog, res = doc.get("progress"), doc.get("result")
    return RunStatus(
        run_id=doc["run_id"],
        name=doc.get("name", ""),
        stack=doc.get("stack", "local"),
        state=doc["state"],
        created=doc.get("created"),
        ended=doc.get("ended"),
        workers=doc.get("workers", 0),
        restarts=doc.get("restarts", 0),
        step=doc.get("step"),
        total_steps=doc.get("total_steps"),
        message=doc.get("message", ""),
        run_dir=doc.get("run_dir"),
        exit_codes=doc.get("exit_codes"),
        failure=doc.get("failure"),
        algorithm=doc.get("algorithm"),
        progress=None if prog is None else Progress.model_validate(prog),
        result=None if res is None else Result.model_validate(res),
        source=doc,
    )


def dir_mtime(entry: os.DirEntry) -> int:
    return entry.stat(follow_symlinks=False).st_mtime_ns
