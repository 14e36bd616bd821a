"""The parameter server's wire protocol and shard layout, shared by server and workers.

A message is one frame: `!IQ` (header length, payload length), a JSON header, then the
payload: raw little-endian float32 bytes of one shard's tensors, concatenated in layout
order. Requests and replies have the same shape. Nothing is pickled, so a peer can never
make the other run code.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any, Sequence

import torch

HEAD = struct.Struct("!IQ")
MAX_HEADER = 1 << 20


class ProtocolError(ConnectionError):
    """The peer sent something that is not a frame of this protocol."""


def shard_layout(numels: Sequence[int], shards: int) -> list[list[int]]:
    """Assign whole parameter tensors to shards, largest first to the least-loaded shard
    (ties: lowest shard), so every shard carries about the same bytes; each shard's tensor
    indices stay in model order. Whole tensors keep per-layer optimizers (LARS) exact."""
    load = [0] * shards
    owner: dict[int, int] = {}
    for i in sorted(range(len(numels)), key=lambda i: (-numels[i], i)):
        k = min(range(shards), key=lambda s: (load[s], s))
        owner[i] = k
        load[k] += numels[i]
    return [[i for i in range(len(numels)) if owner[i] == k] for k in range(shards)]


def parse_addrs(text: str) -> list[tuple[str, int]]:
    """`host:port,host:port` (shard order) -> [(host, port), ...]."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"ALCHEMIST_PS_ADDRS: {item!r} is not HOST:PORT")
        out.append((host, int(port)))
    if not out:
        raise ValueError("ALCHEMIST_PS_ADDRS is empty; the launcher sets it for algorithms "
                         "that use a parameter server")
    return out


def flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One contiguous float32 vector of the tensors (zeros stand in for missing ones)."""
    if not tensors:
        return torch.empty(0, dtype=torch.float32)
    return torch.cat([t.detach().reshape(-1).to(torch.float32) for t in tensors])


def as_bytes(vec: torch.Tensor) -> memoryview:
    """The vector's bytes; it must be in host memory (stage GPU tensors first)."""
    if vec.device.type != "cpu":
        raise ValueError(f"ps_wire.as_bytes: a {vec.device} tensor; copy it to host memory first")
    return memoryview(vec.contiguous().numpy()).cast("B")


def from_bytes(buf: bytearray | memoryview) -> torch.Tensor:
    if len(buf) == 0:
        return torch.empty(0, dtype=torch.float32)
    return torch.frombuffer(buf, dtype=torch.float32)


def send(sock: socket.socket, header: dict[str, Any], payload: memoryview | bytes = b"") -> int:
    """Send one frame; returns the bytes put on the wire."""
    h = json.dumps(header, separators=(",", ":")).encode()
    sock.sendall(HEAD.pack(len(h), len(payload)) + h)
    if len(payload):
        sock.sendall(payload)
    return HEAD.size + len(h) + len(payload)


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        r = sock.recv_into(view[got:], n - got)
        if r == 0:
            raise ConnectionError("peer closed the connection")
        got += r
    return buf


def recv(sock: socket.socket) -> tuple[dict[str, Any], bytearray, int]:
    """Receive one frame: (header, payload, bytes taken off the wire)."""
    hlen, plen = HEAD.unpack(_recv_exact(sock, HEAD.size))
    if hlen > MAX_HEADER:
        raise ProtocolError(f"header of {hlen} bytes: not a parameter-server frame")
    header = json.loads(_recv_exact(sock, hlen))
    payload = _recv_exact(sock, plen) if plen else bytearray()
    return header, payload, HEAD.size + hlen + plen


def connect(host: str, port: int, deadline: float) -> socket.socket:
    """Connect, retrying with back-off until `deadline` (time.monotonic()): a server may be
    starting or restarting from its checkpoint."""
    delay, last = 0.05, None
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=10)
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # headers are tiny
            return sock
        except OSError as e:
            last = e
        if time.monotonic() + delay > deadline:
            raise ConnectionError(f"parameter server {host}:{port} unreachable: {last}")
        time.sleep(delay)
        delay = min(delay * 2, 1.0)
