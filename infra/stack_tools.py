"""What `alchemist stack` asks of a checkout's infra/, over JSON: the job package runs this
as `python -m infra.stack_tools COMMAND` in the checkout and never imports infra itself.

    check   stdin {"config": {key: value}, "left_out": [key], "where": str}
            stdout {"error": str | null, "later": [secret keys left out, to set later],
                    "deploy_time": [[key, the command its deployer sets it with]]}
    stand-ins  stdin {"configs": [{key: value}]}
               stdout {"stand_ins": [{dotted key: value}]}   (one per config, for infra.render)
    diff    stdin {"a": render, "b": render}   (renders from `python -m infra.render`)
            stdout {"differences": [line], "allowed": [[reason, line]], "a": name, "b": name}
    describe  stdin {"configs": {stack: {key: value}}}
              stdout {"where": {stack: its provider's words for `stack list`}}

Deploy-time values are those only a stack's deployer can give (the network they deploy from,
the installer they reviewed; each provider lists its own): a shipped stack leaves them out, `pulumi up` demands them,
and a replica's check or a read-only comparison takes a stand-in for them instead.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from infra.providers.registry import DeployTimeValue, rules
from infra.stack_diff import compare


def deploy_time_values(config: dict[str, Any]) -> list[tuple[str, DeployTimeValue]]:
    """(dotted key, its rule) of each deploy-time value the config's provider asks for."""
    try:
        provider = rules(config.get("alchemist:provider", ""))
    except KeyError:
        return []  # the check names the unknown provider
    section = config.get(f"alchemist:{provider.section}")
    if provider.section is None or not isinstance(section, dict):
        return []
    return [(f"alchemist:{provider.section}.{v.key}", v) for v in provider.deploy_time if v.needed(section)]


def stand_ins(config: dict[str, Any]) -> dict[str, Any]:
    """{dotted key: stand-in} for each deploy-time value a stack's config leaves out."""
    return {
        dotted: v.stand_in
        for dotted, v in deploy_time_values(config)
        if v.key not in config[dotted.split(".", 1)[0]]
    }


def check(req: dict[str, Any]) -> dict[str, Any]:
    from infra.config import SECRET_KEYS, StackConfigError, parse, pulumi_value

    config, left_out = req["config"], req.get("left_out", [])
    # Secrets left out are checked as if set, so the rest of the replica is validated now;
    # so are the deploy-time values its deployer has yet to give.
    later = [k for k in left_out if k.split(":", 1)[1] in SECRET_KEYS]
    filled = stand_ins(config)
    deploy_time = [[dotted, v.how] for dotted, v in deploy_time_values(config) if dotted in filled]
    config = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for dotted, value in filled.items():
        section, key = dotted.split(".", 1)
        config[section][key] = value
    raw = {k: pulumi_value(v) for k, v in config.items()}
    raw.update({k: "set-later" for k in later})
    try:
        parse(raw, set(later), where=req.get("where", ""))
    except StackConfigError as e:
        return {"error": str(e), "later": later, "deploy_time": deploy_time}
    return {"error": None, "later": later, "deploy_time": deploy_time}


def stand_ins_of(req: dict[str, Any]) -> dict[str, Any]:
    return {"stand_ins": [stand_ins(c) for c in req["configs"]]}


def diff(req: dict[str, Any]) -> dict[str, Any]:
    ra, rb = req["a"], req["b"]
    report = compare(ra, rb)
    a, b = ra["stack"], rb["stack"]
    return {
        "a": a,
        "b": b,
        "differences": [d.line(a, b) for d in report.differences],
        "allowed": [[d.allowed_because, d.line(a, b)] for d in report.allowed],
    }


def describe(req: dict[str, Any]) -> dict[str, Any]:
    """Each stack as its provider's package describes it (infra/providers/registry.py describe)."""
    where = {}
    for name, config in req["configs"].items():
        provider = config.get("alchemist:provider")
        try:
            where[name] = rules(provider).describe(config)
        except KeyError:
            where[name] = f"unknown provider {provider!r}"
    return {"where": where}


def main(argv: list[str]) -> int:
    commands = {"check": check, "stand-ins": stand_ins_of, "diff": diff, "describe": describe}
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: python -m infra.stack_tools {'|'.join(commands)} < request.json", file=sys.stderr)
        return 2
    json.dump(commands[argv[0]](json.load(sys.stdin)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
