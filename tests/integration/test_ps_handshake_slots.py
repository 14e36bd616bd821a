"""Strangers' handshakes to the parameter server are bounded apart from the workers' slots: over
real loopback sockets, more idle connections than the limit (seconds of handshakes)."""

from __future__ import annotations

from alchemist_jobs.runtime import parameter_server, ps_wire
from tests.unit.test_parameter_server_security import _authed, _closed, _connect, bare_server, server  # noqa: F401 (fixtures)


def test_unauthenticated_connections_take_no_workers_slot(server):  # noqa: F811 (the fixture)
    """Strangers' handshakes are bounded apart: the oldest is cut for a newcomer, and a
    worker still gets in past any number of idle ones (issue 25, finding 3)."""
    limit = parameter_server.MIN_PENDING_HANDSHAKES
    idle = [_connect(server["port"]) for _ in range(limit + 3)]
    for c in idle:
        assert ps_wire.recv(c)[0]["op"] == "challenge"  # every one is challenged
    assert sum(_closed(c) for c in idle[:3]) == 3  # the three oldest were cut for the newest
    worker = _authed(server)
    ps_wire.send(worker, {"op": "pull", "rank": 0})
    assert "version" in ps_wire.recv(worker)[0]
    for c in idle + [worker]:
        c.close()
