"""The vendored chart data (tests/fixtures/chart_values): value keys per chart version, and whether a hook renders.

Helm renders a template only when the `if` around it holds; helm.v4.Chart then drops every
document that carries `helm.sh/hook` (pulumi-kubernetes#3284). So a hook matters when its
`if` holds under the chart's defaults overlaid with our values. The `if` is evaluated with
Go template semantics for the few functions those conditions use (text/template: `and`,
`or`, `not`, `eq`; nil, false, 0 and empty values are false); anything else (for example
`.Capabilities`) is unknown, and an unknown condition counts as possibly true.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "chart_values"
UNKNOWN = object()


@cache
def chart_data(chart: str, version: str) -> dict[str, Any]:
    """The vendored data of `chart` at `version`; a missing file says what to vendor."""
    path = FIXTURES / f"{chart}-{version}.json"
    assert path.exists(), (
        f"no vendored values for chart {chart} {version}: add it to tests/fixtures/vendor_upstream.py"
    )
    return json.loads(path.read_text())


def chart_name(chart: str) -> str:
    """`oci://registry.k8s.io/kueue/charts/kueue` -> `kueue`."""
    return chart.rstrip("/").split("/")[-1]


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    """Dotted leaf paths of a values tree; lists and empty maps are leaves."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{path}.{k}" if path else k))
        return out
    return {path: value}


def _subchart(data: dict[str, Any], path: str) -> tuple[dict[str, Any], str] | None:
    head, _, rest = path.partition(".")
    sub = data["subcharts"].get(head)
    if sub and sub.get("vendored_as"):
        name, _, version = sub["vendored_as"].rpartition("-")
        return chart_data(name, version), rest
    return None


def unknown_keys(data: dict[str, Any], values: dict[str, Any]) -> list[str]:
    """The dotted paths of `values` that the chart's values.yaml does not have (subcharts included)."""
    bad = []
    for path in flatten(values):
        if not _key_exists(data, path):
            bad.append(path)
    return bad


def _key_exists(data: dict[str, Any], path: str) -> bool:
    sub = _subchart(data, path)
    if sub is not None:
        return path.startswith("global.") or _key_exists(*sub)
    keys, open_maps = data["values"], set(data["open_maps"])
    if path in keys or path in data["referenced"]:
        return True
    parts = path.split(".")
    for i in range(1, len(parts)):
        prefix = ".".join(parts[:i])
        if prefix in open_maps or (prefix in keys and keys[prefix] is None):
            return True  # a free-form map (`{}`), or a key documented empty (`key:`)
    return False


def lookup(data: dict[str, Any], ours: dict[str, Any], path: str) -> Any:
    """A `.Values` path as the template sees it: our value, else the chart's default, else nil."""
    if path in ours:
        return ours[path]
    if path in data["values"]:
        return data["values"][path]
    if any(k.startswith(path + ".") for k in [*ours, *data["values"]]):
        return {"non-empty": True}
    return None


TOKEN = re.compile(r'\(|\)|"[^"]*"|[^\s()]+')


def evaluate(condition: str | None, data: dict[str, Any], ours: dict[str, Any], prefix: str = "") -> Any:
    """True, False or UNKNOWN for a template's `if`; no condition renders always."""
    if condition is None:
        return True
    tokens = TOKEN.findall(condition)
    value, rest = _expr(tokens, data, ours, prefix)
    return value if not rest else UNKNOWN


def _truth(v: Any) -> Any:
    return UNKNOWN if v is UNKNOWN else bool(v)


def _expr(
    tokens: list[str], data: dict[str, Any], ours: dict[str, Any], prefix: str
) -> tuple[Any, list[str]]:
    """A pipeline: a function applied to operands until `)` or the end."""
    head, rest = tokens[0], tokens[1:]
    if head in ("and", "or", "not", "eq"):
        args = []
        while rest and rest[0] != ")":
            arg, rest = _operand(rest, data, ours, prefix)
            args.append(arg)
        return _apply(head, args), rest
    value, rest = _operand(tokens, data, ours, prefix)
    if rest and rest[0] != ")":  # a method call with arguments (`.Capabilities.APIVersions.Has "x"`)
        while rest and rest[0] != ")":
            _, rest = _operand(rest, data, ours, prefix)
        return UNKNOWN, rest
    return value, rest


def _operand(
    tokens: list[str], data: dict[str, Any], ours: dict[str, Any], prefix: str
) -> tuple[Any, list[str]]:
    head, rest = tokens[0], tokens[1:]
    if head == "(":
        value, rest = _expr(rest, data, ours, prefix)
        return value, rest[1:]
    if head.startswith('"'):
        return head.strip('"'), rest
    if head.startswith(".Values."):
        return lookup(data, ours, prefix + head[len(".Values.") :]), rest
    return UNKNOWN, rest


def _apply(fn: str, args: list[Any]) -> Any:
    if fn == "not":
        t = _truth(args[0])
        return UNKNOWN if t is UNKNOWN else not t
    if fn == "eq":
        return UNKNOWN if UNKNOWN in args else args[0] == args[1]
    truths = [_truth(a) for a in args]
    if fn == "and":
        return False if False in truths else (UNKNOWN if UNKNOWN in truths else True)
    return True if True in truths else (UNKNOWN if UNKNOWN in truths else False)


def rendered_hooks(data: dict[str, Any], values: dict[str, Any]) -> list[dict[str, Any]]:
    """The hook templates of the chart (and its vendored subcharts) whose `if` may hold with our values."""
    return _hooks(data, flatten(values))


def _hooks(data: dict[str, Any], ours: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for hook in data["hooks"]:
        sub = hook.get("subchart")
        cond = data["subcharts"].get(sub, {}).get("condition") if sub else None
        if cond and evaluate(f".Values.{cond}", data, ours) is False:
            continue  # the whole subchart is off
        if evaluate(hook["if"], data, ours, f"{sub}." if sub else "") is not False:
            found.append(hook)
    for sub_name, sub in data["subcharts"].items():
        if not sub.get("vendored_as"):
            continue
        if sub.get("condition") and evaluate(f".Values.{sub['condition']}", data, ours) is False:
            continue
        name, _, version = sub["vendored_as"].rpartition("-")
        # the subchart sees the parent's values under its name: the parent's defaults, then ours
        cut = len(sub_name) + 1
        sub_ours = {k[cut:]: v for k, v in data["values"].items() if k.startswith(sub_name + ".")}
        sub_ours.update({k[cut:]: v for k, v in ours.items() if k.startswith(sub_name + ".")})
        found += [{**h, "subchart": sub_name} for h in _hooks(chart_data(name, version), sub_ours)]
    return found
