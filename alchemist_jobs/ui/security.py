"""Who may call the API: only a holder of the token generated at start (compared in constant
time), on loopback too, since every account of the machine reaches loopback; loopback binds
answer their own Host names only; state changes only from the dashboard's own origin."""

from __future__ import annotations

import hmac
import ipaddress
import secrets

# State-changing requests must carry this header. A cross-site form or a plain
# cross-origin fetch cannot set it without a CORS preflight, which this server never grants.
CSRF_HEADER = "X-Alchemist-Request"
CSRF_VALUE = "1"
TOKEN_BYTES = 32


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_ok(expected: str | None, authorization: str | None) -> bool:
    """`Authorization: Bearer <token>`, compared in constant time; any value when no token
    is required (only a pod's loopback, --in-cluster)."""
    if expected is None:
        return True
    if not authorization or not authorization.startswith("Bearer "):
        return False
    return hmac.compare_digest(authorization[len("Bearer "):].encode(), expected.encode())


def allowed_hosts(host: str) -> set[str]:
    """Host names a loopback bind answers: its own names only, so a page on another site
    cannot reach it through DNS rebinding (a name of theirs that resolves to 127.0.0.1).
    Any port: `kubectl port-forward 9000:8740` reaches the in-cluster dashboard as
    127.0.0.1:9000."""
    return {"127.0.0.1", "localhost", "[::1]", host if ":" not in host else f"[{host}]"}


def host_name(header: str) -> str:
    """The name part of a Host header (`[::1]:8740` -> `[::1]`, `localhost:80` ->
    `localhost`); anything not of the form NAME or NAME:PORT comes back whole."""
    if header.startswith("["):
        end = header.find("]")
        rest = header[end + 1:]
        if end < 0 or rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return header
        return header[:end + 1]
    name, sep, port = header.rpartition(":")
    return name if sep and port.isdigit() else header


def same_origin(origin: str | None, host_header: str | None) -> bool:
    """A state change must come from a page this server served: the browser's Origin, when
    it sends one, names this host and port."""
    if origin is None:
        return True  # not a browser's cross-origin request (curl, the CLI)
    if not host_header:
        return False
    return origin in (f"http://{host_header}", f"https://{host_header}")
