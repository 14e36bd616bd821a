"""A local dataset directory read without leaving it: its files, each opened only as the file listed.

`alchemist data push` and the staging of a local `data.source` read a directory that other
accounts may be able to write into (a group's dataset folder, a directory under /tmp). A
symbolic link planted there could point at any file the reader can open, such as its owner's
cloud credentials. So a link is followed only while its target stays inside the directory (one
UserError line names a link that leaves it), and each file is opened by its path and then
checked to be the very file (device and inode) the listing found: a file swapped for a link, or
a directory for a link to elsewhere, between listing and reading is refused, never read.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from alchemist_jobs.errors import UserError

CHUNK = 1 << 20


@dataclass(frozen=True)
class LocalFile:
    rel: str  # POSIX path relative to the directory: the name it is pushed or staged under
    path: Path  # what is opened: the file itself, or the in-directory target of a link
    size: int
    dev: int
    ino: int
    mtime_ns: int = 0
    ctime_ns: int = 0  # set by the kernel on any change: no one but root can put it back


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def list_files(root: Path, where: str) -> list[LocalFile]:
    """Every file under `root`, sorted by name. A link whose target lies inside `root` is
    listed under the link's name (a link to a directory inside is not descended: its files
    are listed where they lie); a link that leaves `root` is one UserError line (`where`
    names the directory as the user gave it)."""
    top = Path(root).resolve()
    out: list[LocalFile] = []
    for dirpath, dirnames, filenames in os.walk(top):  # never descends into a linked directory
        here = Path(dirpath)
        for name in sorted(filenames) + sorted(d for d in dirnames if (here / d).is_symlink()):
            p = here / name
            rel = p.relative_to(top).as_posix()
            st = os.lstat(p)
            target = p
            if stat.S_ISLNK(st.st_mode):
                target = p.resolve()
                if not _inside(target, top):
                    raise UserError(
                        f"{where}: {rel} is a symbolic link to {target}, outside the "
                        "directory; accepted: files within it (copy the file in, or "
                        "remove the link)"
                    )
                try:
                    st = os.stat(target)
                except OSError:
                    continue  # a dangling link names no data
            if stat.S_ISREG(st.st_mode):
                out.append(
                    LocalFile(rel, target, st.st_size, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
                )
    return sorted(out, key=lambda f: f.rel)


def open_listed(f: LocalFile, where: str) -> BinaryIO:
    """The listed file, opened for reading; UserError if its path now leads elsewhere."""
    try:
        fd = os.open(f.path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise UserError(
            f"{where}: {f.rel}: cannot read it ({e.strerror}); accepted: a "
            "directory that does not change while it is read"
        ) from None
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (f.dev, f.ino) or not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UserError(
            f"{where}: {f.rel} was replaced while it was read (now another file, "
            "perhaps a link out of the directory); accepted: a directory that does "
            "not change while it is read"
        )
    return os.fdopen(fd, "rb")


def sha256_listed(f: LocalFile, where: str, sink: Callable[[bytes], object] | None = None) -> str:
    """The SHA-256 of a listed file's content (each chunk also given to `sink`, if any)."""
    h = hashlib.sha256()
    with open_listed(f, where) as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
            if sink is not None:
                sink(chunk)
    return h.hexdigest()
