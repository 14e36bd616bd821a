"""`alchemist stack list|replicate|diff`: see, copy and compare the Pulumi stacks in stacks/.

Works from a checkout of the repository (where Pulumi.yaml is). `list` and `replicate`
need only pydantic and PyYAML; `diff` renders each stack under Pulumi's mocks in a
subprocess (the `infra` extra), so no Pulumi CLI and no cloud account are needed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from alchemist_jobs import environment as E
from alchemist_jobs.commands import command
from alchemist_jobs.errors import UserError, shown
from alchemist_jobs.pulumi_project import project_stacks, repo_root, stack_names, stacks_dir

EXIT_DIFFERS = 1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    stack = command(
        subparsers,
        "stack",
        "list, replicate and compare Pulumi stacks (stacks/)",
        ["alchemist stack list", "alchemist stack diff dev dev-2"],
        description=__doc__.splitlines()[0],
    )
    stack.add_argument("--root", type=Path, help="repository root (default: the one holding Pulumi.yaml)")
    sub = stack.add_subparsers(dest="stack_command", metavar="SUBCOMMAND")
    sub.required = True

    p = command(
        sub,
        "list",
        "the stacks and what each runs on",
        ["alchemist stack list", "alchemist stack list --json"],
    )
    p.add_argument("--json", action="store_true", help="as JSON (a list of stacks)")
    p.add_argument(
        "--root",
        type=Path,
        default=argparse.SUPPRESS,
        help="repository root (also accepted before the subcommand)",
    )
    p.set_defaults(func=cmd_list)

    p = command(
        sub,
        "replicate",
        "write stacks/Pulumi.DST.yaml from SRC with overrides",
        [
            "alchemist stack replicate dev dev-2 --set kubernetesVersion=1.35",
            "alchemist stack replicate dev dev-3 --set kind.workers=3",
        ],
    )
    p.add_argument(
        "--root",
        type=Path,
        default=argparse.SUPPRESS,
        help="repository root (also accepted before the subcommand)",
    )
    p.add_argument("src", metavar="SRC").completer = complete_stack_file  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument("dst", metavar="DST")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key (namespace `alchemist:` implied), e.g. kubernetesVersion=1.35, or a key "
        "of the provider's section (SECTION, as named in the SRC file) such as SECTION.region=eu-west-1",
    )
    p.add_argument("--force", action="store_true", help="overwrite DST if it exists")
    p.set_defaults(func=cmd_replicate)

    p = command(
        sub,
        "diff",
        "how two stacks' platforms differ (exit 1 if they do)",
        ["alchemist stack diff dev dev-2", "alchemist stack diff dev dev-3 --all"],
    )
    p.add_argument(
        "--root",
        type=Path,
        default=argparse.SUPPRESS,
        help="repository root (also accepted before the subcommand)",
    )
    for name in ("a", "b"):
        p.add_argument(
            name, metavar=name.upper(), help="stack name or stack file"
        ).completer = complete_stack_file  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument("--all", action="store_true", help="also list the differences that are allowed")
    p.set_defaults(func=cmd_diff)


# --- where the stacks are -----------------------------------------------------------------


def stack_file(root: Path, name_or_path: str) -> Path:
    path = Path(name_or_path)
    try:  # a name too long for a file name is no stack either (OSError: File name too long)
        if path.suffix in (".yaml", ".yml") and path.is_file():
            return path.resolve()
        candidate = stacks_dir(root) / f"Pulumi.{name_or_path}.yaml"
        found = candidate.is_file()
    except OSError:
        candidate, found = None, False
    if not found:
        known = ", ".join(stack_names(root)) or "none"
        where = (
            f"no {candidate.relative_to(root)}"
            if candidate is not None and len(name_or_path) <= 60
            else "no such stack file"
        )
        raise UserError(f"stack {shown(name_or_path)}: {where}; accepted: {known}")
    assert candidate is not None  # found: the file is there
    return candidate


# A new stack's name: it becomes a file name and part of cluster resource names.
STACK_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?")


def check_stack_name(name: str, what: str) -> str:
    if not STACK_NAME.fullmatch(name) or name == "local":
        raise UserError(
            f"{what} {shown(name)}: not a new stack name; accepted: lowercase letters, "
            "digits and '-' (1 to 40, starting and ending with a letter or digit), "
            "not 'local'"
        )
    return name


def complete_stack(**_) -> list[str]:
    """Shell completion of `--stack`: local and the project's stacks."""
    return ["local", *(project_stacks() or [])]


