"""Fixtures of the Kubernetes backend's tests, in unit and integration alike: a fake API client
(tests/unit/k8s/fake_kube.py) wired in where the backend connects, and the real CLI run
in-process so the fake is used. Each tier's conftest.py imports them by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.k8s.fake_kube import FakeKube

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    """The fake Kubernetes API, standing in for the real client wherever the backend connects."""
    import alchemist_jobs.commands.follow as follow
    import alchemist_jobs.kubernetes.client as client
    import alchemist_jobs.kubernetes.interactive as interactive
    import alchemist_jobs.kubernetes.scheduler as scheduler

    f = FakeKube()
    monkeypatch.setattr(client, "connect", f.connector)
    monkeypatch.setattr(scheduler, "POLL_S", 0.0)
    monkeypatch.setattr(follow, "POLL_S", 0.0)
    monkeypatch.setattr(follow, "PROGRESS_EVERY_S", 0.0)
    monkeypatch.setattr(interactive, "POLL_S", 0.0)
    return f


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    """`alchemist ARGS` in this process: (exit code, stdout, stderr)."""
    from alchemist_jobs.cli import main

    monkeypatch.chdir(REPO)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run
