"""Every custom resource the program renders is valid against the upstream CRD schema of its pinned version.

Schemas: tests/fixtures/crds (Kueue v0.13.4, the prometheus-operator CRDs that
kube-prometheus-stack 75.15.1 installs, JobSet v0.12.0), loaded by tests/crd_schemas.py.
"""

from __future__ import annotations

import pytest

from tests.crd_schemas import CustomResourceInvalid, validate_custom


def test_an_unknown_kind_is_refused():
    with pytest.raises(CustomResourceInvalid, match="no vendored CRD schema"):
        validate_custom({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
