"""The parameter server's wire protocol and shard layout, shared by server and workers.

A message is one frame: `!IQ` (header length, payload length), a JSON header, then the
payload: raw little-endian float32 bytes of one shard's tensors, concatenated in layout
order. Requests and replies have the same shape. Nothing is pickled, so a peer can never
make the other run code.

Before any request, both sides prove they hold the run's secret (`run_secret`) without
sending it: the server sends a random challenge, the client answers with
HMAC-SHA256(secret, "client" + challenge) and its own challenge, and the server answers
that with HMAC-SHA256(secret, "server" + challenge) (so a worker never trusts a stranger's
parameters either). Until then a frame may carry at most HANDSHAKE_MAX header bytes and no
payload, and the whole exchange must end within HANDSHAKE_TIMEOUT_S (a peer that trickles a
byte at a time gets no more); afterwards the server bounds every payload by its shard's size
before reading it.
A hand-written protocol rather than gRPC: bench/ps_transport.py measures it faster on
model-sized payloads (docs/paradigms.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from alchemist_jobs import environment as E

HEAD = struct.Struct("!IQ")
MAX_HEADER = 1 << 20
HANDSHAKE_MAX = 4096
HANDSHAKE_TIMEOUT_S = 10.0
SECRET_FILE = "ps.secret"


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
            raise ValueError(f"{E.PS_ADDRS.name}: {item!r} is not HOST:PORT")
        out.append((host, int(port)))
    if not out:
        raise ValueError(
            f"{E.PS_ADDRS.name} is empty; the launcher sets it for algorithms that use a parameter server"
        )
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
    return vec.contiguous().numpy().data.cast("B")


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


def _recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytearray:
    buf = bytearray(n)
    _recv_into(sock, memoryview(buf), deadline)
    return buf


def _recv_into(sock: socket.socket, view: memoryview, deadline: float | None = None) -> None:
    got, n = 0, len(view)
    while got < n:
        if deadline is not None:  # the time left, not a fresh timeout per read
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the peer did not finish in time")
            sock.settimeout(left)
        r = sock.recv_into(view[got:], n - got)
        if r == 0:
            raise ConnectionError("peer closed the connection")
        got += r


def recv(
    sock: socket.socket,
    max_payload: int | None = None,
    max_header: int = MAX_HEADER,
    into: memoryview | None = None,
    deadline: float | None = None,
) -> tuple[dict[str, Any], bytearray | memoryview, int]:
    """Receive one frame: (header, payload, bytes taken off the wire). Sizes beyond the
    bounds are refused before anything is allocated for them; `deadline` (time.monotonic())
    bounds the whole frame. A payload of exactly len(into) bytes lands in `into` (a
    worker's pinned answer buffer), which is returned."""
    hlen, plen = HEAD.unpack(_recv_exact(sock, HEAD.size, deadline))
    if hlen > max_header:
        raise ProtocolError(f"header of {hlen} bytes: not a parameter-server frame")
    if max_payload is not None and plen > max_payload:
        raise ProtocolError(f"payload of {plen} bytes exceeds the {max_payload} allowed")
    try:
        header = json.loads(_recv_exact(sock, hlen, deadline))
        # Text that cannot be UTF-8 (a lone surrogate, legal in JSON) would fail wherever a
        # field is encoded later (a MAC, a log line): refused here, with the rest.
        json.dumps(header, ensure_ascii=False).encode()
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python's stack
        raise ProtocolError("header is not JSON text: not a parameter-server frame") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    if into is not None and plen and plen == len(into):
        _recv_into(sock, into, deadline)
        return header, into, HEAD.size + hlen + plen
    payload = _recv_exact(sock, plen, deadline) if plen else bytearray()
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


# --- the run's secret and the handshake ---------------------------------------------------


def run_secret(run_dir: Path, environ: dict[str, str] | None = None) -> bytes:
    """The secret every process of this run shares: ALCHEMIST_PS_SECRET where the launcher
    sets one, else `<run dir>/ps.secret` (0600), created by whichever process needs it
    first; the run directory is readable by the run's own identity only."""
    env = os.environ if environ is None else environ
    if E.PS_SECRET.get(env):
        return E.PS_SECRET.require(env).encode()
    path = Path(run_dir) / SECRET_FILE
    if not path.exists():
        tmp = path.with_name(f".{SECRET_FILE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)  # atomic and exclusive: one secret, whoever comes first
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    return path.read_text().strip().encode()


def _mac(secret: bytes, role: str, nonce: str) -> str:
    return hmac.new(secret, f"{role}|{nonce}".encode(), hashlib.sha256).hexdigest()


def _mac_ok(mac: Any, secret: bytes, role: str, nonce: str) -> bool:
    """Whether the peer's `mac` answers `nonce`, in constant time; any other type or text is
    a wrong answer (compare_digest refuses non-ASCII str with TypeError, so bytes compared)."""
    return isinstance(mac, str) and hmac.compare_digest(mac.encode(), _mac(secret, role, nonce).encode())


class AuthError(ConnectionError):
    """The peer does not hold the run's secret."""


def server_handshake(sock: socket.socket, secret: bytes) -> None:
    """Challenge a new connection; AuthError unless it proves the secret, TimeoutError
    unless it does so within HANDSHAKE_TIMEOUT_S in all."""
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
    sock.settimeout(HANDSHAKE_TIMEOUT_S)  # a silent peer must not hold a server thread
    nonce = secrets.token_hex(16)
    send(sock, {"op": "challenge", "nonce": nonce})
    h, _, _ = recv(sock, max_payload=0, max_header=HANDSHAKE_MAX, deadline=deadline)
    mac, theirs = h.get("mac"), h.get("nonce")
    if h.get("op") != "auth" or not isinstance(theirs, str) or not _mac_ok(mac, secret, "client", nonce):
        send(sock, {"error": "authentication failed"})
        raise AuthError("client failed the challenge")
    send(sock, {"op": "welcome", "mac": _mac(secret, "server", theirs)})
    sock.settimeout(None)


def client_handshake(sock: socket.socket, secret: bytes) -> int:
    """Answer the server's challenge and check its answer to ours; returns wire bytes."""
    h, _, got = recv(sock, max_payload=0, max_header=HANDSHAKE_MAX)
    if h.get("op") != "challenge" or not isinstance(h.get("nonce"), str):
        raise AuthError(f"expected a challenge, got {h.get('op') or h.get('error')!r}")
    mine = secrets.token_hex(16)
    sent = send(sock, {"op": "auth", "mac": _mac(secret, "client", h["nonce"]), "nonce": mine})
    w, _, got2 = recv(sock, max_payload=0, max_header=HANDSHAKE_MAX)
    if w.get("op") != "welcome":
        raise AuthError(f"parameter server refused this worker: {w.get('error', w)}")
    if not _mac_ok(w.get("mac"), secret, "server", mine):
        raise AuthError("the parameter server does not hold this run's secret")
    return sent + got + got2
