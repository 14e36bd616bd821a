"""The parameter server trusts only its run (issue 17.4): a challenge before any request,
bounded rank, payload size and connection count, non-finite updates refused; and after
every attack the run still trains to the end. Attacks come over loopback, as real sockets."""

from __future__ import annotations

import math
import socket
import threading
import time
from pathlib import Path

import pytest
import torch

from alchemist_jobs.rundir import RunDir, read_json
from alchemist_jobs.runtime import parameter_server, ps_wire, trainer
from alchemist_jobs.runtime.tasks import load_task
from alchemist_jobs.spec import JobSpec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def bare_server(tmp_path: Path, monkeypatch):
    """A parameter server as the launcher starts it: no model until rank 0's hello."""
    for k, v in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0").items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("ALCHEMIST_SLOW_RANKS", raising=False)
    monkeypatch.delenv("ALCHEMIST_PS_SECRET", raising=False)
    spec = JobSpec(
        name="ps-sec",
        task={"builtin": "digits"},
        algorithm={"name": "async"},
        metrics=False,
        hyper={"steps": 20, "lr": 0.05, "batch_size": 32},
        checkpoint={"every_steps": 10},
    )
    run = RunDir(tmp_path / "runs" / "ps-sec")
    run.create()
    run.spec.write_text(spec.to_yaml())
    port = _free_port()
    monkeypatch.setenv("ALCHEMIST_PS_ADDRS", f"127.0.0.1:{port}")
    t = threading.Thread(
        target=parameter_server.serve, daemon=True, args=(spec, run, 0, port), kwargs=dict(bind="127.0.0.1")
    )
    t.start()
    deadline = time.monotonic() + 60
    while not (run.workers / "server-0.json").exists():
        assert t.is_alive() and time.monotonic() < deadline
        time.sleep(0.05)
    rec = read_json(run.workers / "server-0.json")
    srv = dict(spec=spec, run=run, port=port, thread=t, root=tmp_path, rec=rec)
    # The job's real model, as rank 0's hello gives it to the shard (one server: all of it).
    named = list(load_task(spec, tmp_path).model.named_parameters())
    srv.update(
        names=[n for n, _ in named], tensors=[p for _, p in named], numel=sum(p.numel() for _, p in named)
    )
    yield srv


@pytest.fixture
def server(bare_server):
    """The server once rank 0's hello gave it the job's model."""
    c = _authed(bare_server)
    assert "version" in _hello(c, bare_server, rank=0)
    return dict(bare_server, rank0=c)


def _hello(
    sock: socket.socket, srv: dict, rank: int, shapes: list | None = None, payload: torch.Tensor | None = None
) -> dict:
    """A worker's hello: rank 0's carries its model (names, shapes, values)."""
    header = {"op": "hello", "rank": rank, "names": srv["names"]}
    body = b""
    if rank == 0:
        header["shapes"] = shapes if shapes is not None else [list(t.shape) for t in srv["tensors"]]
        body = ps_wire.as_bytes(payload if payload is not None else ps_wire.flat(srv["tensors"]))
    ps_wire.send(sock, header, body)
    return ps_wire.recv(sock)[0]


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    return s


def _authed(srv: dict, secret: bytes | None = None) -> socket.socket:
    s = _connect(srv["port"])
    ps_wire.client_handshake(s, secret or ps_wire.run_secret(srv["run"].path))
    return s


def _closed(s: socket.socket) -> bool:
    """The server hung up (after at most an error frame)."""
    try:
        while True:
            if not s.recv(1 << 16):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_an_unauthenticated_client_gets_nothing(server):
    s = _connect(server["port"])
    h, _, _ = ps_wire.recv(s)
    assert h["op"] == "challenge"
    ps_wire.send(s, {"op": "pull", "rank": 0})  # skips the handshake
    h, payload, _ = ps_wire.recv(s)
    assert h == {"error": "authentication failed"} and len(payload) == 0
    assert _closed(s)


def test_a_wrong_secret_is_refused_and_a_fake_server_detected(server):
    with pytest.raises(ps_wire.AuthError, match="refused"):
        _authed(server, secret=b"not-the-run-secret")


