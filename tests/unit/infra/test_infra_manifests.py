"""Every plain Kubernetes object the program creates is valid against its stack's Kubernetes schema (strict)."""

from __future__ import annotations

import kubernetes_validate
import pytest


def test_strict_validation_catches_a_misspelled_field():
    bad = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "x"},
           "spec": {"accessMode": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}  # fmt: skip
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.31.0", strict=True)
