"""Every malformed parameter-server frame is a clean protocol error (a ConnectionError: the
handler closes that connection and goes on), never an uncaught exception: deep nesting
(RecursionError in json), a non-ASCII MAC (TypeError in hmac.compare_digest), a lone
surrogate (UnicodeEncodeError), wrong types, truncation, and seeded random bytes, on the
server's side of the handshake, the worker's side, and a frame after it."""

from __future__ import annotations

import json
import random
import socket
import struct
import threading

import pytest

from alchemist_jobs.runtime import ps_wire

SECRET = b"0123456789abcdef" * 4
CLEAN = (ConnectionError, TimeoutError)  # ProtocolError and AuthError are ConnectionErrors


def frame(header: bytes | dict, payload: bytes = b"", hlen: int | None = None,
          plen: int | None = None) -> bytes:
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("!IQ", len(h) if hlen is None else hlen,
                       len(payload) if plen is None else plen) + h + payload


def fed(data: bytes) -> tuple[socket.socket, socket.socket]:
    """(ours, theirs): `data` is all `theirs` ever sends; then it closes its side."""
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    theirs.sendall(data)
    theirs.shutdown(socket.SHUT_WR)
    return ours, theirs


def challenge_of(theirs: socket.socket) -> str:
    """The nonce of the server's challenge, as the peer reads it."""
    return ps_wire.recv(theirs)[0]["nonce"]


FRAMES = {  # after the handshake: what ps_wire.recv reads for the server's request loop
    "deep list": frame(b"[" * 5000),
    "deep object": frame(b'{"a":' * 3000),
    "deep in a field": frame(b'{"op":"pull","rank":' + b"[" * 5000),
    "not JSON": frame(b"\xff\xfe\x00"),
    "not UTF-8": frame(b'{"op":"\xff"}'),
    "a list": frame(b"[]"), "a number": frame(b"1"), "null": frame(b"null"),
    "a string": frame(b'"pull"'),
    "an integer of 5000 digits": frame(b'{"rank":' + b"9" * 5000 + b"}"),
    "cut in the head": struct.pack("!IQ", 10, 0)[:7],
    "cut in the header": frame({"op": "pull"})[:-3],
    "cut in the payload": frame({"op": "push"}, b"\0" * 8)[:-5],
    "header over the bound": frame(b"{}", hlen=ps_wire.MAX_HEADER + 1),
    "payload over the bound": frame({"op": "push"}, plen=1 << 40),
    "nothing": b"",
}


@pytest.mark.parametrize("case", sorted(FRAMES))
def test_a_malformed_frame_is_a_clean_error(case):
    ours, theirs = fed(FRAMES[case])
    with pytest.raises(CLEAN):
        ps_wire.recv(ours, max_payload=1024)


def _auth(theirs_nonce: str, **fields) -> bytes:
    return frame({"op": "auth", "mac": ps_wire._mac(SECRET, "client", theirs_nonce),
                  "nonce": "ab" * 16, **fields})


HANDSHAKES = {  # what a stranger (or a broken worker) answers the server's challenge with
    "deep nesting": lambda n: frame(b'{"op":"auth","mac":' + b"[" * 4000),
    "non-ASCII MAC": lambda n: frame({"op": "auth", "mac": "é" * 64, "nonce": "x"}),
    "lone surrogate MAC": lambda n: frame(b'{"op":"auth","mac":"\\udc80","nonce":"x"}'),
    "MAC a number": lambda n: frame({"op": "auth", "mac": 7, "nonce": "x"}),
    "MAC a list": lambda n: frame({"op": "auth", "mac": ["a"], "nonce": "x"}),
    "nonce an object": lambda n: _auth(n, nonce={"a": 1}),
    "nonce a lone surrogate, MAC right": lambda n: frame(
        ('{"op":"auth","mac":"%s","nonce":"\\ud800"}' % ps_wire._mac(SECRET, "client", n)).encode()),
    "not an object": lambda n: frame(b"[1,2]"),
    "a payload": lambda n: frame({"op": "auth"}, b"x"),
    "over HANDSHAKE_MAX": lambda n: frame(b"{}", hlen=ps_wire.HANDSHAKE_MAX + 1),
    "cut": lambda n: _auth(n)[:-4],
}


