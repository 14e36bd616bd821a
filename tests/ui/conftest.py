"""Fixtures of the dashboard's tests: a real finished local run, the app over real stacks
(the local one, and cluster stacks whose API server is the client-boundary fake of
tests/unit/k8s/fake_kube.py), and a real `alchemist ui` server process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FIXTURES = REPO / "tests" / "fixtures" / "stack_outputs"
# Stand-ins for the credentials in a cluster stack's output; no response may contain them.
KUBECONFIG_SECRET = "kubeconfig-secret-do-not-show-5f2c9a"
TOKEN_SECRET = "bearer-token-do-not-show-77ab01"
ARTIFACTS = REPO / "tests" / "ui" / "artifacts"
# The dashboard's token in tests that build the app in process (`alchemist ui` makes its own).
TEST_TOKEN = "test-token-of-the-dashboard-3c1e"
AUTH = {"Authorization": f"Bearer {TEST_TOKEN}"}


def cli(*args: str, home: Path, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """`alchemist ARGS` as a real process, with this checkout first on the path."""
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "alchemist_jobs", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="session")
def finished_home(tmp_path_factory) -> tuple[Path, str]:
    """A home holding one real, finished 2-worker digits run (3 epochs, one checkpoint): (home, run id)."""
    home = tmp_path_factory.mktemp("home")
    proc = cli("run", "examples/digits.yaml", "--set", "hyper.epochs=3", "--quiet",
               "--home", str(home), home=home)
    assert proc.returncode == 0, proc.stderr
    run_id = re.search(r"run (\S+): succeeded", proc.stdout).group(1)
    return home, run_id


@pytest.fixture(scope="session")
def async_home(tmp_path_factory) -> tuple[Path, str]:
    """A home holding one real, finished 2-worker async run (a parameter server, 3 epochs):
    checkpoints of each rank and of the server, the server's record. (home, run id)."""
    home = tmp_path_factory.mktemp("async-home")
    proc = cli("run", "examples/digits.yaml", "--set", "hyper.epochs=3", "--set",
               "algorithm.name=async", "--quiet", "--home", str(home), home=home)
    assert proc.returncode == 0, proc.stderr
    run_id = re.search(r"run (\S+): succeeded", proc.stdout).group(1)
    return home, run_id


@pytest.fixture(scope="session")
def outputs_dir(tmp_path_factory) -> Path:
    """Cluster stacks' outputs as `--outputs` files, holding marked credentials."""
    d = tmp_path_factory.mktemp("outputs")
    dev = json.loads((FIXTURES / "dev.json").read_text())
    dev["kubeconfig"] = dev["kubeconfig"].replace("clusters:", f"# {KUBECONFIG_SECRET}\nclusters:") \
        + f"\nusers:\n- name: u\n  user:\n    token: {TOKEN_SECRET}\n"
    (d / "dev.json").write_text(json.dumps(dev))
    aws = json.loads((FIXTURES / "aws-us-west-2.json").read_text())
    (d / "aws-us-west-2.json").write_text(json.dumps(aws))
    return d


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    """The fake Kubernetes API wherever the backend connects (see tests/unit/k8s/fake_kube.py,
    modelled on the kubernetes client and API server)."""
    import alchemist_jobs.kubernetes.client as client
    from tests.unit.k8s.fake_kube import FakeKube

    f = FakeKube()
    monkeypatch.setattr(client, "connect", f.connector)
    return f


def make_app(home: Path, outputs: Path | None = None, host: str = "127.0.0.1",
             port: int = 8740, token: str | None = TEST_TOKEN,
             stacks: tuple[str, ...] = ("local",), login: str | None = None):
    from alchemist_jobs.ui.app import create_app
    from alchemist_jobs.ui.backends import Backends

    outs = {s: outputs / f"{s}.json" for s in stacks if s != "local"} if outputs else {}
    b = Backends(list(stacks), home=home, outputs=outs, spec_dir=REPO)
    if login is None:
        return create_app(b, token, host, port), b
    return create_app(b, token, host, port, login_token=login), b


class UiServer:
    """A real `alchemist ui` process on a free port."""

    def __init__(self, home: Path, *extra: str):
        env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "alchemist_jobs", "ui", "--home", str(home), "--port", "0",
             *extra], cwd=REPO, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
            text=True, start_new_session=True)
        self.banner = []
        for line in self.proc.stderr:  # the server prints its URL once it listens
            self.banner.append(line)
            if line.startswith("dashboard: http"):
                break
        else:
            raise AssertionError("alchemist ui exited: " + "".join(self.banner))
        # The one-time URL: the page trades the token in its fragment for a session cookie.
        url_line = self.banner[-1]
        self.login_url = re.search(r"(http://\S+)", url_line).group(1)
        self.url = re.search(r"(http://\S+?/)", url_line).group(1)
        found = re.search(r"#token=([A-Za-z0-9_-]+)", self.login_url)
        self.login_token = found.group(1) if found else None
        self.token = None
        if found:  # the next line (the same write) names the scripts' Bearer token
            self.banner.append(how := self.proc.stderr.readline())
            self.token = re.search(r"Bearer ([A-Za-z0-9_-]+)", how).group(1)
        self.auth = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        # Keep reading its stderr, so a chatty server never blocks on a full pipe.
        self._drain = threading.Thread(target=lambda: self.banner.extend(self.proc.stderr),
                                       daemon=True)
        self._drain.start()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=120)
        self._drain.join(timeout=60)  # everything it printed, up to its exit
        return code
