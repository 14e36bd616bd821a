"""The content hash of an image's build context, which tags the image: same files, same tag.

    python -m alchemist_jobs.image_context train [--build-arg K=V]... [--tag]   # prints the hash

The files hashed are exactly those the builder sends: the repository files that
`images/Dockerfile.<image>.dockerignore` admits, plus the Dockerfile and the ignore file
themselves, plus the build arguments. The interactive image is built FROM the training
image, so its hash covers the training image's hash too. images/build tags with this hash and
infra/images.py rebuilds and pushes only when it changes. Standard library only: the build
script and the Pulumi program both import it, and the job package never imports infra.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from pathlib import Path

from alchemist_jobs import __version__

IMAGES = ("train", "interactive")
PARENT = {"interactive": "train"}  # FROM ${TRAIN_IMAGE}: the parent's content is part of ours


def read_ignore(path: Path) -> list[tuple[bool, re.Pattern[str], str]]:
    """.dockerignore rules as (exclusion, regex, cleaned pattern), in order.

    Semantics of moby/patternmatcher (v0.6.0, patternmatcher.go): lines starting with `#` are
    comments, `!` re-admits, patterns are cleaned like Go's filepath.Clean with any leading
    `/` dropped, `*` and `?` stay within one path element, `**` spans any number of them, and
    the last rule that matches a path (or any of its parent directories) decides.
    """
    rules = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exclusion = line.startswith("!")
        pattern = os.path.normpath(line.removeprefix("!").strip()).lstrip("/")
        if pattern == ".":
            continue
        rules.append((exclusion, re.compile(_regex(pattern)), pattern))
    return rules


def _regex(pattern: str) -> str:
    out, i = "^", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # `**/` also matches no directory at all
                i += 1
                out += "(.*/)?"
            else:
                out += ".*"
            continue
        out += {"*": "[^/]*", "?": "[^/]"}.get(c, re.escape(c) if c != "[" else "[")
        if c == "[":  # a character class passes through to its closing bracket
            end = pattern.index("]", i)
            out += pattern[i + 1 : end].replace("\\", "\\\\") + "]"
            i = end
        i += 1
    return out + "$"


def _excluded(rel: str, rules) -> bool:
    parents = [rel]
    while "/" in parents[-1]:
        parents.append(parents[-1].rsplit("/", 1)[0])
    matched = False
    for exclusion, regex, _ in rules:
        if any(regex.match(p) for p in parents):
            matched = not exclusion
    return matched


def _may_readmit_below(rel_dir: str, rules) -> bool:
    """Whether a `!` rule could admit something under an excluded directory (then walk it)."""
    for exclusion, _, pattern in rules:
        if exclusion:
            literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
            if literal.startswith(rel_dir + "/") or (rel_dir + "/").startswith(literal):
                return True
    return False


def context_files(root: Path, image: str) -> list[str]:
    """The repository-relative paths the builder sends for the image, sorted."""
    rules = read_ignore(root / "images" / f"Dockerfile.{image}.dockerignore")
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        keep = []
        for d in sorted(dirnames):
            rel = prefix + d
            if (Path(dirpath) / d).is_symlink():  # sent as a link, never followed
                filenames.append(d)
            elif not _excluded(rel, rules) or _may_readmit_below(rel, rules):
                keep.append(d)
        dirnames[:] = keep
        found += [prefix + f for f in filenames if not _excluded(prefix + f, rules)]
    return sorted(found)


def context_hash(root: Path, image: str, build_args: dict[str, str] | None = None) -> str:
    """sha256 over the image's context files (path, executable bit, content), its Dockerfile,
    ignore file and build arguments, and its parent image's hash."""
    if image not in IMAGES:
        raise ValueError(f"image {image!r}: accepted: {', '.join(IMAGES)}")
    root = Path(root)
    h = hashlib.sha256()
    if image in PARENT:
        h.update(b"parent\0" + context_hash(root, PARENT[image], build_args).encode())
    for rel in (f"images/Dockerfile.{image}", f"images/Dockerfile.{image}.dockerignore"):
        h.update(f"\0{rel}\0".encode() + (root / rel).read_bytes())
    for key, value in sorted((build_args or {}).items()):
        h.update(f"\0arg\0{key}={value}".encode())
    for rel in context_files(root, image):
        path = root / rel
        if path.is_symlink():
            h.update(f"\0link\0{rel}\0{os.readlink(path)}".encode())
        else:
            mode = "x" if os.access(path, os.X_OK) else "-"
            h.update(f"\0file\0{rel}\0{mode}\0".encode() + path.read_bytes())
    return h.hexdigest()


def image_tag(root: Path, image: str, build_args: dict[str, str] | None = None) -> str:
    """The tag both images/build and infra/images.py give an image: `<version>-<hash:12>`."""
    return f"{__version__}-{context_hash(root, image, build_args)[:12]}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="image_context", description=__doc__.splitlines()[0])
    p.add_argument("image", choices=IMAGES)
    p.add_argument("--root", type=Path, default=Path.cwd(), help="the repository root")
    p.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--files", action="store_true", help="list the context's files instead")
    p.add_argument("--tag", action="store_true", help="print the image tag, not the whole hash")
    args = p.parse_args(argv)
    bad = [a for a in args.build_arg if "=" not in a]
    if bad:
        p.error(f"--build-arg {bad[0]!r}: accepted: KEY=VALUE")
    if args.files:
        print("\n".join(context_files(args.root, args.image)))
    else:
        build_args = dict(a.split("=", 1) for a in args.build_arg)
        fn = image_tag if args.tag else context_hash
        print(fn(args.root, args.image, build_args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
