"""The JobSet v0.12.0 CRD schema (tests/fixtures/crds, loaded by tests/crd_schemas.py) as one
compiled validator: tests/crd_schemas.validate_custom rebuilds it per call, which takes
tens of seconds for JobSet's schema on a loaded machine."""

from __future__ import annotations

from functools import cache

import jsonschema

from tests import crd_schemas

KEY = ("jobset.x-k8s.io/v1alpha2", "JobSet")


@cache
def _validator() -> jsonschema.Draft7Validator:
    found = crd_schemas._schemas()[KEY]
    schema = dict(crd_schemas._structural(found["schema"]))
    props = dict(schema.get("properties") or {})
    for server_side in ("apiVersion", "kind", "metadata"):  # as validate_custom does
        props[server_side] = {}
    schema["properties"] = props
    return jsonschema.Draft7Validator(schema)


def validate_jobset(obj: dict) -> None:
    """Raise CustomResourceInvalid naming the field path and problem; None if valid."""
    errors = sorted(_validator().iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        path = ".".join(str(p) for p in first.absolute_path) or "(root)"
        raise crd_schemas.CustomResourceInvalid(
            f"JobSet {obj['metadata']['name']}: {path}: {first.message} "
            "[schema jobset.x-k8s.io_jobsets.json, v0.12.0]")
