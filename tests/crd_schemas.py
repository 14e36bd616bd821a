"""Validate custom resources against the upstream CRD schemas vendored in tests/fixtures/crds.

    from tests.crd_schemas import validate_custom
    validate_custom({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", ...})

Each fixture holds the openAPIV3Schema of every version a CRD serves at a pinned release
(source, tag and license inside the file). Validation follows what the API server does with
a structural schema (k8s.io/apiextensions-apiserver, pkg/apiserver/schema): unknown fields
are errors unless `x-kubernetes-preserve-unknown-fields` allows them, `int-or-string`
accepts both, and `apiVersion`, `kind` and `metadata` are checked by the server itself.
Then the schema's CEL rules (`x-kubernetes-validations`, pkg/apiserver/schema/cel) are
evaluated on create, with `self` the value at the rule's node; transition rules (those
that read `oldSelf`) only apply to updates and are skipped.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

CRDS = Path(__file__).resolve().parent / "fixtures" / "crds"


class CustomResourceInvalid(ValueError):
    """A custom resource that the API server would refuse."""


@cache
def _schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the vendored fixture and the version's schema."""
    out = {}
    for path in sorted(CRDS.glob("*.json")):
        crd = json.loads(path.read_text())
        for version, schema in crd["versions"].items():
            out[(f"{crd['group']}/{version}", crd["kind"])] = {"crd": crd, "schema": schema, "file": path.name}
    return out


def known_kinds() -> list[tuple[str, str]]:
    """Every (apiVersion, kind) a schema is vendored for."""
    return sorted(_schemas())


def _structural(schema: Any) -> Any:
    """The OpenAPI schema as JSON Schema: closed objects where the API server prunes or rejects."""
    if isinstance(schema, list):
        return [_structural(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    # `properties` maps names to schemas: made structural below, once (walking it here as well
    # doubled the work at every level: seconds for JobSet's schema, now milliseconds).
    out = {
        k: _structural(v)
        for k, v in schema.items()
        if not k.startswith("x-kubernetes-") and k != "properties"
    }
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        schema.get("type") == "object"
        and "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False  # the server rejects unknown fields (strict field validation)
    if "properties" in schema:
        out["properties"] = {k: _structural(v) for k, v in schema["properties"].items()}
    if schema.get("nullable"):
        out.pop("nullable", None)
        if "type" in out:
            out["type"] = [out["type"], "null"]
    return out


def validate_custom(obj: dict[str, Any]) -> None:
    """Raise CustomResourceInvalid naming the kind, object, field path and problem; None if valid."""
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    found = _schemas().get(key)
    name = (obj.get("metadata") or {}).get("name", "?")
    if found is None:
        raise CustomResourceInvalid(f"{key[1]} {name}: no vendored CRD schema for {key[0]} (have: {known_kinds()})")
    schema = dict(_structural(found["schema"]))
    props = dict(schema.get("properties") or {})
    for server_side in ("apiVersion", "kind", "metadata"):
        props[server_side] = {}
    schema["properties"] = props
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        path = ".".join(str(p) for p in first.absolute_path) or "(root)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise CustomResourceInvalid(
            f"{key[1]} {name}: {path}: {first.message} [schema {found['file']}, "
            f"{found['crd']['source']['tag']}]{more}"
        )
    failures = _cel_failures(found["schema"], obj, "")
    if failures:
        raise CustomResourceInvalid(f"{key[1]} {name}: {failures[0]} [schema {found['file']}, "
                                    f"{found['crd']['source']['tag']}]")  # fmt: skip


@cache
def _cel_program(rule: str):
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule))


def _cel_failures(schema: Any, value: Any, path: str) -> list[str]:
    """The CEL rules of the schema (and below it) that `value` breaks, as `path: message`."""
    if not isinstance(schema, dict) or value is None:
        return []
    import celpy

    out = []
    for rule in schema.get("x-kubernetes-validations") or []:
        if re.search(r"\boldSelf\b", rule["rule"]):
            continue
        result = _cel_program(rule["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        if result is not True and not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            out.append(f"{path or '(root)'}: {rule.get('message') or 'failed rule: ' + rule['rule']}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            out += _cel_failures(sub, item, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += _cel_failures(schema["items"], item, f"{path}[{i}]")
    return out
