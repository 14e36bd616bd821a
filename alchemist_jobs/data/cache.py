"""The content-addressed dataset cache of a node: one fill per key under a lock, atomic entries, LRU eviction.

    <root>/entries/<key>/data/        a staged dataset, complete (it appeared by one rename)
    <root>/entries/<key>/entry.json   its size; the file's mtime is the entry's last use
    <root>/tmp/<key>.<pid>.<rand>/    a fill in progress (never read; removed if abandoned)
    <root>/locks/<key>.fill           held exclusively by the one process filling <key>
    <root>/locks/<key>.use            held shared by every process using <key>; eviction
                                      takes it exclusively, so an entry in use is never evicted
    <root>/index/<name>.json          a remembered key (`memo`): a local directory's content
                                      key by its files' stat identity, so it is hashed once

The key is computed by the caller from what identifies the content (a push manifest's ETag, an
object listing's keys, sizes and ETags, a local directory's SHA-256s) and the user's uid, so
every job of a user on the node that stages the same data shares one entry.

Who may share a cache: a cache this account creates is its own (0700, whatever the umask). A
cache several accounts share is a folder with the sticky bit that they may all write: a team's
group folder (`install -d -m 3770 -g TEAM DIR`) or a machine's (`install -d -m 1777 DIR`, as
/tmp); its subfolders get the same mode. A cache folder another account may change without the
sticky bit (it could rename or replace this account's entries and locks) is refused in one line.
In a shared cache a fill is private to its owner (mode 0700), and an entry is served only if it
and everything in it belong to this user (or root); one that another account planted under
this user's key is one DataError line, never data.

No lock makes staging wait without limit. Each wait polls its lock and says, every
PROGRESS_S, whom it waits for (from /proc/locks: the holder's pid and uid). A holder of
another account (or an exited one whose children still hold the file) is waited for
FOREIGN_LOCK_WAIT_S, then staging stops with one line naming the lock file, the holder and
what to do; a holder this node cannot see (another node of a shared file system) is waited for
$ALCHEMIST_DATA_LOCK_WAIT seconds (LOCK_WAIT_S by default); only a live process of this
account, filling the same data, is waited for as long as it lives. Eviction takes a lock of
its own account (`cache-<uid>.evict`): in a shared cache an account evicts only its own
entries, so no other account's eviction can hold up its fills.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from alchemist_jobs import environment as E
from alchemist_jobs.errors import JobFailed

_KEY = re.compile(r"[0-9a-f]{16,64}")
FOREIGN_LOCK_WAIT_S = 10.0  # for a lock another account (or an exited process) holds
LOCK_WAIT_S = 3600.0  # for a holder this node cannot see (ALCHEMIST_DATA_LOCK_WAIT)
PROGRESS_S = 15.0  # how often a wait says for whom it waits
_POLL_S = 0.2
_UNITS = {
    "": 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


class DataError(JobFailed):
    """A dataset could not be staged (missing, corrupt, too large for the cache): one line."""


def parse_size(text: str, where: str) -> int:
    """`50Gi`, `200G` or a byte count -> bytes."""
    m = re.fullmatch(r"\s*([0-9]+)\s*(Ki|Mi|Gi|Ti|K|M|G|T)?\s*", text or "")
    if not m:
        raise DataError(
            f"{where}: {text!r} is not a size; accepted: bytes or a number with K, M, G, T, Ki, Mi, Gi or Ti"
        )
    return int(m.group(1)) * _UNITS[m.group(2) or ""]


def tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


@dataclass
class Entry:
    """A cache entry this process uses; the shared `use` lock is held until `release()`."""

    key: str
    path: Path  # the staged dataset's directory
    filled: bool  # this call downloaded it (False: it was already cached)
    _lock_fd: int | None = field(default=None, repr=False)

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def lock_holder(fd: int) -> tuple[int, int | None] | None:
    """(pid, uid) of a process holding a flock on the file open as `fd`, from /proc/locks (the
    uid is None where the pid has exited or cannot be seen); None if no holder is listed (a
    lock taken on another node of a shared file system, or no /proc)."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK" or fields[5] != inode:
            continue  # a waiter, another kind of lock, or another file
        try:
            pid = int(fields[4])
        except ValueError:
            continue
        if pid <= 0:
            return pid, None
        try:
            return pid, os.stat(f"/proc/{pid}").st_uid
        except OSError:
            return pid, None
    return None


