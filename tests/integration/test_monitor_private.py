"""`alchemist monitor` answers only its owner (issue 37, item 3): played as another account
(uid nobody) on the same machine, against a real Prometheus and a real TensorBoard.

Under umask 002 every folder and file the monitor writes is private (0700 / 0600), so another
account lists none of them; Prometheus asks for the login the monitor keeps in its state
folder, and TensorBoard for the same login, so another account's GET of the run ids, metric
names, targets and tags gets a 401 and no data, while the owner, with the login the monitor
tells it where to find, still reads the runs, the scraped targets and a run's scalar tags.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests import another_user
from tests.conftest import REPO
from tests.integration.test_local_runs import wait_for

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(not (os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus")),
                                 reason="no prometheus binary (apt-get install -y "
                                        "--no-install-recommends prometheus); CI installs it")]

RUN = "digits-private-0001"

# As another account: GET each URL, without and with a guessed login; print the status (or
# the refusal) and whether the body named the run. urllib raises HTTPError for a 401.
ATTACK = r"""
import json, sys, urllib.error, urllib.request, base64
out = []
for url in sys.argv[2:]:
    for auth in (None, "alchemist:alchemist", "admin:admin"):
        req = urllib.request.Request(url)
        if auth:
            req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                body = r.read().decode(errors="replace")
                out.append([url, auth, r.status, sys.argv[1] in body or "train/loss" in body])
        except urllib.error.HTTPError as e:
            out.append([url, auth, e.code, False])
        except OSError as e:
            out.append([url, auth, "refused: " + type(e).__name__, False])
print(json.dumps(out))
"""

LIST_AS_OTHER = r"""
import json, os, sys
seen = {}
for path in sys.argv[1:]:
    try:
        seen[path] = sorted(os.listdir(path)) if os.path.isdir(path) else open(path).read()[:40]
    except OSError as e:
        seen[path] = type(e).__name__
print(json.dumps(seen))
"""


def _get(url: str, login: tuple[str, str] | None) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if login:
        req.add_header("Authorization",
                       "Basic " + base64.b64encode(":".join(login).encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def _write_event_file(folder: Path, events) -> None:
    """An event file as TensorBoard's writers make it (TFRecord: length, masked CRC-32C of
    the length, the event, its masked CRC-32C), without importing TensorFlow, which the
    writers load when it is installed (a minute on a loaded machine)."""
    import struct

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    folder.mkdir(parents=True)
    with open(folder / "events.out.tfevents.1.monitor-test", "wb") as f:
        for event in events:
            data = event.SerializeToString()
            header = struct.pack("<Q", len(data))
            f.write(header + struct.pack("<I", masked_crc32c(header)) + data
                    + struct.pack("<I", masked_crc32c(data)))


@pytest.fixture(scope="module")
def monitor():
    if why := another_user.unavailable():
        pytest.skip(why)
    import tempfile

    from tensorboard.compat.proto import event_pb2, summary_pb2

    top = Path(tempfile.mkdtemp(prefix="alc-monitor-private-"))
    top.chmod(0o755)  # another account may enter the home: only the monitor's modes protect it
    home = top / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    events = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")]
    for step in range(3):  # what the trainer's SummaryWriter writes for a scalar
        value = summary_pb2.Summary.Value(tag="train/loss", simple_value=1.0 / (step + 1))
        events.append(event_pb2.Event(step=step, wall_time=1.0 + step,
                                      summary=summary_pb2.Summary(value=[value])))
    _write_event_file(home / "runs" / RUN / "tensorboard", events)
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "alchemist_jobs", "monitor", "--port", "0", "--scrape-interval",
         "1s", "--tensorboard", "--tensorboard-port", "0"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: os.umask(0o002))
    state_file = home / "monitor" / "monitor.json"

    def started():
        if proc.poll() is not None:
            raise AssertionError(f"alchemist monitor exited: {proc.stdout.read()}")
        return state_file.exists() and json.loads(state_file.read_text())
    try:
        state = wait_for(started, 120, "alchemist monitor to start Prometheus", interval=0.3)
        yield home, state, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(top, ignore_errors=True)


def _login(home: Path, state: dict) -> tuple[str, str]:
    """The owner's login, where the monitor says it keeps it."""
    password_file = Path(state["password_file"])
    assert password_file.parent == home / "monitor"
    return state["username"], password_file.read_text().strip()


