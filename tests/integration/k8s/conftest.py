"""Fixtures of the Kubernetes backend's integration tests: the same as the unit tests'
(tests/k8s_fixtures.py), for the tests that start processes or take seconds."""

from __future__ import annotations

from tests.k8s_fixtures import fake, run_cli  # noqa: F401  (pytest finds fixtures by name here)