def complete_stack_file(parsed_args: argparse.Namespace, **_) -> list[str]:
    """Shell completion of a stack of stacks/ (`stack diff A B`), under --root if given."""
    try:
        return stack_names(repo_root(getattr(parsed_args, "root", None)))
    except (UserError, OSError, ValueError):
        return []


def _load(path: Path) -> dict[str, Any]:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config", {}), dict):
        raise UserError(f"{path}: expected a mapping with a `config:` mapping")
    return doc


def infra_tool(root: Path, command: str, request: dict[str, Any]) -> dict[str, Any]:
    """Ask the checkout's infra/ (`python -m infra.stack_tools COMMAND`, in a subprocess:
    the job package never imports infra)."""
    proc = subprocess.run(
        [sys.executable, "-m", "infra.stack_tools", command],
        input=json.dumps(request),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"alchemist stack {command}: infra/ of the checkout at {root} failed: "
            f"{last}; accepted: a checkout with the `infra` extra installed "
            "(pip install 'alchemist[infra]')"
        ) from None


# --- list ---------------------------------------------------------------------------------


def _facts(name: str, config: dict[str, Any], where: str) -> dict[str, Any]:
    """`stack list --json`: one stack (docs/cli.md)."""
    return {
        "name": name,
        "provider": config.get("alchemist:provider"),
        "kubernetes_version": config.get("alchemist:kubernetesVersion"),
        "shared_fs": (config.get("alchemist:sharedFs") or {}).get("kind"),
        "summary": _summary(config, where),
    }


def _summary(config: dict[str, Any], where: str) -> str:
    """One row; `where` is the provider's own description (its package, through stack_tools)."""
    provider = config.get("alchemist:provider", "?")
    fs = (config.get("alchemist:sharedFs") or {}).get("kind", "?")
    return f"{provider:<9} k8s {config.get('alchemist:kubernetesVersion', '?'):<5} {fs:<11} {where}"


def cmd_list(args: argparse.Namespace) -> int:
    try:
        root = repo_root(args.root)
    except UserError as e:
        if args.root is not None or E.PULUMI_DIR.get() is not None:
            raise
        # An installed package outside a checkout: the built-in stack is still there.
        print(f"note: only the built-in stack: {e}", file=sys.stderr)
        root = None
    stacks = (
        {}
        if root is None
        else {
            name: _load(stacks_dir(root) / f"Pulumi.{name}.yaml").get("config", {})
            for name in stack_names(root)
        }
    )
    # Each provider's package describes its stacks (the job package never imports infra); a
    # checkout without the infra program (stack files only) lists them without those words.
    where: dict[str, str] = {}
    if root is not None and stacks and (root / "infra" / "stack_tools.py").is_file():
        where = infra_tool(root, "describe", {"configs": stacks})["where"]
    if args.json:
        local = {
            "name": "local",
            "provider": "local",
            "kubernetes_version": None,
            "shared_fs": "directory",
            "summary": "processes on this machine, no Pulumi",
        }
        print(json.dumps([local] + [_facts(n, c, where.get(n, "")) for n, c in stacks.items()], indent=1))
        return 0
    print(f"{'STACK':<16} {'PROVIDER':<9} {'K8S':<9} {'SHARED FS':<11} WHERE AND WHAT")
    print(f"{'local':<16} {'built-in':<9} {'':<9} {'directory':<11} processes on this machine, no Pulumi")
    for name, config in stacks.items():
        print(f"{name:<16} {_summary(config, where.get(name, ''))}")
    return 0


# --- replicate ----------------------------------------------------------------------------


def _secure_keys(value: Any, key: str) -> list[str]:
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return [key]
        return [k for sub, v in value.items() for k in _secure_keys(v, f"{key}.{sub}")]
    if isinstance(value, list):
        return [k for i, v in enumerate(value) for k in _secure_keys(v, f"{key}[{i}]")]
    return []


