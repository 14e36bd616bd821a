"""What `alchemist stack` asks of a checkout's infra/, over JSON: the job package runs this
as `python -m infra.stack_tools COMMAND` in the checkout and never imports infra itself.

    check   stdin {"config": {key: value}, "left_out": [key], "where": str}
            stdout {"error": str | null, "later": [secret keys left out, to set later]}
    diff    stdin {"a": render, "b": render}   (renders from `python -m infra.render`)
            stdout {"differences": [line], "allowed": [[reason, line]], "a": name, "b": name}
"""

from __future__ import annotations

import json
import sys
from typing import Any

from infra.stack_diff import compare


def check(req: dict[str, Any]) -> dict[str, Any]:
    from infra.config import SECRET_KEYS, StackConfigError, parse, pulumi_value

    config, left_out = req["config"], req.get("left_out", [])
    # Secrets left out are checked as if set, so the rest of the replica is validated now.
    later = [k for k in left_out if k.split(":", 1)[1] in SECRET_KEYS]
    raw = {k: pulumi_value(v) for k, v in config.items()}
    raw.update({k: "set-later" for k in later})
    try:
        parse(raw, set(later), where=req.get("where", ""))
    except StackConfigError as e:
        return {"error": str(e), "later": later}
    return {"error": None, "later": later}


def diff(req: dict[str, Any]) -> dict[str, Any]:
    ra, rb = req["a"], req["b"]
    report = compare(ra, rb)
    a, b = ra["stack"], rb["stack"]
    return {"a": a, "b": b, "differences": [d.line(a, b) for d in report.differences],
            "allowed": [[d.allowed_because, d.line(a, b)] for d in report.allowed]}


def main(argv: list[str]) -> int:
    commands = {"check": check, "diff": diff}
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: python -m infra.stack_tools {'|'.join(commands)} < request.json",
              file=sys.stderr)
        return 2
    json.dump(commands[argv[0]](json.load(sys.stdin)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
