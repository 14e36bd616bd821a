"""The user's defaults file: the usual stack and flags, so they need not be typed each time.

    # ~/.config/alchemist/defaults.yaml  (or the file $ALCHEMIST_DEFAULTS names)
    stack: dev                        # --stack
    outputs: ~/dev-outputs.json       # --outputs
    home: /data/alchemist             # --home (local stack)
    quiet: true                       # --quiet on run and submit

A flag on the command line always wins. A missing file means no defaults; a bad one is
one line naming the file, the key and what is accepted.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from alchemist_jobs import environment as E
from alchemist_jobs.errors import UserError, shown

KEYS = {"stack": str, "outputs": str, "home": str, "quiet": bool}


def path() -> Path:
    env = E.DEFAULTS.get()
    if env:
        return env
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "alchemist" / "defaults.yaml"


@functools.lru_cache(maxsize=4)
def _load(file: Path) -> dict[str, Any]:
    if not file.exists():
        return {}
    from alchemist_jobs.input_files import load_yaml, read_text  # YAML: only when there is one

    data = load_yaml(read_text(file, "defaults"), str(file)) or {}
    if not isinstance(data, dict):
        raise UserError(f"{file}: accepted: a mapping of {', '.join(KEYS)}")
    for key, value in data.items():
        if key not in KEYS:
            raise UserError(f"{file}: {shown(key)} is not a default; accepted: {', '.join(KEYS)}")
        if not isinstance(value, KEYS[key]):
            raise UserError(f"{file}: {key}: {shown(value)} is invalid; accepted: a {KEYS[key].__name__}")
    return {k: (Path(v).expanduser() if k in ("outputs", "home") else v) for k, v in data.items()}


def get(key: str, fallback: Any = None) -> Any:
    return _load(path()).get(key, fallback)
