"""Reading files a user hands the CLI (job specs, stack outputs) without trusting them:
regular files only, size-capped, UTF-8, bounded nesting and alias expansion, no
duplicate keys. Every problem is one UserError line naming the file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from alchemist_jobs.errors import UserError

MAX_BYTES = 1 << 20  # a job spec or an outputs file is a few KiB
MAX_DEPTH = 64
MAX_NODES = 100_000  # after alias expansion: a "billion laughs" file stops here


def read_text(path: Path, what: str, source: str | None = None) -> str:
    """The UTF-8 text of a regular file of at most MAX_BYTES; never blocks on a FIFO and
    never reads /dev/zero to the end. Errors start with `source` (default: the path)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UserError(f"{source}: no such file" if source else f"{path}: no such {what} file") from None
    except OSError as e:
        raise UserError(f"{source or path}: cannot read the {what} ({e.strerror})") from None
    where = source or str(path)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before open(): it refuses a directory itself
        os.close(fd)
        raise UserError(f"{where}: not a regular file; accepted: a {what} file")
    with open(fd, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise UserError(f"{where}: larger than {MAX_BYTES >> 10} KiB; accepted: a {what} file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{where}: byte {e.start} is not UTF-8; accepted: a UTF-8 text file") from None


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and deep nesting."""

    def compose_node(self, parent, index):
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _Refused(f"line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key: the base class says so
            if duplicate:
                raise _Refused(
                    f"line {key_node.start_mark.line + 1}: key {_cut(key)} appears "
                    "twice; accepted: each key once"
                )
        return super().construct_mapping(node, deep=deep)


class _Refused(Exception):
    pass


def _cut(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML (or JSON) text from `source`; UserError on anything unreasonable."""
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except _Refused as e:
        raise UserError(f"{source}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
        problem = _cut(getattr(e, "problem", None) or "not valid YAML", 80).strip("'\"")
        raise UserError(f"{source}:{where} {problem}; accepted: a YAML mapping") from None
    except RecursionError:
        raise UserError(f"{source}: nested too deeply; accepted: at most {MAX_DEPTH} levels") from None
    check_size(data, source)
    return data


def load_json(text: str, source: str) -> Any:
    try:
        data = json.loads(text)
    except RecursionError:
        raise UserError(f"{source}: nested too deeply; accepted: at most {MAX_DEPTH} levels") from None
    check_size(data, source)
    return data


def check_size(data: Any, source: str) -> None:
    """Refuse data deeper than MAX_DEPTH or larger than MAX_NODES once aliases (shared
    sub-trees) are expanded, as validating or printing it would expand them."""
    sizes: dict[int, int] = {}

    def size(obj: Any, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise UserError(f"{source}: nested deeper than {MAX_DEPTH} levels")
        if not isinstance(obj, (dict, list)):
            return 1
        if id(obj) in sizes:
            return sizes[id(obj)]
        items = list(obj.keys()) + list(obj.values()) if isinstance(obj, dict) else obj
        n = 1 + sum(size(x, depth + 1) for x in items)
        if n > MAX_NODES:
            raise UserError(
                f"{source}: expands to more than {MAX_NODES} values (YAML aliases?); "
                "accepted: a job-sized file"
            )
        sizes[id(obj)] = n
        return n

    size(data, 0)
