"""requirements.lock: every pin exact and hashed, and every direct dependency locked. (Its
sections, through scripts/lock-sections, are integration tests.)"""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements.lock"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(text: str) -> dict[str, list[str]]:
    """name -> hashes, from requirements text with backslash continuations."""
    out: dict[str, list[str]] = {}
    for entry in re.sub(r"\\\n\s*", " ", text).splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)(.*)$", entry)
        if m:
            out[_norm(m.group(1))] = re.findall(r"--hash=sha256:([0-9a-f]{64})", m.group(3))
    return out


def test_every_pin_is_exact_and_hashed():
    text = LOCK.read_text()
    pins = _pins(text)
    assert pins and all(pins.values()), [n for n, h in pins.items() if not h]
    # nothing but comments, pins and their hash lines
    for line in text.splitlines():
        assert (
            line.startswith("#")
            or re.match(r"^[A-Za-z0-9_.-]+==\S+ \\$", line)
            or re.match(r"^    --hash=sha256:[0-9a-f]{64}( \\)?$", line)
        ), line


def test_every_direct_dependency_is_locked():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    direct = list(project["dependencies"]) + [
        d for ds in project["optional-dependencies"].values() for d in ds
    ]
    locked = set(_pins(LOCK.read_text()))
    missing = [d for d in direct if _norm(re.split(r"[<>=!~\[; ]", d)[0]) not in locked]
    assert not missing, missing
