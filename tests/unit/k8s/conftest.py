"""Fixtures of the Kubernetes backend's unit tests (tests/k8s_fixtures.py: a fake API client,
see fake_kube.py, wired in where the backend connects, and the real CLI run in-process so the
fake is used), and the paths they read."""

from __future__ import annotations

from pathlib import Path

from tests.k8s_fixtures import fake, run_cli  # noqa: F401  (pytest finds fixtures by name here)

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
FIXTURES = REPO / "tests" / "fixtures" / "stack_outputs"


def outputs(stack: str) -> Path:
    return FIXTURES / f"{stack}.json"
