"""A flood of connections that another account opens to a parameter server (issue 37.2) leaves
a bounded log: refusals are written one line a second at most, each line bounded, with the
count of those not shown. Before, every refused connection wrote its own line (1.7 KB each,
640 KB/s measured by the attack), filling the run's disk at the stranger's pace.

The attacker runs as uid nobody against a real server shard on loopback (a run's servers are
in the run's own network now, private_net.py; this is the server as a cluster pod or a run
without a namespace exposes it)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests import another_user
from tests.unit.test_parameter_server_security import _authed, bare_server, server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(another_user.unavailable() is not None,
                                 reason=f"cannot act as another uid: {another_user.unavailable()}")]

# N connections, one after another: each reads the challenge, answers with a frame that is
# no handshake, and waits for the server to hang up.
FLOOD = r"""
import json, socket, struct, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
junk = b"x" * 1500
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.recv(4096)
    try:
        s.sendall(struct.pack("!IQ", len(junk), 0) + junk)
        while s.recv(4096):
            pass
    except OSError:
        pass
    s.close()
print(json.dumps({"sent": n}))
"""


def test_a_flood_of_refused_connections_writes_a_bounded_log(server, capfd):  # noqa: F811
    n = 300
    capfd.readouterr()
    start = time.monotonic()
    flood = subprocess.run([*another_user.prefix(), sys.executable, "-c", FLOOD,
                            str(server["port"]), str(n)], cwd="/", env={"PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=240)
    elapsed = time.monotonic() - start
    assert flood.returncode == 0 and json.loads(flood.stdout)["sent"] == n, flood.stderr
    # The run's own worker is still served.
    worker = _authed(server)
    worker.close()
    lines = [ln for ln in capfd.readouterr().out.splitlines() if " refused " in ln]
    assert lines, "no refusal was logged at all"
    # One line a second at most (plus the first), none longer than the bound.
    most = int(elapsed) + 2  # one line a second
    assert len(lines) <= most, (len(lines), most, elapsed, lines[:3])
    assert max(map(len, lines)) <= 400, max(lines, key=len)
    assert sum(len(ln) + 1 for ln in lines) <= most * 400
    if len(lines) > 1:  # what was not shown is counted
        assert "more refused since the last line" in lines[-1], lines[-1]
