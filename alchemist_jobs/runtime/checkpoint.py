"""Atomic checkpoints on the shared file system: temporary file, fsync, rename, keep K.

A reader only ever sees complete files named `step-<S>.pt`; a writer killed mid-write
leaves a `.step-<S>.pt.<pid>.tmp` that the next writer or reader removes. `latest()` returns
the newest checkpoint that loads, falling back to older ones if the newest cannot be read.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

# Prefixes: `step` (collective), `rank<N>` (one per async worker), `server<K>` (PS shards).
_NAME = re.compile(r"^(?P<prefix>[a-z][a-z0-9]*)-(?P<step>\d{9})\.pt$")


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

    def remove_partial(self) -> int:
        """Delete temporary files left by writers that died mid-write (not our own)."""
        removed = 0
        mine = f".{os.getpid()}.tmp"
        for p in self.dir.glob(f".{self.prefix}-*.tmp"):
            if not p.name.endswith(mine):
                p.unlink(missing_ok=True)
                removed += 1
        return removed

    def save(self, step: int, payload: dict[str, Any]) -> tuple[Path, int, float]:
        """Write one checkpoint atomically; returns (path, bytes, seconds)."""
        import torch

        t0 = time.perf_counter()
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.path_for(step)
        tmp = self.dir / f".{final.name}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                torch.save(payload, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)  # atomic on POSIX: the name appears only when complete
            _fsync_dir(self.dir)  # make the rename itself durable
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        size = final.stat().st_size
        self._prune()
        return final, size, time.perf_counter() - t0

    def _prune(self) -> None:
        for _step, p in self.complete()[self.keep:]:
            p.unlink(missing_ok=True)
        self.remove_partial()

    def latest(self) -> tuple[int, dict[str, Any]] | None:
        """(step, payload) of the newest checkpoint that loads, or None."""
        import torch

        for step, p in self.complete():
            try:
                return step, torch.load(p, map_location="cpu", weights_only=True)
            except Exception as e:  # unreadable (e.g. damaged disk): fall back to an older one
                print(f"alchemist: checkpoint {p} unreadable ({e!r}); trying an older one",
                      file=sys.stderr)
        return None
