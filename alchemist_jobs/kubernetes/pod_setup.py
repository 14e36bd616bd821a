"""The init container of every job pod: creates the run directory with `spec.yaml` and unpacks
the code snapshot onto the shared file system, idempotently (every pod runs it, any order).

    python -m alchemist_jobs.kubernetes.pod_setup --run-dir DIR --spec FILE
                                                  [--code TARBALL --code-dir DIR]

The CLI cannot reach the shared volume, so the job's ConfigMap carries the resolved spec and
the code tarball, and each pod puts them in place before its workers start. Standard library
and alchemist_jobs.rundir only: it runs before anything else in the pod.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import tarfile
from pathlib import Path

from alchemist_jobs.kubernetes.code_assets import tree_hash
from alchemist_jobs.rundir import RunDir


def write_spec(run: RunDir, spec_text: str) -> None:
    """spec.yaml, atomically; pods that come second find it in place and leave it alone."""
    run.create()
    try:
        if run.spec.read_text() == spec_text:
            return
    except FileNotFoundError:
        pass
    tmp = run.spec.with_name(f".spec.yaml.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(spec_text)
    os.replace(tmp, run.spec)


def unpack_code(tarball: Path, code_dir: Path) -> bool:
    """Unpack the snapshot to code_dir unless it is there already; True if this pod did it.

    Pods race here: each unpacks into its own temporary sibling and renames it into place;
    rename(2) of a directory onto an existing non-empty one fails, so exactly one wins and
    the snapshot is never seen half-written.
    """
    if code_dir.is_dir():
        _verify(code_dir)
        return False
    code_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = code_dir.with_name(f".{code_dir.name}.{secrets.token_hex(4)}.tmp")
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            _extract(tar, tmp)
        got = tree_hash(tmp)
        if got != code_dir.name:
            raise SystemExit(
                f"pod_setup: code snapshot hash {got} does not match its name "
                f"{code_dir.name}; the ConfigMap is corrupt"
            )
        # Shipped code is read-only, directories too: a job cannot change what the next pod
        # will run without first restoring a write bit (and then the hash check refuses it).
        for p in [*tmp.rglob("*"), tmp]:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode & 0o555)
        try:
            os.rename(tmp, code_dir)
            return True
        except OSError:
            if code_dir.is_dir():  # another pod won the race
                _verify(code_dir)
                return False
            raise
    finally:
        if tmp.exists():
            _make_writable(tmp)  # read-only directories cannot be emptied
            shutil.rmtree(tmp, ignore_errors=True)


def _extract(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack a code snapshot: no absolute paths, links out or devices. tarfile's `data`
    filter says so where the Python has it (3.11.4 and later); Debian bookworm's 3.11.2, a
    base some images are built on, lacks it, so there only plain files and directories
    inside `dest` are accepted, which is all a snapshot holds (code_assets.py)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    for m in tar.getmembers():
        parts = Path(m.name).parts
        if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in parts:
            raise SystemExit(
                f"pod_setup: code snapshot member {m.name!r} is not a plain file "
                "or directory inside the snapshot; the ConfigMap is corrupt"
            )
    tar.extractall(dest)


def _verify(code_dir: Path) -> None:
    """A snapshot already in place is used only if its content still hashes to its name."""
    got = tree_hash(code_dir)
    if got != code_dir.name:
        raise SystemExit(
            f"pod_setup: code snapshot {code_dir} hashes to {got}, not to its name "
            f"{code_dir.name}: it was changed after it was unpacked; refusing to "
            "run it (delete the directory to have it unpacked again)"
        )


def _make_writable(tmp: Path) -> None:
    for p in [tmp, *tmp.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pod_setup", description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--spec", type=Path, required=True, help="the resolved spec (from the ConfigMap)")
    p.add_argument("--code", type=Path, help="the code tarball (from the ConfigMap)")
    p.add_argument("--code-dir", type=Path, help="where the snapshot lives on the shared FS")
    args = p.parse_args(argv)
    if (args.code is None) != (args.code_dir is None):
        p.error("--code and --code-dir go together")
    try:
        write_spec(RunDir(args.run_dir), args.spec.read_text())
    except PermissionError as e:
        # A shared volume whose root is not the job identity's (a file system's root without an
        # access point, an NFS export owned by root): say which path and which uid, once.
        raise SystemExit(
            f"pod_setup: cannot write {e.filename or args.run_dir}: permission denied "
            f"for uid {os.getuid()} gid {os.getgid()}; the shared volume must be "
            "writable by the job's uid (an access point or an export owned by it)"
        ) from None
    print(f"pod_setup: run directory {args.run_dir} ready", flush=True)
    if args.code is not None:
        did = unpack_code(args.code, args.code_dir)
        print(
            f"pod_setup: code snapshot {args.code_dir} {'unpacked' if did else 'already in place'}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