def _set_path(config: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `section.key.sub` (namespace `alchemist:` implied) in a stack's config."""
    head, *rest = dotted.split(".")
    key = head if ":" in head else f"alchemist:{head}"
    if not rest:
        config[key] = value
        return
    node = config.setdefault(key, {})
    for part in rest[:-1]:
        if not isinstance(node, dict):
            raise UserError(f"--set {dotted}: {part!r} is inside a value that is not a mapping")
        node = node.setdefault(part, {})
    if not isinstance(node, dict):
        raise UserError(f"--set {dotted}: the parent of {rest[-1]!r} is not a mapping")
    node[rest[-1]] = value


def cmd_replicate(args: argparse.Namespace) -> int:
    import yaml

    root = repo_root(args.root)
    src = stack_file(root, args.src)
    check_stack_name(args.dst, "DST")
    dst = stacks_dir(root) / f"Pulumi.{args.dst}.yaml"
    if dst.exists() and not args.force:
        raise UserError(
            f"{dst.relative_to(root)} exists; accepted: a new stack name, or --force to overwrite"
        )
    config: dict[str, Any] = dict(_load(src).get("config") or {})
    overridden: set[str] = set()
    for item in args.sets:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UserError(f"--set {item!r}: accepted: KEY=VALUE such as kubernetesVersion=1.35")
        _set_path(config, key, yaml.safe_load(raw) if raw else "")
        overridden.add(key if ":" in key.split(".")[0] else f"alchemist:{key}")
    # Encrypted values belong to SRC's secrets provider: they cannot be copied, only set anew.
    secure = [k for key, v in config.items() for k in _secure_keys(v, key)]
    if secure:
        first = secure[0].split(":", 1)[1].split(".")[0]
        raise UserError(
            f"{src.relative_to(root)}: {', '.join(secure)} is encrypted with {args.src}'s secrets provider and "
            f"cannot be re-encrypted for {args.dst}; accepted: leave it out with --set {first}= and then "
            f"`pulumi config set --secret alchemist:{first} <value> -s {args.dst}`"
        )
    left_out = sorted(k for k, v in config.items() if v == "")
    config = {k: v for k, v in config.items() if v != ""}
    checked = infra_tool(
        root, "check", {"config": config, "left_out": left_out, "where": str(dst.relative_to(root))}
    )
    if checked["error"]:
        raise UserError(checked["error"])
    later = checked["later"]
    sets = " ".join(f"--set {s}" for s in args.sets)
    header = (f"# A replica of {args.src}: `alchemist stack replicate {args.src} {args.dst}"
              f"{' ' + sets if sets else ''}`.\n")  # fmt: skip
    dst.write_text(header + yaml.safe_dump({"config": config}, sort_keys=False, default_flow_style=False))
    print(f"wrote {dst.relative_to(root)} ({len(overridden)} keys changed from {args.src}); "
          f"`alchemist stack diff {args.src} {args.dst}` compares their platforms")  # fmt: skip
    for key in later:
        print(f"then set its secret: pulumi config set --secret {key} <value> -s {args.dst}")
    for key, how in checked.get("deploy_time", []):  # as its source's deployer had yet to
        print(f"then, as its deployer, set {key}: {how} -s {args.dst}")
    return 0


# --- diff ---------------------------------------------------------------------------------


def render(root: Path, paths: list[Path], sets: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Render stacks under Pulumi's mocks in a subprocess (one fork per stack: mocks are process-wide)."""
    jobs = json.dumps([{"stack_file": str(p), "sets": s} for p, s in zip(paths, sets or [{} for _ in paths])])
    proc = subprocess.run(
        [sys.executable, "-m", "infra.render", "--jobs", "/dev/stdin"],
        input=jobs, cwd=root, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    try:
        results = json.loads(proc.stdout)
    except json.JSONDecodeError:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"rendering {', '.join(p.name for p in paths)} failed: {last}") from None
    for result in results:
        if result.get("error"):
            raise UserError(result["error"])
    return results


def cmd_diff(args: argparse.Namespace) -> int:
    root = repo_root(args.root)
    if importlib.util.find_spec("pulumi") is None:
        raise UserError(
            "alchemist stack diff: needs the Pulumi SDK; accepted: pip install 'alchemist[infra]'"
        )
    a, b = stack_file(root, args.a), stack_file(root, args.b)
    # A comparison deploys nothing: what only a deployer can say (their network, the
    # installer they reviewed) takes the same stand-in in both, and the output says so.
    sets = infra_tool(root, "stand-ins", {"configs": [_load(p).get("config") or {} for p in (a, b)]})[
        "stand_ins"
    ]
    ra, rb = render(root, [a, b], sets)
    for path, filled in zip((a, b), sets):
        if filled:
            print(
                f"note: {path.name} leaves {', '.join(filled)} to its deployer; compared with a stand-in",
                file=sys.stderr,
            )
    report = infra_tool(root, "diff", {"a": ra, "b": rb})
    for line in report["differences"]:
        print(line)
    if args.all:
        for reason, line in report["allowed"]:
            print(f"  (allowed: {reason}) {line}")
    differs = bool(report["differences"])
    verdict = "differ" if differs else "are identical"
    print(
        f"platforms of {report['a']} and {report['b']} {verdict}: "
        f"{len(report['differences'])} difference(s), {len(report['allowed'])} allowed "
        "provider-specific difference(s) (see infra/stack_diff.py)"
    )
    return EXIT_DIFFERS if differs else 0
