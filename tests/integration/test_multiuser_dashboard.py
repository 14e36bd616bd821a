"""Another account on the machine can neither submit a job through `alchemist ui` on loopback
nor read its runs (issue 25, finding 2): every API call needs the token the dashboard printed
to its owner's terminal, and nothing another account can read (process lists, command lines)
holds that token.

A real `alchemist ui` runs as this process's user; the attacker runs as uid nobody."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import another_user
from tests.conftest import EXAMPLES
from tests.ui.conftest import UiServer

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(another_user.unavailable() is not None,
                                 reason=f"cannot act as another uid: {another_user.unavailable()}")]

# What any account can try: list the runs, submit a job (with the header the page sends, from
# no browser: no Origin), and look for the token in every process's command line.
ATTACK = r"""
import json, os, sys, urllib.error, urllib.request
base, spec = sys.argv[1], sys.argv[2]
out = {"uid": os.getuid(), "calls": {}, "token_seen_in": []}
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=body, headers={
        "X-Alchemist-Request": "1", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()[:300]
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()[:300]
out["calls"]["page"] = call("GET", "")[0]
out["calls"]["list"] = call("GET", "api/v1/runs")
out["calls"]["submit"] = call("POST", "api/v1/runs", json.dumps({"spec": spec}).encode())
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():
        continue
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
    except OSError:
        continue
    if "token" in cmd.lower() and "alchemist_jobs" in cmd:
        out["token_seen_in"].append(cmd.replace("\0", " ")[:200])
print(json.dumps(out))
"""


def test_another_user_can_neither_submit_nor_list_through_the_dashboard(tmp_path: Path):
    home = tmp_path / "home"
    spec = (EXAMPLES / "digits.yaml").read_text().replace("epochs: 10", "epochs: 1")
    server = UiServer(home)
    try:
        attack = another_user.run_python(ATTACK, server.url, spec)
        assert attack.returncode == 0, attack.stderr[-3000:]
        seen = json.loads(attack.stdout.splitlines()[-1])
        assert seen["uid"] == another_user.NOBODY
        assert seen["calls"]["page"] == 200  # it reached the server: the page holds no data
        submitted = list((home / "runs").glob("*")) if (home / "runs").exists() else []
        assert seen["calls"]["submit"][0] == 401 and submitted == [], (
            f"uid {seen['uid']} submitted a run as the dashboard's owner: {seen['calls']}, "
            f"{[p.name for p in submitted]}")
        assert seen["calls"]["list"][0] == 401, seen["calls"]
        assert seen["token_seen_in"] == []
        if server.token:
            assert server.token not in attack.stdout
        # The owner, with the printed token, is served.
        import httpx

        r = httpx.get(f"{server.url}api/v1/runs", headers=server.auth, timeout=60)
        assert r.status_code == 200 and r.json()["total"] == 0
    finally:
        assert server.stop() == 0