def test_oversized_frames_are_refused_before_allocation(server):
    s = _connect(server["port"])
    ps_wire.recv(s)
    s.sendall(ps_wire.HEAD.pack(12, 1 << 30))  # a 1 GiB payload announced in the handshake
    assert _closed(s)
    s = _authed(server)
    s.sendall(ps_wire.HEAD.pack(40, 1 << 30) + b"{}")  # ... and after it
    assert _closed(s)


def test_forged_rank_and_non_finite_updates_are_refused_and_nothing_applied(server):
    s = _authed(server)
    ps_wire.send(s, {"op": "pull", "rank": 0})
    _, before, _ = ps_wire.recv(s)
    n = server["numel"]
    for header, payload in (
        ({"op": "done", "rank": 7}, b""),  # a rank the job does not have
        (
            {"op": "push", "rank": 0, "clock": 1, "lr": 0.1, "read": 0},
            ps_wire.as_bytes(torch.full((n,), math.nan)),
        ),
        ({"op": "push", "rank": 0, "clock": 1, "lr": math.inf, "read": 0}, ps_wire.as_bytes(torch.zeros(n))),
        ({"op": "push", "rank": 0, "clock": 1, "lr": 0.1, "read": 0}, ps_wire.as_bytes(torch.zeros(n - 1))),
    ):  # not the shard's size
        c = _authed(server)
        ps_wire.send(c, header, payload)
        h, _, _ = ps_wire.recv(c)
        assert "error" in h, header
        assert _closed(c)
    ps_wire.send(s, {"op": "pull", "rank": 0})
    h, after, _ = ps_wire.recv(s)
    assert h["version"] == 0 and after == before  # nothing was applied


def test_authenticated_connections_are_bounded(server):
    limit = 2 * server["spec"].world_size + 4
    held = [_authed(server) for _ in range(limit)]
    extra = _connect(server["port"])
    with pytest.raises(ConnectionError):  # challenged, answered, then refused: no slot left
        ps_wire.client_handshake(extra, ps_wire.run_secret(server["run"].path))
        ps_wire.send(extra, {"op": "pull", "rank": 0})
        ps_wire.recv(extra)
    for c in held:
        c.close()


def test_after_the_attacks_the_run_trains_to_the_end(server):
    test_an_unauthenticated_client_gets_nothing(server)
    test_forged_rank_and_non_finite_updates_are_refused_and_nothing_applied(server)
    result = trainer.train(server["spec"], server["run"], server["root"])
    server["thread"].join(60)
    assert not server["thread"].is_alive()  # the server stopped once its worker was done
    assert result["steps"] == 20 and math.isfinite(result["final_loss"])


def test_only_rank_0s_well_formed_hello_gives_the_shard_its_model(bare_server):
    """The server builds no model: rank 0's hello brings it. Before that a request is
    refused, and a hello whose shapes do not describe its payload (or whose values are not
    finite) is refused without initialising anything."""
    c = _authed(bare_server)
    ps_wire.send(c, {"op": "pull", "rank": 0})
    assert "before rank 0's hello" in ps_wire.recv(c)[0]["error"]
    n = bare_server["numel"]
    shapes = [list(t.shape) for t in bare_server["tensors"]]
    for bad, payload in (
        ([[shapes[0][0] + 1, *shapes[0][1:]], *shapes[1:]], torch.zeros(n)),
        ([["x"], *shapes[1:]], torch.zeros(n)),  # not dimensions
        (shapes, torch.full((n,), math.nan)),
    ):  # non-finite values
        c = _authed(bare_server)
        assert "error" in _hello(c, bare_server, rank=0, shapes=bad, payload=payload)
        assert _closed(c)

    first = [p.detach().clone() + 1.0 for p in bare_server["tensors"]]
    c = _authed(bare_server)
    assert _hello(c, bare_server, rank=0, payload=ps_wire.flat(first))["version"] == 0
    ps_wire.send(c, {"op": "pull", "rank": 0})
    _, got, _ = ps_wire.recv(c)
    assert torch.equal(ps_wire.from_bytes(got), ps_wire.flat(first))  # rank 0's values
    # A later hello of rank 0 (a restarted worker) keeps the server's values.
    again = _authed(bare_server)
    assert "version" in _hello(again, bare_server, rank=0)
    ps_wire.send(again, {"op": "pull", "rank": 0})
    _, got, _ = ps_wire.recv(again)
    assert torch.equal(ps_wire.from_bytes(got), ps_wire.flat(first))