def _lock_wait_limit() -> float:
    try:
        value = E.DATA_LOCK_WAIT.get(default=LOCK_WAIT_S)
    except ValueError as e:
        raise DataError(f"{e}; accepted: a number of seconds greater than 0") from None
    if not value > 0:
        raise DataError(f"{E.DATA_LOCK_WAIT.name}={value!r}: accepted: a number of seconds greater than 0")
    return value


class NodeCache:
    def __init__(self, root: Path, limit_bytes: int | None = None):
        self.root = Path(root)
        self.limit = limit_bytes
        if not self.root.exists():
            self.root.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(self.root, 0o700)
                os.chmod(self.root, 0o700)  # this account's own cache, whatever the umask
            except FileExistsError:
                pass
        mode = self._check_folder(self.root)
        # A root shared by several accounts (sticky, writable by a group or by everyone) gets
        # shared subdirectories of the same kind; each entry within stays private to its filler.
        shared = mode & 0o1000 and mode & 0o022
        for sub in ("entries", "tmp", "locks", "index"):
            try:
                os.mkdir(self.root / sub, 0o700)
                os.chmod(self.root / sub, mode & 0o3777 if shared else 0o700)
            except FileExistsError:
                self._check_folder(self.root / sub)

    def _check_folder(self, path: Path) -> int:
        """The mode of a cache folder, after checking that no other account can change what
        is in it but by the sticky bit's rules (which leave this account's files alone)."""
        st = os.stat(path) if path == self.root else os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        if not stat.S_ISDIR(st.st_mode):
            raise DataError(
                f"dataset cache {path}: not a folder; accepted: a folder "
                f"({E.DATA_CACHE.name}), or data.cache: none"
            )
        me = st.st_uid == os.getuid()
        sticky_shared = bool(mode & 0o1000 and mode & 0o022)
        # Trusted: this account's own folder that no one else may write, a folder several
        # accounts share under the sticky bit, or, for an account other than root, root's as
        # its admin made it (a pod's emptyDir is root's 0777: only the pod's processes reach it).
        if not (me and not mode & 0o022 or sticky_shared or st.st_uid == 0 != os.getuid()):
            raise DataError(
                f"dataset cache {path}: mode {mode:04o}, owner uid {st.st_uid}: other accounts "
                f"could replace or remove your entries and locks there; accepted: a folder of "
                f"your own (`chmod 700 {path}`), or one several accounts share with the sticky "
                f"bit (`chmod 1777` or, for a group, `chmod 3770 {path}`), or data.cache: none"
            )
        return mode

    def _entry(self, key: str) -> Path:
        return self.root / "entries" / key

    def _lock(self, key: str, kind: str, mode: int) -> int:
        # Read-only: flock needs no write access, so a lock file another account created
        # (mode 0644 under its umask) locks all the same; never through a link.
        # Non-blocking: a FIFO planted under the name would otherwise block the open forever.
        path = self.root / "locks" / f"{key}.{kind}"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o666)
        except OSError as e:
            raise DataError(self._not_a_lock(path, f"cannot be opened ({e.strerror})")) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise DataError(self._not_a_lock(path, "is not a regular file"))
            self._wait_for(fd, path, mode)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def _not_a_lock(path: Path, what: str) -> str:
        try:
            st = os.lstat(path)
            owner = f", uid {st.st_uid}'s {'link' if stat.S_ISLNK(st.st_mode) else 'file'}"
        except OSError:
            owner = ""
        return (
            f"dataset cache lock {path}{owner}, {what}; accepted: a regular lock file: ask its "
            f"owner to remove it, or stage elsewhere ({E.DATA_CACHE.name}=another folder, or "
            "data.cache: none)"
        )

    def _wait_for(self, fd: int, path: Path, mode: int) -> None:
        """flock(fd, mode), waiting as long as the module docstring says, and no longer."""
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if mode & fcntl.LOCK_NB:
                raise
        limit = _lock_wait_limit()
        start = time.monotonic()
        said = start - PROGRESS_S
        me = os.getuid()
        while True:
            time.sleep(_POLL_S)
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            held = lock_holder(fd)
            waited = time.monotonic() - start
            if held is None:
                who, allowed = "a process this node cannot see (on another node?)", limit
            elif held[1] == me:
                who, allowed = f"pid {held[0]} (yours)", float("inf")
            elif held[1] is None:  # /proc/locks names an exited locker as pid 0
                who = (
                    f"pid {held[0]}, " if held[0] > 0 else "a process "
                ) + "which has exited (a process it started holds the file open)"
                allowed = FOREIGN_LOCK_WAIT_S
            else:
                who, allowed = f"pid {held[0]} of uid {held[1]}, another account", FOREIGN_LOCK_WAIT_S
            if waited >= allowed:
                raise DataError(
                    f"dataset cache lock {path} is held by {who}; waited {waited:.0f} s; "
                    f"accepted: ask its owner to stop it (or stop it), remove {path} if no one "
                    f"uses it, or stage elsewhere ({E.DATA_CACHE.name}=another folder, or "
                    "data.cache: none)"
                )
            if time.monotonic() - said >= PROGRESS_S:
                said = time.monotonic()
                bound = "" if allowed == float("inf") else f" (at most {allowed:.0f} s)"
                print(
                    f"waiting for the dataset cache lock {path}: held by {who}; {waited:.0f} s so far{bound}",
                    file=sys.stderr,
                    flush=True,
                )

    def acquire(self, key: str, fill: Callable[[Path], None], size_hint: int = 0) -> Entry:
        """The entry for `key`, calling `fill(directory)` first if no process on this node has.

        Concurrent callers with one key wait for the one filler, then share its entry. A fill
        that raises leaves nothing behind, and the next caller tries again.
        """
        if not _KEY.fullmatch(key):
            raise ValueError(f"cache key {key!r} is not a hex digest")
        filled = False
        while True:
            entry = self._entry(key)
            if entry.is_dir():
                fd = self._lock(key, "use", fcntl.LOCK_SH)
                if entry.is_dir():  # not evicted between the check and the lock
                    try:
                        self._check_owner(key, entry)
                    except BaseException:
                        os.close(fd)
                        raise
                    os.utime(entry / "entry.json")
                    return Entry(key, entry / "data", filled, fd)
                os.close(fd)
                continue
            fd = self._lock(key, "fill", fcntl.LOCK_EX)
            try:
                if not entry.is_dir():
                    self._fill(key, fill, size_hint)
                    filled = True
            finally:
                os.close(fd)

    def memo(self, name: str, compute: Callable[[], str]) -> str:
        """A value remembered under `name` (a hex key), computed by one process while the
        others with that name wait. A remembered value is used only if this user owns its
        file and no one else can write it; one another account wrote is computed again."""
        if not _KEY.fullmatch(name):
            raise ValueError(f"memo name {name!r} is not a hex digest")
        path = self.root / "index" / f"{name}.json"
        fd = self._lock(name, "index", fcntl.LOCK_EX)
        try:
            try:
                st = os.lstat(path)
                if st.st_uid == os.getuid() and stat.S_ISREG(st.st_mode) and not st.st_mode & 0o022:
                    return str(json.loads(path.read_text())["value"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
            value = compute()
            tmp = path.with_name(f"{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            try:
                with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                    f.write(json.dumps({"value": value}))
                os.replace(tmp, path)
            except OSError:  # another account's file in a sticky directory: not remembered
                tmp.unlink(missing_ok=True)
            return value
        finally:
            os.close(fd)

    def _check_owner(self, key: str, entry: Path) -> None:
        """Serve an entry only if this user (or root) owns it and no other account can change
        it: what another account wrote under this user's key is not this user's data. A fill
        is created private (0700), so nothing below a checked entry is another's to change."""
        me = os.getuid()
        for path in (entry, entry / "data", entry / "entry.json"):
            st = os.lstat(path)
            foreign = st.st_uid not in (me, 0) or stat.S_ISLNK(st.st_mode)
            if foreign or path == entry and st.st_mode & 0o022:
                raise DataError(
                    f"dataset cache {self.root}: entry {key[:16]} ({path.name}) belongs to uid "
                    f"{st.st_uid} with mode {stat.S_IMODE(st.st_mode):04o}, not to you (uid {me}) "
                    f"alone: not served; accepted: remove {entry}, or data.cache: none"
                )

    def _fill(self, key: str, fill: Callable[[Path], None], size_hint: int) -> None:
        # Holding the fill lock: a tmp dir of this key is an abandoned fill (a killed process).
        for stale in (self.root / "tmp").glob(f"{key}.*"):
            shutil.rmtree(stale, ignore_errors=True)
        if size_hint:
            self.reserve(size_hint)
        tmp = self.root / "tmp" / f"{key}.{os.getpid()}.{secrets.token_hex(4)}"
        tmp.mkdir(mode=0o700)  # private: another account neither reads nor changes a fill
        (tmp / "data").mkdir(mode=0o700)
        try:
            fill(tmp / "data")
            size = tree_size(tmp / "data")
            (tmp / "entry.json").write_text(json.dumps({"key": key, "bytes": size}))
            os.rename(tmp, self._entry(key))  # the entry appears whole, or not at all
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def reserve(self, incoming: int) -> None:
        """Make room for a fill of `incoming` bytes (a fill that learns its size late calls this)."""
        if self.limit is not None and incoming > self.limit:
            raise DataError(
                f"dataset of {incoming} bytes exceeds the node cache limit of "
                f"{self.limit} bytes ({E.DATA_CACHE_LIMIT.name}); accepted: a larger "
                "limit, or data.cache: none"
            )
        self.make_room(incoming)

    def entries(self) -> list[tuple[str, int, float]]:
        """(key, bytes, last use) of every complete entry, least recently used first."""
        out = []
        for entry in (self.root / "entries").iterdir():
            try:
                meta = entry / "entry.json"
                out.append((entry.name, json.loads(meta.read_text())["bytes"], meta.stat().st_mtime))
            except (OSError, ValueError, KeyError):
                continue  # being evicted right now
        return sorted(out, key=lambda e: e[2])

    def make_room(self, incoming: int) -> list[str]:
        """Evict least recently used entries nobody uses until `incoming` more bytes fit."""
        if self.limit is None:
            return []
        evicted: list[str] = []
        # One evicter at a time per account: in a shared cache an account evicts only its own
        # entries, and another account's eviction must not hold up this one's fills.
        guard = self._lock(f"cache-{os.getuid()}", "evict", fcntl.LOCK_EX)
        try:
            entries = self.entries()
            total = sum(size for _, size, _ in entries)
            for key, size, _ in entries:
                if total + incoming <= self.limit:
                    break
                try:
                    fd = self._lock(key, "use", fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a job is reading it
                try:
                    trash = self.root / "tmp" / f"evict-{key}.{secrets.token_hex(4)}"
                    try:
                        os.rename(self._entry(key), trash)  # gone for readers in one step
                    except PermissionError:
                        continue  # another account's entry in a shared (sticky) cache
                    shutil.rmtree(trash, ignore_errors=True)
                    total -= size
                    evicted.append(key)
                finally:
                    os.close(fd)
        finally:
            os.close(guard)
        return evicted
