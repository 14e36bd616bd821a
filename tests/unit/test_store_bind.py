"""store_bind: a local run's c10d stores listen on loopback only, and a client that starts
before its server (a worker store's rank 1 racing rank 0) connects once the server is up,
through the same probe that spares it torch's reconnect back-off."""

from __future__ import annotations

import socket
import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from alchemist_jobs import store_bind


@pytest.fixture
def bound(monkeypatch):
    monkeypatch.setenv(store_bind.ENV, "127.0.0.1")
    original = dist.TCPStore
    assert store_bind.apply()
    yield dist.TCPStore
    monkeypatch.setattr(dist, "TCPStore", getattr(original, "_alchemist_original", original))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_client_started_before_its_server_joins_it(bound):
    port = free_port()
    server_up = threading.Event()
    holder: dict = {}

    def serve():
        server_up.wait()
        holder["server"] = bound("127.0.0.1", port, 2, True, timedelta(seconds=60))

    t = threading.Thread(target=serve)
    t.start()
    # The client starts first: its probe sees a refused port until the server listens.
    probe = threading.Thread(target=store_bind.wait_listening, args=("127.0.0.1", port, 60))
    probe.start()
    probe.join(0.2)
    assert probe.is_alive(), "the probe returned before anything listened"
    server_up.set()
    client = bound("127.0.0.1", port, 2, False, timedelta(seconds=60))
    probe.join(60)
    t.join(60)
    client.set("k", b"v")
    assert holder["server"].get("k") == b"v"  # the probe's extra connection broke nothing


def test_the_server_listens_on_loopback_only(bound):
    store = bound("127.0.0.1", 0, 1, True, timedelta(seconds=30))
    port = store.port
    listening = [line.split()[1] for line in open("/proc/net/tcp").read().splitlines()[1:]
                 if line.split()[3] == "0A"]  # state LISTEN
    ours = [a for a in listening if int(a.split(":")[1], 16) == port]
    assert ours == ["0100007F:%04X" % port], ours


def test_wait_listening_gives_up_at_its_deadline():
    port = free_port()  # nothing listens there
    store_bind.wait_listening("127.0.0.1", port, 0.05)  # returns; torch then reports the timeout
