"""Validate custom resources against the upstream CRD schemas vendored in tests/fixtures/crds.

    from tests.crd_schemas import validate_custom
    validate_custom({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", ...})

Each fixture holds the openAPIV3Schema of every version a CRD serves at a pinned release
(source, tag and license inside the file). Validation follows what the API server does with
a structural schema (k8s.io/apiextensions-apiserver, pkg/apiserver/schema): unknown fields
are errors unless `x-kubernetes-preserve-unknown-fields` allows them, `int-or-string`
accepts both, and `apiVersion`, `kind` and `metadata` are checked by the server itself.
"""

from __future__ import annotations

import json
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
    out = {k: _structural(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
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
    if "properties" in out:
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