@pytest.mark.parametrize("case", sorted(HANDSHAKES))
def test_a_malformed_answer_to_the_challenge_is_a_clean_error(case):
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    # The server's challenge is sent first: read it on the other side once it is out.
    out: list[BaseException | None] = []

    def server() -> None:
        try:
            ps_wire.server_handshake(ours, SECRET)
            out.append(None)
        except BaseException as e:  # noqa: BLE001 (what escapes is what the test checks)
            out.append(e)

    t = threading.Thread(target=server)
    t.start()
    nonce = challenge_of(theirs)
    theirs.sendall(HANDSHAKES[case](nonce))
    theirs.shutdown(socket.SHUT_WR)
    t.join(timeout=30)
    assert not t.is_alive()
    assert isinstance(out[0], CLEAN), repr(out[0])


SERVER_SAYS = {  # what a worker reads from what claims to be its server
    "challenge nonce a number": [frame({"op": "challenge", "nonce": 5})],
    "challenge nonce a lone surrogate": [frame(b'{"op":"challenge","nonce":"\\ud800"}')],
    "challenge deep": [frame(b'{"op":"challenge","nonce":' + b"[" * 3000)],
    "welcome MAC non-ASCII": [frame({"op": "challenge", "nonce": "n"}),
                              frame({"op": "welcome", "mac": "ü" * 64})],
    "welcome MAC a list": [frame({"op": "challenge", "nonce": "n"}),
                           frame({"op": "welcome", "mac": ["x"]})],
    "welcome cut": [frame({"op": "challenge", "nonce": "n"}), frame({"op": "welcome"})[:-2]],
}


@pytest.mark.parametrize("case", sorted(SERVER_SAYS))
def test_a_worker_meets_a_malformed_server_with_a_clean_error(case):
    ours, theirs = fed(b"".join(SERVER_SAYS[case]))
    with pytest.raises(CLEAN):
        ps_wire.client_handshake(ours, SECRET)


def _random_frame(rng: random.Random) -> bytes:
    """Random bytes, a valid frame mutated, or JSON-ish text from a hostile alphabet."""
    kind = rng.randrange(3)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 64))
    if kind == 1:
        good = bytearray(frame({"op": "push", "rank": 0, "clock": 1, "read": 0, "lr": 0.1},
                               b"\0" * 8))
        for _ in range(rng.randrange(1, 6)):
            good[rng.randrange(len(good))] = rng.randrange(256)
        return bytes(good[:rng.randrange(len(good) + 1)])
    alphabet = ['[', ']', '{', '}', '"', ':', ',', '1', 'e9', '-', 'null', 'true', '"op"',
                '"mac"', '"nonce"', '\\ud800', '\\u00e9', 'é', '\xff', ' ', '"a"', '9' * 50]
    body = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 400)))
    if rng.random() < 0.3:
        body = "[" * rng.randrange(900, 3000) + body
    raw = body.encode("utf-8", "surrogatepass")
    return frame(raw, hlen=len(raw) if rng.random() < 0.8 else rng.randrange(0, len(raw) + 8))


def test_seeded_random_frames_are_clean_errors_or_frames():
    rng = random.Random(37)
    for i in range(400):
        data = _random_frame(rng)
        ours, theirs = fed(data)
        try:
            header, _, _ = ps_wire.recv(ours, max_payload=64, max_header=ps_wire.HANDSHAKE_MAX)
            assert isinstance(header, dict)
        except CLEAN:
            pass
        except BaseException as e:  # noqa: BLE001
            pytest.fail(f"frame {i} ({data[:60]!r}...) raised {e!r}")
        finally:
            ours.close()
            theirs.close()
