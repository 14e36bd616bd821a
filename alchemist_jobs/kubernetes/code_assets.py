"""Code assets: the spec's directory packed (honouring .gitignore and .alchemistignore),
content-hashed, and shipped so that pods run exactly the code a job was submitted with.

The CLI packs the directory into a deterministic gzip'd tar (sorted entries, zeroed times and
owners), names the snapshot by a hash of the files' paths, modes and contents, and ships the
tarball in the job's ConfigMap; the pod's init container (`pod_setup`) unpacks it once to
`<shared root>/code/<hash>/`, which is then the workers' working directory. The same
directory gives the same hash (and is unpacked only once); any change gives a new snapshot.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import sys
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alchemist_jobs import secret_scan
from alchemist_jobs.errors import UserError
from alchemist_jobs.rundir import default_root

IGNORE_FILES = (".gitignore", ".alchemistignore")  # read in every directory, in this order
# Never shipped, whatever the ignore files say: VCS internals and bytecode of this machine,
# and files that look like credentials (the snapshot is readable by every pod of the run and
# sits on the shared file system). Files are also scanned for secrets by content
# (secret_scan.py); the names below are those whose content a scanner cannot judge (password
# hashes, raw tokens of no known format, key stores) or that hold secrets by convention.
# `ship_secrets` in the job spec releases a file from both, knowingly.
ALWAYS_IGNORED = (".git/", "__pycache__/", "*.py[cod]")
SECRET_LOOKING = (
    ".env",
    ".env.*",
    "*.env",
    "*.env.*",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".pypirc",
    ".htpasswd",
    ".htdigest",
    "token",
    "token.txt",
    "*.token",
    "*.tfstate",
    "*.tfstate.*",
    "*.kdbx",
    ".npmrc",
    ".git-credentials",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.keystore",
    "*.jks",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".aws/",
    ".ssh/",
    ".gnupg/",
    ".kube/",
    ".docker/",
    ".azure/",
    ".config/gcloud/",
    "credentials",
    "credentials.*",
    "*credentials*.json",
    "kubeconfig",
    "*.kubeconfig",
    "secrets/",
    "*.secret",
    "*.secrets",
)
# The tarball travels in a ConfigMap, whose data may not exceed 1 MiB; leave room for the spec.
MAX_TARBALL_BYTES = 900 * 1024
HASH_CHARS = 16
CODE_DIR = "code"  # under the shared file system root


@dataclass(frozen=True)
class CodeSnapshot:
    root: Path
    files: tuple[str, ...]  # POSIX paths relative to root, sorted
    digest: str  # HASH_CHARS hex characters of the content hash
    tarball: bytes

    def path_under(self, shared_root: str) -> str:
        """Where the snapshot lies on the shared file system."""
        return f"{shared_root.rstrip('/')}/{CODE_DIR}/{self.digest}"


def _ignore_spec(directory: Path):
    import pathspec  # only the packing side needs it, not pod_setup

    lines: list[str] = []
    for name in IGNORE_FILES:
        try:
            lines += (directory / name).read_text(errors="replace").splitlines()
        except OSError:
            pass
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


def _enclosing_specs(root: Path) -> list[tuple[str, Any]]:
    """(path of root relative to the directory, its ignore spec) for each directory from
    root's parent up to the enclosing git repository's top (nearest first), plus that
    repository's .git/info/exclude: git applies them all to files below root."""
    top = next((d for d in (root, *root.parents) if (d / ".git").exists()), None)
    if top is None or top == root:
        return _info_exclude(top, root) if top else []
    out: list[tuple[str, object]] = []
    for d in root.parents:
        spec = _ignore_spec(d)
        if spec is not None:
            out.append((root.relative_to(d).as_posix() + "/", spec))
        if d == top:
            break
    return out + _info_exclude(top, root)


def _info_exclude(top: Path, root: Path) -> list[tuple[str, object]]:
    import pathspec

    try:
        lines = (top / ".git" / "info" / "exclude").read_text(errors="replace").splitlines()
    except OSError:
        return []
    rel = root.relative_to(top).as_posix()
    return [("" if rel == "." else rel + "/", pathspec.GitIgnoreSpec.from_lines(lines))]


