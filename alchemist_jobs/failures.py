"""Why a local run failed, told from its own files: the rank torchrun names as the root
cause (its exit code or signal), the end of that rank's last attempt, and the agent's lines
that say so. torchrun writes the root cause into the agent's log (ChildFailedError)."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from pathlib import Path

_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
ROOT_CAUSE = "Root Cause (first observed failure):"


@dataclass
class RootCause:
    rank: int
    exitcode: int
    agent_log: Path
    agent_lines: list[str]

    def describe(self) -> str:
        return f"rank {self.rank} failed: {exit_text(self.exitcode)}"


def exit_text(code: int) -> str:
    """`exit 1`, or `exit -6 (SIGABRT)` for a process a signal ended."""
    if code < 0:
        try:
            return f"exit {code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"exit {code} (signal {-code})"
    return f"exit {code}"


def _lines(path: Path, limit: int = 1 << 20) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


_TIME = re.compile(r"^\s*time\s*:\s*(\S+)")
_ENTRY = re.compile(r"^\[\d+\]:\s*$")
# how an agent stops the rest of a group, not how a worker breaks
_STOPPING = (-signal.SIGTERM, -signal.SIGINT)


def _entries(lines: list[str]) -> list[tuple[int, int, str, list[str]]]:
    """(rank, exit code, time, lines) of each failure entry (`[0]:` and its fields) in lines."""
    out, current = [], None
    for line in lines:
        text = line.strip()
        if _ENTRY.match(text):
            current = [line]
            out.append(current)
        elif current is not None and text and (set(text) <= {"-", "="} or text == ROOT_CAUSE):
            current = None
        elif current is not None:
            current.append(line)
    found = []
    for entry in out:
        rank = next((int(m.group(1)) for m in map(_RANK.match, entry) if m), None)
        code = next((int(m.group(1)) for m in map(_EXIT.match, entry) if m), None)
        when = next((m.group(1) for m in map(_TIME.match, entry) if m), "")
        if rank is not None and code is not None:
            found.append((rank, code, when, [ln for ln in entry if ln.strip()]))
    return found


def root_cause(logs: Path) -> RootCause | None:
    """The newest root cause any agent log of the run reports: the failure torchrun names,
    unless its block lists another, seen in the same second, that a signal ended. torchrun
    orders failures by whole seconds and breaks a tie by rank, so a rank that aborts and the
    peer whose collective then breaks tie, and it names the lower rank; the death is the cause."""
    for path in sorted(logs.glob("agent-*.log")):
        lines = _lines(path)
        starts = [i for i, line in enumerate(lines) if line.strip() == ROOT_CAUSE]
        if not starts:
            continue
        start = starts[-1]
        root = _entries(lines[start + 1 : start + 9])
        if not root:
            continue
        listed = [i for i, line in enumerate(lines[:start]) if line.strip() == "Failures:"]
        others = _entries(lines[listed[-1] + 1 : start]) if listed else []
        cause = root[0]
        died = [o for o in others if o[1] < 0 and o[1] not in _STOPPING and o[2] == cause[2]]
        if cause[1] >= 0 and died:
            cause = died[0]
        rank, code, _, shown = cause
        return RootCause(rank, code, path, [ROOT_CAUSE, *shown] if cause is root[0] else shown)
    return None


def last_attempt(path: Path) -> list[str]:
    """The lines of a rank log's last attempt (the bootstrap heads each with `=== rank`)."""
    lines = _lines(path)
    starts = [i for i, line in enumerate(lines) if line.startswith("=== rank ")]
    return lines[starts[-1] + 1 :] if starts else lines


def failure_lines(logs: Path, n: int = 12) -> list[str]:
    """What the summary of a failed run shows: the root cause and the failing rank's last
    lines, then the agent's; without a root cause, the rank log that holds an error."""
    cause = root_cause(logs)
    if cause is not None:
        body = last_attempt(logs / f"rank-{cause.rank}.log")
        out = [cause.describe()]
        out += [f"[rank-{cause.rank}.log] {line}" for line in body[-n:]]
        out += [f"[{cause.agent_log.name}] {line}" for line in cause.agent_lines]
        return out
    ranked = []
    for path in sorted(logs.glob("rank-*.log"), key=lambda p: int(p.stem.split("-")[1])):
        body = last_attempt(path)
        if body:
            text = "\n".join(body)
            ranked.append((0 if ("Traceback" in text or "Error" in text) else 1, path, body))
    if ranked:
        _, path, body = min(ranked, key=lambda t: t[0])
    else:
        path = logs / "agent-0.log"
        body = last_attempt(path)
    return [f"[{path.name}] {line}" for line in body[-n:]]


