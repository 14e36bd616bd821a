"""store_bind: a local run's c10d stores listen on loopback only, and a client that starts
before its server (a worker store's rank 1 racing rank 0) connects once the server is up,
through the same probe that spares it torch's reconnect back-off."""

from __future__ import annotations

import os
import socket
import sys
import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from alchemist_jobs import store_bind
from alchemist_jobs.environment import STORE_ADDR, STORE_DIR


@pytest.fixture
def bound(monkeypatch):
    monkeypatch.setenv(STORE_ADDR.name, "127.0.0.1")
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


# --- the local stack's mode: stores are files in the run's private directory -------------------


def my_listeners() -> set[str]:
    """Inodes of this process's sockets in LISTEN."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the directory's own descriptor, closed by now
            continue
        if link.startswith("socket:["):
            mine.add(link[8:-1])
    return {line.split()[9] for t in ("/proc/net/tcp", "/proc/net/tcp6")
            for line in open(t).read().splitlines()[1:]
            if line.split()[3] == "0A" and line.split()[9] in mine}


@pytest.fixture
def in_dir(monkeypatch, tmp_path):
    from torch.distributed.elastic.rendezvous import api

    d = tmp_path / "stores"
    d.mkdir(mode=0o700)
    monkeypatch.setenv(STORE_DIR.name, str(d))
    monkeypatch.delenv(STORE_ADDR.name, raising=False)
    original, free_port_fn = dist.TCPStore, api.get_free_port
    assert store_bind.apply()
    yield d
    monkeypatch.setattr(dist, "TCPStore", getattr(original, "_alchemist_original", original))
    monkeypatch.setattr(api, "get_free_port", free_port_fn)


def test_in_a_run_directory_every_store_is_a_private_file_and_nothing_listens(in_dir):
    rdzv = sys.modules["torch.distributed.rendezvous"]

    before = my_listeners()
    # What init_process_group(env://) does on rank 0 and on rank 1 (torch 2.13's
    # _create_c10d_store): the port names the store.
    server = rdzv._create_c10d_store("127.0.0.1", 29999, 0, 2, timedelta(seconds=30))
    client = rdzv._create_c10d_store("127.0.0.1", 29999, 1, 2, timedelta(seconds=30))
    client.set("k", b"v")
    assert server.get("k") == b"v" and server.port == 29999
    assert isinstance(server, dist.TCPStore)  # the name callers check still matches
    path = in_dir / "store-29999"
    assert path.is_file() and path.stat().st_mode & 0o077 == 0
    assert my_listeners() == before  # nothing of it listens


def test_a_client_waits_for_a_key_its_server_has_not_set_yet(in_dir):
    server = dist.TCPStore("127.0.0.1", 0, 2, True, timedelta(seconds=60))
    got = {}
    reader = threading.Thread(target=lambda: got.update(v=dist.TCPStore(
        "127.0.0.1", server.port, 2, False, timedelta(seconds=60)).get("late")))
    reader.start()
    reader.join(0.2)
    assert reader.is_alive(), "the client returned before the key was set"
    server.set("late", b"here")
    reader.join(60)
    assert got["v"] == b"here"


def test_each_rendezvous_round_starts_with_empty_stores(in_dir):
    """A restarted group must not read the last attempt's keys (pytorch/pytorch#135712), on
    the port the agent picked nor on a script's own fixed port."""
    from torch.distributed.elastic.rendezvous import api

    first = api.get_free_port()  # what torchrun's rank-0 agent calls, once per round
    fixed = dist.TCPStore("127.0.0.1", 29998, 2, True, timedelta(seconds=30))
    fixed.set("rank-0-addr", b"last round's")
    dist.TCPStore("127.0.0.1", first, 2, True, timedelta(seconds=30)).set("k", b"old")
    second = api.get_free_port()
    assert second != first
    assert [p.name for p in in_dir.iterdir()] == [f"store-{second}"]
    again = dist.TCPStore("127.0.0.1", 29998, 2, True, timedelta(seconds=30))
    assert not again.check(["rank-0-addr"])
    assert not dist.TCPStore("127.0.0.1", second, 2, False, timedelta(seconds=30)).check(["k"])
