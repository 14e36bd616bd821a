"""Malformed frames from another account (uid nobody, which cannot read the run's secret): each
connection is closed with at most one refusal line, no traceback escapes the server's handler,
and the server goes on serving the run's workers.
The server is a real shard on loopback (tests/unit/test_parameter_server_security.py)."""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from alchemist_jobs.runtime import ps_wire
from tests import another_user
from tests.integration.test_multiuser_ps import as_nobody
from tests.unit.test_parameter_server_security import _authed, bare_server, server  # noqa: F401
from tests.unit.test_ps_wire_malformed import _random_frame, frame

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(another_user.unavailable() is not None,
                                 reason=f"cannot act as another uid: {another_user.unavailable()}")]

# Reads a JSON list of hex frames on stdin; for each: connect, take the challenge, send the
# frame, stop sending, and wait for the server to hang up. Prints how many it hung up on.
ATTACK = r"""
import json, socket, sys
port = int(sys.argv[1])
closed = 0
for hexframe in json.load(sys.stdin):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.settimeout(60)
    s.recv(4096)  # the challenge
    try:
        s.sendall(bytes.fromhex(hexframe))
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
        closed += 1
    except TimeoutError:
        pass  # still open a minute later: not counted
    except OSError:
        closed += 1  # the server hung up first (a reset, a broken pipe)
    s.close()
print(json.dumps({"closed": closed}), flush=True)
"""

HANDSHAKES = [
    frame(b'{"op":"auth","mac":' + b"[" * 4000),  # RecursionError in json
    frame({"op": "auth", "mac": "é" * 64, "nonce": "x"}),  # TypeError in compare_digest
    frame(b'{"op":"auth","mac":"\\udc80","nonce":"x"}'),
    frame({"op": "auth", "mac": ["a"], "nonce": {"b": 1}}),
    frame(b"[1,2]"), frame(b"\xff\xfe"), frame({"op": "auth", "mac": "0" * 64})[:-3],
]


def test_another_accounts_malformed_handshakes_close_only_their_connections(server, capfd):  # noqa: F811
    rng = random.Random(5)
    frames = HANDSHAKES + [_random_frame(rng) for _ in range(40)]
    attack = as_nobody(ATTACK, str(server["port"]), stdin=subprocess.PIPE)
    out, err = attack.communicate(json.dumps([f.hex() for f in frames]), timeout=300)
    assert attack.returncode == 0, err
    assert json.loads(out)["closed"] == len(frames)
    worker = _authed(server)  # the run's own worker is still served
    ps_wire.send(worker, {"op": "pull", "rank": 0})
    assert "version" in ps_wire.recv(worker)[0]
    worker.close()
    logged = capfd.readouterr()
    assert "Traceback" not in logged.out + logged.err, logged.err[-3000:]