def _telling(lines: list[str]) -> str:
    """The last line of a rank's attempt that says something: not a traceback frame,
    torchrun's banner or a blank."""
    for line in reversed(lines):
        text = line.strip()
        if (
            text
            and not text.startswith(("File ", "^", "~", "===", "---", "WARNING:", "I0000"))
            and not line.startswith(" ")
        ):
            return text[:300]
    return ""


def failure_record(logs: Path) -> dict:
    """What `status`, its `--json` and the API keep of a failed run (RunRecord.failure): the
    failing rank, its exit code or signal, one summary line and the lines of
    `failure_lines`."""
    lines = failure_lines(logs)
    cause = root_cause(logs)
    if cause is None:
        return dict(
            rank=None,
            exit_code=None,
            signal=None,
            summary=_telling([ln.split("] ", 1)[-1] for ln in lines]),
            lines=lines,
        )
    said = _telling(last_attempt(logs / f"rank-{cause.rank}.log"))
    sig = None
    if cause.exitcode < 0:
        try:
            sig = signal.Signals(-cause.exitcode).name
        except ValueError:
            sig = f"signal {-cause.exitcode}"
    return dict(
        rank=cause.rank,
        exit_code=cause.exitcode,
        signal=sig,
        summary=cause.describe() + (f": {said}" if said else ""),
        lines=lines,
    )


# torchrun's agent logs each failure of its worker group as it sees it, before it restarts
# the group (ERROR level, so it is in the agent's log at torchrun's default level).
_GROUP_FAILED = re.compile(
    r"^(?:[EWI](\d{4} [\d:.]+) .*)?failed \(exitcode: (-?\d+)\) "
    r"local_rank: (\d+) \(pid: (\d+)\)",
    re.M,
)


@dataclass
class AttemptFailure:
    """One attempt of the worker group that failed: the rank that failed first (torchrun's
    word), how, the telling line of its log (an exception) and the step it had reached."""

    attempt: int  # 1 for the first attempt
    rank: int | None
    exit_code: int
    said: str
    step: int | None

    def what(self) -> str:
        """`ValueError: shard 7 is truncated`, else the exit code."""
        return self.said or exit_text(self.exit_code)

    def describe(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "a worker"
        return f"{who} failed ({self.what()})"

    def same_as(self, other: AttemptFailure) -> bool:
        """The same failure again: the same rank, exit code, exception line and step."""
        return (self.rank, self.exit_code, self.said, self.step) == (
            other.rank,
            other.exit_code,
            other.said,
            other.step,
        )

    def as_dict(self) -> dict:
        return dict(
            attempt=self.attempt, rank=self.rank, exit_code=self.exit_code, said=self.said, step=self.step
        )


class GroupFailures:
    """The worker-group failures the agents' logs gain, read as they come (each poll reads
    only what was appended)."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.offsets: dict[Path, int] = {}
        self.rest: dict[Path, bytes] = {}

    def new(self) -> list[tuple[int, int, int, int]]:
        """(node, exit code, local rank, pid) of each failure logged since the last call."""
        out = []
        for path in sorted(self.logs.glob("agent-*.log")):
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets.get(path, 0))
                    data = f.read(1 << 20)
                    self.offsets[path] = f.tell()
            except OSError:
                continue
            buf = self.rest.get(path, b"") + data
            head, newline, rest = buf.rpartition(b"\n")
            if not newline:
                head, rest = b"", buf
            self.rest[path] = rest[-4096:]  # a line still being written
            node = int(path.stem.split("-")[1]) if path.stem.split("-")[1].isdigit() else 0
            for m in _GROUP_FAILED.finditer(head.decode(errors="replace")):
                out.append((m.group(1) or "", node, int(m.group(2)), int(m.group(3)), int(m.group(4))))
        # The first failure first (torchrun's lines start with their time): on several
        # nodes, the others' workers fail only because that one did.
        return [t[1:] for t in sorted(out, key=lambda t: t[0])]


def attempt_failure(
    logs: Path, attempt: int, rank: int | None, exit_code: int, step: int | None
) -> AttemptFailure:
    """What rank `rank` said when attempt `attempt` failed: the telling line of that
    attempt in its log (the bootstrap heads each attempt with `=== rank R attempt A`)."""
    said = ""
    if rank is not None:
        lines = _lines(logs / f"rank-{rank}.log")
        starts = [i for i, line in enumerate(lines) if line.startswith(f"=== rank {rank} attempt {attempt} ")]
        if starts:
            end = next(
                (i for i, line in enumerate(lines) if i > starts[-1] and line.startswith("=== rank ")),
                len(lines),
            )
            said = _telling(lines[starts[-1] + 1 : end])
    return AttemptFailure(attempt, rank, exit_code, said, step)