def test_another_account_gets_no_data_from_prometheus_or_tensorboard(monitor):
    home, state, _ = monitor
    prom, tb = state["prometheus_url"], state["tensorboard_url"]
    urls = [f"{prom}/api/v1/label/__name__/values", f"{prom}/api/v1/targets",
            f"{tb}/data/runs", f"{tb}/data/plugin/scalars/tags", f"{tb}/"]
    wait_for(lambda: _answers_at_all(tb), 90, "TensorBoard to listen", interval=0.5)
    out = another_user.run_python(ATTACK, RUN, *urls)
    assert out.returncode == 0, out.stderr
    for url, auth, status, named in json.loads(out.stdout):
        assert status == 401 or str(status).startswith("refused"), (url, auth, status)
        assert not named, (url, auth)

    # The owner, with the login where the monitor says it is: TensorBoard lists the run and its
    # tags once it has read the logdir, and Prometheus has scraped itself with the same login.
    login = _login(home, state)
    wait_for(lambda: RUN in _get(f"{tb}/data/runs", login)[1], 90, "TensorBoard to list the run",
             interval=0.5)
    code, body = _get(f"{tb}/data/plugin/scalars/tags", login)
    assert code == 200 and "train/loss" in json.loads(body)[f"{RUN}/tensorboard"], body
    wait_for(lambda: '"health":"up"' in _get(f"{prom}/api/v1/targets", login)[1], 60,
             "Prometheus to scrape itself with the login", interval=0.5)
    code, body = _get(f"{prom}/api/v1/label/__name__/values", login)
    assert code == 200 and "prometheus_build_info" in body
    web = subprocess.run(["promtool", "check", "web-config", state["web_config"]],
                         capture_output=True, text=True)
    assert web.returncode == 0 and "SUCCESS" in web.stdout + web.stderr, web.stdout + web.stderr
    # No other door: each listens on its one port (TensorBoard's Rust data server, a gRPC
    # listener without a login, is not started).
    import psutil

    for pid, url in ((state["prometheus_pid"], prom), (state["tensorboard_pid"], tb)):
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        ports = {c.laddr.port for p in procs for c in p.net_connections("inet")
                 if c.status == psutil.CONN_LISTEN}
        assert ports == {int(url.rsplit(":", 1)[1])}, (url, ports)
    # Without the login the owner is asked for it like anyone else: it is the login that lets in.
    assert _get(f"{prom}/api/v1/targets", None)[0] == 401
    assert _get(f"{tb}/data/runs", None)[0] == 401
    wrong = (login[0], login[1][:-1] + ("x" if login[1][-1] != "x" else "y"))
    assert _get(f"{tb}/data/runs", wrong)[0] == 401


def _answers_at_all(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.HTTPError:
        return True  # it answered, if only to ask for a login
    except OSError:
        return False
    return True


def test_every_file_and_folder_of_the_monitor_is_private_under_umask_002(monitor):
    home, state, _ = monitor
    mon = home / "monitor"
    wait_for(lambda: (mon / "data").exists() and (mon / "tensorboard.log").exists(), 60,
             "Prometheus's data folder and TensorBoard's log")
    loose = []
    for path in [mon, *mon.rglob("*")]:
        st = os.lstat(path)
        assert not stat.S_ISLNK(st.st_mode), path
        assert st.st_uid == os.getuid(), path
        if stat.S_IMODE(st.st_mode) & 0o077:
            loose.append(f"{path.relative_to(home)} {stat.S_IMODE(st.st_mode):04o}")
    assert not loose, loose
    assert stat.S_IMODE(mon.stat().st_mode) == 0o700
    # As another account: nothing to list, nothing to read (the config, the login, the targets).
    out = another_user.run_python(LIST_AS_OTHER, str(mon), str(mon / "prometheus.yml"),
                                  state["password_file"], str(mon / "targets.json"))
    seen = json.loads(out.stdout)
    assert set(seen.values()) == {"PermissionError"}, seen
