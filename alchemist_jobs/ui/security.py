"""Who may call the API: only a holder of the token generated at start (compared in constant
time), or a browser the one-time URL signed in (a session cookie), on loopback too, since
every account of the machine reaches loopback; loopback binds answer their own Host names
only; state changes only from the dashboard's own origin."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading

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
    return hmac.compare_digest(authorization[len("Bearer ") :].encode(), expected.encode())


class Sessions:
    """The browsers signed in. The URL `alchemist ui` prints carries a one-time sign-in token:
    the first browser to open it trades it for a session cookie, and it is then spent for
    every other browser. The scripts' token (Bearer) signs a browser in as often as its owner
    pastes it. A session lives as long as this server and the browser (no expiry written,
    so the browser forgets it when it closes); only hashes of the cookies are kept."""

    MAX = 256  # sessions kept; the oldest is dropped for a newcomer

    def __init__(self, token: str, login_token: str | None, port: int):
        self._token, self._login = token, login_token
        self._ids: dict[bytes, None] = {}  # sha256 of each cookie, oldest first
        self._lock = threading.Lock()
        # Cookies are not kept apart by port: two dashboards of one host need two names.
        self.cookie = f"alchemist-session-{port}"

    def sign_in(self, presented: str) -> str | None:
        """A new session's cookie value for the one-time token (spending it) or the scripts'
        token; None for anything else, or for a one-time token already used."""
        given = presented.encode()
        with self._lock:
            if self._login is not None and hmac.compare_digest(given, self._login.encode()):
                self._login = None  # spent: the URL signs in no other browser
            elif not hmac.compare_digest(given, self._token.encode()):
                return None
            value = secrets.token_urlsafe(TOKEN_BYTES)
            self._ids[_digest(value)] = None
            while len(self._ids) > self.MAX:
                self._ids.pop(next(iter(self._ids)))
            return value

    def valid(self, value: str | None) -> bool:
        if not value:
            return False
        with self._lock:
            return _digest(value) in self._ids

    def set_cookie(self, value: str) -> str:
        """The Set-Cookie header: never readable by a script (HttpOnly), never sent by another
        site's page (SameSite=Strict), gone when the browser closes (no Max-Age)."""
        return f"{self.cookie}={value}; Path=/; HttpOnly; SameSite=Strict"

    def cookie_value(self, header: str | None) -> str | None:
        """This dashboard's session cookie in a Cookie header, or None."""
        for part in (header or "").split(";"):
            name, sep, value = part.strip().partition("=")
            if sep and name == self.cookie:
                return value
        return None


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


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
        rest = header[end + 1 :]
        if end < 0 or rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return header
        return header[: end + 1]
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
