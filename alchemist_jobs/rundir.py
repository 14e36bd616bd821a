"""The run directory on the shared file system: one per run, the same layout on every stack.

    <root>/runs/<run id>/
        spec.yaml              the resolved job spec
        run.json               launcher state: state, pids, times, exit code (local stack)
        progress.json          rank 0's latest step, loss, throughput (rewritten atomically)
        result.json            rank 0's summary at the end (loss, accuracy, wall time...)
        logs/rank-<N>.log      each worker's stdout and stderr, all attempts appended
        logs/agent-<K>.log     the torchrun agent of node K
        workers/rank-<N>.json  where each worker runs and serves its metrics
        workers/rank-<N>.heartbeat  its heartbeat: last step, CPU time (runtime/liveness.py)
        checkpoints/           step-<S>.pt, written atomically
        tensorboard/           rank 0's event files

Workers and launchers share only this module, so neither needs the other's code.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Any

from alchemist_jobs import environment as E
from alchemist_jobs.errors import UserError, shown

RUNS = "runs"


def default_root() -> Path:
    """The local stack's shared-file-system root: $ALCHEMIST_HOME, else ~/.alchemist."""
    return E.HOME.get() or Path.home() / ".alchemist"


# What `cancel`, `status` and `logs` accept: a run id or a part of one. Nothing that could
# leave the runs folder ('/', '.'), match as a pattern or break a line.
RUN_REF = re.compile(r"[a-z0-9][a-z0-9-]{0,199}")


# On cluster stacks a run id names the run's JobSet (prefixed `r-` when it starts with a
# digit) and is every pod's `alchemist.io/run` label: JobSet v0.12.0's webhook refuses a
# JobSet whose longest pod name `<jobset>-worker-0-1023-abcde` exceeds 63 characters
# (pkg/webhooks/jobset_webhook.go), so a run id has at most 63 - 6 - 10 - 4 - 2 characters.
MAX_RUN_ID = 41
_STAMP = len("-20260101-120000-0123abcd")


def new_run_id(name: str) -> str:
    """<name>-<date>-<time>-<32 random bits>, the name cut to fit MAX_RUN_ID (the run keeps
    its whole name in its spec and labels): unique in practice; the run directory and the
    JobSet are still created exclusively, so two runs can never share one."""
    stem = name[: MAX_RUN_ID - _STAMP].rstrip("-")
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"


def check_run_ref(ref: str) -> str:
    """`ref` if it can name a run, else a UserError naming it and what is accepted."""
    if RUN_REF.fullmatch(ref):
        return ref

    raise UserError(
        f"run id {shown(ref)}: accepted: a run id or a unique part of one "
        "(lowercase letters, digits and '-', at most 200 characters)"
    )