def list_files(
    root: Path,
    skip: Iterable[Path] = (),
    ship_secrets: Iterable[str] = (),
    withheld: dict[str, str] | None = None,
) -> list[str]:
    """Files under root that are shipped, as sorted POSIX paths relative to root.

    Ignore files apply as git applies them: a pattern is relative to the directory of the file
    that holds it, a deeper file overrides a shallower one, the last matching line wins, and
    nothing is re-included below an ignored directory. Symbolic links are not shipped. The
    directories in `skip` (the local stack's home, with its runs and data) are never entered.
    A secret-looking name is left out unless `ship_secrets` (gitignore patterns) matches it;
    each one left out is recorded in `withheld` (path -> why), if given.
    """
    import pathspec

    root = Path(root).resolve()
    skipped = {Path(d).expanduser().resolve() for d in skip}
    vcs = pathspec.GitIgnoreSpec.from_lines(ALWAYS_IGNORED)
    secret_names = pathspec.GitIgnoreSpec.from_lines(SECRET_LOOKING)
    released = pathspec.GitIgnoreSpec.from_lines(list(ship_secrets))
    specs: dict[str, Any] = {}  # directory (relative, "" for root) -> its spec or None
    enclosing = _enclosing_specs(root)

    def at_any_depth(spec: Any, rel: str, is_dir: bool) -> bool:
        parts, tail = rel.split("/"), "/" if is_dir else ""
        return any(spec.match_file("/".join(parts[i:]) + tail) for i in range(len(parts)))

    def secret_looking(rel: str, is_dir: bool) -> bool:
        if not at_any_depth(secret_names, rel, is_dir):
            return False
        if released.match_file(rel + ("/" if is_dir else "")):
            return False
        if withheld is not None:
            withheld[rel + ("/" if is_dir else "")] = "its name is that of a credentials file"
        return True

    def ignored(rel: str, is_dir: bool) -> bool:
        if at_any_depth(vcs, rel, is_dir):
            return True
        parts = rel.split("/")
        # Deepest directory first: its ignore file overrides the ones above it.
        for depth in range(len(parts) - 1, -1, -1):
            base = "/".join(parts[:depth])
            spec = specs.get(base)
            if spec is None:
                continue
            sub = "/".join(parts[depth:]) + ("/" if is_dir else "")
            result = spec.check_file(sub)
            if result.include is not None:
                return bool(result.include)
        # Then the ignore files of the enclosing git repository, above the spec's directory.
        for prefix, spec in enclosing:
            result = spec.check_file(prefix + rel + ("/" if is_dir else ""))
            if result.include is not None:
                return bool(result.include)
        return False

    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        specs[rel_dir] = _ignore_spec(here)
        keep = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            if (
                not (here / d).is_symlink()
                and not ignored(rel, True)
                and (here / d) not in skipped
                and not secret_looking(rel, True)
            ):
                keep.append(d)
        dirnames[:] = keep  # prune: git never looks inside an ignored directory
        for f in sorted(filenames):
            rel = f"{rel_dir}/{f}" if rel_dir else f
            p = here / f
            if p.is_symlink() or not p.is_file() or ignored(rel, False) or secret_looking(rel, False):
                continue
            out.append(rel)
    return sorted(out)


def shipped_files(
    root: Path,
    skip: Iterable[Path] = (),
    ship_secrets: Iterable[str] = (),
    source: str = "task",
    leave_out: Iterable[Path] = (),
) -> list[str]:
    """list_files less what secret_scan.py holds back by content (secrets, archives) and the files
    `leave_out` names (secret_env files: never shipped, wherever they lie); each file held back
    for its name or content is one warning line on stderr, naming it and the override."""
    import pathspec

    root = Path(root).resolve()
    ship_secrets = list(ship_secrets)
    withheld: dict[str, str] = {}
    gone = {Path(p).resolve() for p in leave_out}
    files = [f for f in list_files(root, skip, ship_secrets, withheld) if (root / f).resolve() not in gone]
    withheld = {f: why for f, why in withheld.items() if (root / f).resolve() not in gone}
    released = pathspec.GitIgnoreSpec.from_lines(ship_secrets)
    flagged = secret_scan.flagged_files(Path(root), [f for f in files if not released.match_file(f)])
    withheld.update(flagged)  # each with why: what it holds, or that it is an archive
    for rel, why in sorted(withheld.items()):
        print(
            f"warning: {source}: {rel} is not shipped with the code: {why}; accepted: move "
            f"the secret to secret_env, or list {rel!r} in ship_secrets to ship it knowingly",
            file=sys.stderr,
        )
    return [f for f in files if f not in flagged]


def _executable(mode: int) -> bool:
    return bool(mode & stat.S_IXUSR)


def content_hash(root: Path, files: list[str] | tuple[str, ...]) -> str:
    """A hash of each file's path, executable bit and content, in path order."""
    h = hashlib.sha256()
    for rel in sorted(files):
        p = Path(root) / rel
        data = p.read_bytes()
        h.update(rel.encode() + b"\0" + (b"x" if _executable(p.stat().st_mode) else b"-"))
        h.update(hashlib.sha256(data).digest())
    return h.hexdigest()[:HASH_CHARS]


def tree_hash(directory: Path) -> str:
    """The content hash of every regular file under a directory (an unpacked snapshot)."""
    directory = Path(directory)
    files = [
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() and not p.is_symlink()
    ]
    return content_hash(directory, files)


def _tarball(root: Path, files: list[str]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            p = root / rel
            data = p.read_bytes()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mode = 0o755 if _executable(p.stat().st_mode) else 0o644
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            tar.addfile(info, io.BytesIO(data))
    # mtime=0 and no file name in the gzip header: the same files give the same bytes.
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def pack(root: Path, source: str = "task", ship_secrets: Iterable[str] = ()) -> CodeSnapshot:
    """Pack a directory for shipping; one UserError line if it is too large for a ConfigMap."""
    root = Path(root).resolve()
    files = shipped_files(root, [default_root()], ship_secrets, source)
    tarball = _tarball(root, files)
    if len(tarball) > MAX_TARBALL_BYTES:
        biggest = sorted(files, key=lambda f: (root / f).stat().st_size, reverse=True)[:3]
        sizes = ", ".join(f"{f} ({(root / f).stat().st_size / 2**20:.1f} MiB)" for f in biggest)
        raise UserError(
            f"{source}: code directory {root} packs to {len(tarball) / 2**20:.1f} MiB "
            f"compressed (largest: {sizes}); accepted: at most {MAX_TARBALL_BYTES // 1024} KiB; "
            "list data and outputs in .alchemistignore (data belongs on the shared file system)"
        )
    return CodeSnapshot(root=root, files=tuple(files), digest=content_hash(root, files), tarball=tarball)
