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

A cache several accounts share (a sticky, world-writable root, as /tmp) is safe to share: a fill
is private to its owner (mode 0700), and an entry is served only if it and everything in it
belong to this user (or root); one that another account planted under this user's key is one
DataError line, never data.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from alchemist_jobs import environment as E

from alchemist_jobs.errors import JobFailed

_KEY = re.compile(r"[0-9a-f]{16,64}")
_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


class DataError(JobFailed):
    """A dataset could not be staged (missing, corrupt, too large for the cache): one line."""


def parse_size(text: str, where: str) -> int:
    """`50Gi`, `200G` or a byte count -> bytes."""
    m = re.fullmatch(r"\s*([0-9]+)\s*(Ki|Mi|Gi|Ti|K|M|G|T)?\s*", text or "")
    if not m:
        raise DataError(f"{where}: {text!r} is not a size; accepted: bytes or a number with "
                        "K, M, G, T, Ki, Mi, Gi or Ti")
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


class NodeCache:
    def __init__(self, root: Path, limit_bytes: int | None = None):
        self.root = Path(root)
        self.limit = limit_bytes
        self.root.mkdir(parents=True, exist_ok=True)
        # A root shared by several accounts (sticky and world-writable, as /tmp) gets shared
        # subdirectories of the same kind; each entry within stays private to its filler.
        shared = self.root.stat().st_mode & 0o1002 == 0o1002
        for sub in ("entries", "tmp", "locks", "index"):
            try:
                (self.root / sub).mkdir()
                if shared:
                    (self.root / sub).chmod(0o1777)
            except FileExistsError:
                pass

    def _entry(self, key: str) -> Path:
        return self.root / "entries" / key

    def _lock(self, key: str, kind: str, mode: int) -> int:
        # Read-only: flock needs no write access, so a lock file another account created
        # (mode 0644 under its umask) locks all the same.
        fd = os.open(self.root / "locks" / f"{key}.{kind}", os.O_RDONLY | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, mode)
        except BaseException:
            os.close(fd)
            raise
        return fd

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
                    f"alone: not served; accepted: remove {entry}, or data.cache: none")

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
            raise DataError(f"dataset of {incoming} bytes exceeds the node cache limit of "
                            f"{self.limit} bytes ({E.DATA_CACHE_LIMIT.name}); accepted: a larger "
                            "limit, or data.cache: none")
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
        guard = self._lock("cache", "evict", fcntl.LOCK_EX)  # one evicter at a time
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
