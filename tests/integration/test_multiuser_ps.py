"""Another account on the machine cannot keep a run's workers from their parameter server
(issue 25, finding 3): idle connections opened before any handshake take no worker's slot,
and one that trickles a byte at a time is cut once the handshake's deadline has passed.

The attacker runs as uid nobody against a real server shard on loopback; the worker (this
process, the run's owner) holds the run's secret, which the attacker cannot read."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from alchemist_jobs.runtime import ps_wire
from tests import another_user
from tests.unit.test_parameter_server_security import _authed, bare_server, server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(another_user.unavailable() is not None,
                                 reason=f"cannot act as another uid: {another_user.unavailable()}")]

# N connections of another user, each sending the start of a frame the server must wait for
# (a 4096-byte header, the most a handshake may send) one byte a second: each read of the
# server gets a byte well within any per-read timeout. It prints "holding" once all are open
# and challenged, and trickles until its stdin closes (or `limit` seconds pass); then it reports
# how many the server had cut.
ATTACK = r"""
import json, socket, struct, sys, threading, time
port, n, limit = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
frame = struct.pack("!IQ", 4096, 0) + b" " * 4096
socks = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.recv(4096)  # the challenge
    s.setblocking(False)
    socks.append(s)
print("holding", flush=True)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
closed, start, i = set(), time.monotonic(), 0
while not stop.is_set() and len(closed) < n and time.monotonic() - start < limit:
    for k, s in enumerate(socks):
        if k in closed:
            continue
        try:
            if s.recv(4096) == b"":
                closed.add(k)
                continue
        except BlockingIOError:
            pass
        except OSError:
            closed.add(k)
            continue
        try:
            s.send(frame[i:i + 1])
        except OSError:
            closed.add(k)
    i += 1
    stop.wait(1.0)
print(json.dumps({"held": n, "closed": len(closed), "bytes_each": i}), flush=True)
"""


def as_nobody(code: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([*another_user.prefix(), sys.executable, "-c", code, *args], cwd="/",
                            env={"PATH": "/usr/bin:/bin"}, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


def test_another_users_connections_leave_the_workers_room(server):  # noqa: F811
    n = 2 * server["spec"].world_size + 4 + 2  # more than every worker slot there is
    attack = as_nobody(ATTACK, str(server["port"]), str(n), "600", stdin=subprocess.PIPE)
    try:
        assert attack.stdout.readline().strip() == "holding", attack.stderr.read()
        # The run's own worker, with the secret, connects while they are all open.
        worker = _authed(server)
        ps_wire.send(worker, {"op": "pull", "rank": 0})
        reply, _, _ = ps_wire.recv(worker)
        assert "version" in reply, reply
        worker.close()
    finally:
        out, err = attack.communicate(input="", timeout=120)
    assert attack.returncode == 0, err


def test_a_trickling_handshake_is_cut_at_its_deadline(server):  # noqa: F811
    # Ten times the deadline: the server must hang up long before the attacker gives up.
    limit = 10 * ps_wire.HANDSHAKE_TIMEOUT_S
    attack = as_nobody(ATTACK, str(server["port"]), "1", str(limit), stdin=subprocess.PIPE)
    assert attack.stdout.readline().strip() == "holding", attack.stderr.read()
    # stdin stays open: the attacker trickles until the server hangs up or `limit` passes.
    out = attack.stdout.read()
    attack.stdin.close()
    assert attack.wait(timeout=120) == 0, attack.stderr.read()
    seen = json.loads(out.splitlines()[-1])
    assert seen["closed"] == 1, (f"a connection of uid {another_user.NOBODY} sending a byte a "
                                 f"second held its handshake open for {limit:.0f} s ({seen})")
    # The server still serves its workers afterwards.
    worker = _authed(server)
    ps_wire.send(worker, {"op": "pull", "rank": 0})
    assert "version" in ps_wire.recv(worker)[0]
    worker.close()