def write_private(path: Path, text: str) -> None:
    """Write a new file only its owner can read (run files hold code, data paths, logs):
    created exclusively, never through a link planted under its name."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(fd, "w") as f:
        f.write(text)


def write_json_atomic(path: Path, data: Any, fsync: bool = False, indent: int | None = 1) -> None:
    """Write JSON so a reader sees the old or the new file, never half of one."""
    write_text_atomic(
        path,
        json.dumps(data, indent=indent, default=str, separators=None if indent is not None else (",", ":")),
        fsync=fsync,
    )


def write_text_atomic(path: Path, text: str, fsync: bool = False) -> None:
    """Write a private (0600) file so a reader sees the old or the new one, never half of one.

    The temp file beside it has a name no one can guess (`.<name>.<pid>.<random>.tmp`: the
    pid lets a later listing remove a dead writer's leftovers) and is created exclusively
    without following links, so a link planted under a temp file's name is never written
    through; the rename then replaces `path` itself, never what a link there points at."""
    fd, tmp = _create_temp(path)
    try:
        with open(fd, "w") as f:
            f.write(text)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # nothing half-written is left behind
        raise


def _create_temp(path: Path) -> tuple[int, Path]:
    for _ in range(16):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temp file name for {path.name}")


TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)(?:\.[0-9a-f]{8})?\.tmp")


def remove_dead_temp_files(folder: Path, names: list[str], of: str) -> None:
    """Remove the temp files that writers of `folder/of` killed mid-write left behind (their
    pid is gone); a live writer's is left alone."""
    for name in names:
        m = TEMP_NAME.fullmatch(name)
        if m is None or m["name"] != of or _alive(int(m["pid"])):
            continue
        try:
            os.unlink(folder / name)
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return True


MAX_STATE_BYTES = 16 << 20


def read_json(path: Path, limit: int = MAX_STATE_BYTES) -> dict | None:
    """A JSON object from `path`; None if it is missing, unreadable, not an object, a link,
    or a file someone else owns (a corrupt or planted state file must not break `list` for
    every other run, nor speak for one)."""
    try:
        # a FIFO must not hang `list`; a link must not lead out of the run's directory
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > limit or not trusted_owner(st):
                return None
            # read(n) would allocate n bytes first: reading a 300-byte state file with the
            # 16 MiB cap as `n` made every listing of many runs mostly memory allocation.
            data = json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def trusted_owner(st: os.stat_result) -> bool:
    """Whether a file is this account's own (or root's, who could write it anyway)."""
    return st.st_uid in (os.geteuid(), 0)


class RunDir:
    def __init__(self, path: Path):
        self.path = Path(path)
        # What this process last wrote to run.json: the launcher's own word on the outcome,
        # which it still has when `alchemist rm` removes the directory under it.
        self.written: dict = {}

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
    stores = property(lambda self: self.path / "stores")  # a local run's c10d stores (store_bind)

    def rank_log(self, rank: int) -> Path:
        return self.logs / f"rank-{rank}.log"

    def agent_log(self, node: int) -> Path:
        return self.logs / f"agent-{node}.log"

    def worker_file(self, rank: int) -> Path:
        return self.workers / f"rank-{rank}.json"

    def create(self, exclusive: bool = False) -> None:
        """Create the run directory, private to its owner like the shared root and runs
        folder above it. `exclusive`: FileExistsError if it exists (a launcher creating a
        new run); otherwise idempotent (every pod of a cluster run places it)."""
        runs = self.path.parent
        for d in (runs.parent, runs):
            if not d.exists():
                d.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path.mkdir(mode=0o700, exist_ok=not exclusive)
        for d in (self.logs, self.workers, self.checkpoints, self.tensorboard):
            d.mkdir(mode=0o700, exist_ok=not exclusive)

    def state(self) -> dict:
        return read_json(self.state_file) or {}

    def update_state(self, **changes: Any) -> dict:
        data = self.state()
        data.update(changes)
        write_json_atomic(self.state_file, data)
        self.written = data
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
    """The runs folder of a local home, once the home is checked (check_home)."""
    check_home(Path(root))
    return Path(root) / RUNS


def check_home(root: Path) -> None:
    """Refuse, in one line, a home that another account could plant runs in or move runs out
    of, or that is no folder at all.

    Every folder from `/` down to `<home>/runs` that exists must be owned by this account or
    root and be writable by no one else unless sticky (like /tmp, where no one can rename or
    delete another's entries); the home itself must be this account's (or root's and sticky)
    and `runs/` this account's, writable by it alone. A symlink on the way is followed only
    if this account or root owns it. Whatever does not exist yet is created 0700 by the run
    that needs it."""
    me = os.geteuid()
    home = Path(os.path.abspath(root))
    chain = [*reversed(home.parents), home, home / RUNS]
    for path in chain:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return  # nothing below exists: it is made private when needed
        except OSError as e:
            _refuse(root, path, e.strerror or type(e).__name__, "a folder")
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (me, 0):
                _refuse(
                    root,
                    path,
                    f"is a symlink owned by {_user(st.st_uid)}",
                    "no symlink, or one owned by you or root",
                )
            try:
                st = os.stat(path)
            except OSError as e:
                _refuse(
                    root, path, f"is a symlink that leads nowhere ({e.strerror})", "a symlink to a folder"
                )
        if not stat.S_ISDIR(st.st_mode):
            _refuse(root, path, f"is {_kind(st.st_mode)}", "a folder")
        mode = stat.S_IMODE(st.st_mode)
        others_write = mode & 0o022 and not mode & stat.S_ISVTX
        if path == home / RUNS:
            if st.st_uid != me:
                _refuse(
                    root,
                    path,
                    f"is owned by {_user(st.st_uid)} with mode {mode:04o}",
                    "a runs folder you own that no one else can write (0700)",
                )
            if mode & 0o022:
                _refuse(
                    root,
                    path,
                    f"is writable by others (mode {mode:04o})",
                    "a runs folder only you can write (chmod 700 it)",
                )
        elif (
            st.st_uid not in (me, 0)
            or others_write
            or path == home
            and st.st_uid != me
            and not mode & stat.S_ISVTX
        ):
            _refuse(
                root,
                path,
                f"is owned by {_user(st.st_uid)} with mode {mode:04o}",
                "folders owned by you or root that no one else can write (or sticky, "
                "as /tmp), the home your own",
            )


def _refuse(root: Path, path: Path, what: str, accepted: str) -> None:
    home = Path(os.path.abspath(root))
    where = f"home {root}" + ("" if home == path else f": {RUNS}/" if path == home / RUNS else f": {path}")
    raise UserError(f"{where} {what}; accepted: {accepted}")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISREG, "a file"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "no folder"


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def match_runs(root: Path, ref: str) -> list[RunDir]:
    """The runs `ref` names: the run with exactly that id, else every run whose id contains
    it (`0412` is enough when one run's id has it), oldest first. `ref` must pass
    check_run_ref. An exact id costs one directory lookup however many runs there are; a
    part of an id reads names only, then the state of the runs that match."""
    check_run_ref(ref)
    base = runs_root(root)
    if _is_run(base / ref):
        return [RunDir(base / ref)]
    try:
        names = [n for n in os.listdir(base) if ref in n]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return _oldest_first([RunDir(base / n) for n in names if _is_run(base / n)])


def _is_run(p: Path) -> bool:
    # A run is a real directory (not a link that could lead out of the runs folder).
    return (
        RUN_REF.fullmatch(p.name) is not None
        and p.is_dir()
        and not p.is_symlink()
        and (p / "spec.yaml").is_file()
    )


def all_runs(root: Path) -> list[RunDir]:
    """Every run under the root, oldest first."""
    return _oldest_first(run_dirs(root))


def run_dirs(root: Path) -> list[RunDir]:
    """Every run under the root, in no order (no run's files are read)."""
    base = runs_root(root)
    try:
        return [RunDir(p) for p in base.iterdir() if _is_run(p)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _oldest_first(runs: list[RunDir]) -> list[RunDir]:
    return sorted(runs, key=lambda r: (_created(r), r.run_id))


def _created(run: RunDir) -> float:
    created = run.state().get("created")
    return float(created) if isinstance(created, (int, float)) else 0.0
