"""Atomic checkpoints on the shared file system: temporary file, fsync, rename, keep K.

A reader only ever sees complete files named `step-<S>.pt`; a writer killed mid-write
leaves a `.step-<S>.pt.<pid>.tmp` that the next writer or reader removes. Beside each one,
`step-<S>.pt.sha256` holds the sha256 of its bytes, computed while writing and in place
before the checkpoint's name appears. `latest()` returns the newest checkpoint whose bytes
match their checksum and that loads, falling back to older ones with one line otherwise:
damage inside tensor data loads without error and would silently train on garbage.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

# Prefixes: `step` (collective), `rank<N>` (one per async worker), `server<K>` (PS shards).
_NAME = re.compile(r"^(?P<prefix>[a-z][a-z0-9]*)-(?P<step>\d{9})\.pt$")
_SUM = ".sha256"


class _HashingWriter:
    """A file that hashes what is written through it (torch.save writes sequentially)."""

    def __init__(self, f: Any):
        self.f, self.sha = f, hashlib.sha256()

    def write(self, b: Any) -> int:
        self.sha.update(b)
        return self.f.write(b)

    def flush(self) -> None:
        self.f.flush()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Checkpointer:
    def __init__(self, directory: Path, keep: int = 3, prefix: str = "step"):
        self.dir = Path(directory)
        self.keep = keep
        self.prefix = prefix

    def path_for(self, step: int) -> Path:
        return self.dir / f"{self.prefix}-{step:09d}.pt"

    def complete(self) -> list[tuple[int, Path]]:
        """Complete checkpoints of this prefix, newest first."""
        if not self.dir.exists():
            return []
        found = []
        for p in self.dir.iterdir():
            m = _NAME.match(p.name)
            if m and m["prefix"] == self.prefix:
                found.append((int(m["step"]), p))
        return sorted(found, reverse=True)

    def sum_path(self, ckpt: Path) -> Path:
        return ckpt.with_name(ckpt.name + _SUM)

    def remove_partial(self) -> int:
        """Delete temporary files left by writers that died mid-write (not our own), and
        checksums whose checkpoint never appeared or was pruned."""
        removed = 0
        mine = f".{os.getpid()}.tmp"
        for p in self.dir.glob(f".{self.prefix}-*.tmp"):
            if not p.name.endswith(mine):
                p.unlink(missing_ok=True)
                removed += 1
        for p in self.dir.glob(f"{self.prefix}-*.pt{_SUM}"):
            if not p.with_name(p.name[: -len(_SUM)]).exists():
                p.unlink(missing_ok=True)
        return removed

    def save(self, step: int, payload: dict[str, Any]) -> tuple[Path, int, float]:
        """Write one checkpoint atomically; returns (path, bytes, seconds)."""
        import torch

        t0 = time.perf_counter()
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.path_for(step)
        tmp = self.dir / f".{final.name}.{os.getpid()}.tmp"
        tmp_sum = self.dir / f".{final.name}{_SUM}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                w = _HashingWriter(f)
                # torch.save writes through any object with write() and flush(); its stub
                # asks for IO[bytes]
                torch.save(payload, w)  # type: ignore[arg-type]
                f.flush()
                os.fsync(f.fileno())
            tmp_sum.write_text(w.sha.hexdigest() + "\n")
            os.replace(tmp_sum, self.sum_path(final))  # the checksum first: never a sum-less name
            os.replace(tmp, final)  # atomic on POSIX: the name appears only when complete
            _fsync_dir(self.dir)  # make the renames themselves durable
        except BaseException:
            tmp.unlink(missing_ok=True)
            tmp_sum.unlink(missing_ok=True)
            raise
        size = final.stat().st_size
        self._prune()
        return final, size, time.perf_counter() - t0

    def _prune(self) -> None:
        for _step, p in self.complete()[self.keep :]:
            p.unlink(missing_ok=True)
            self.sum_path(p).unlink(missing_ok=True)
        self.remove_partial()

    def latest(self) -> tuple[int, dict[str, Any]] | None:
        """(step, payload) of the newest checkpoint that loads, or None."""
        import torch

        for step, p in self.complete():
            problem = self._verify(p)
            if problem is None:
                try:
                    return step, torch.load(p, map_location="cpu", weights_only=True)
                except Exception as e:  # unreadable (e.g. damaged disk)
                    problem = f"unreadable ({type(e).__name__})"
            print(
                f"alchemist: checkpoint {p} {problem}; falling back to an older one",
                file=sys.stderr,
                flush=True,
            )
        return None

    def _verify(self, p: Path) -> str | None:
        """None when the file's bytes match its checksum, else what is wrong."""
        try:
            expected = self.sum_path(p).read_text().strip()
        except FileNotFoundError:
            return "has no checksum file"
        try:
            actual = file_sha256(p)
        except OSError as e:
            return f"unreadable ({e.strerror})"
        if actual != expected:
            return "fails its checksum (damaged after writing)"
        return None
