"""The API's gate, in front of every request: Host names (loopback binds), the token or a
browser's session cookie, same-origin state changes, a cap on request bodies, and security
headers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from alchemist_jobs.ui import security

STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}
# Where a browser trades the one-time token (or the scripts' one) for a session cookie: the
# one API path that needs neither, and a change like any other (header, same origin).
SESSION_PATH = "/api/v1/session"
# Fetch metadata of the dashboard's own page (or the owner typing a URL): a session cookie
# counts only then. A page on another port of this host is "same-site" and would otherwise
# be sent the cookie by the browser, since cookies are not kept apart by port.
OWN_PAGE = ("same-origin", "none")
# The page runs only its own script and styles; it may not be framed by another site.
HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; "
        b"base-uri 'none'; form-action 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class Guard:
    """ASGI middleware. `hosts` is the set of Host headers answered (None: any, beyond
    loopback); `token` None means no token (only a pod's loopback, --in-cluster)."""

    def __init__(
        self,
        app: Callable,
        token: str | None,
        hosts: set[str] | None,
        max_body: int,
        sessions: security.Sessions | None = None,
    ):
        self.app, self.token, self.hosts, self.max_body = app, token, hosts, max_body
        self.sessions = sessions

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refused = self._refusal(scope, headers)
        if refused is not None:
            await _reply(send, *refused)
            return
        received, started, refused_body = 0, False, False

        async def limited_receive() -> dict:
            # Past the cap, answer 413 at once and tell the app the client went away: the
            # app's own reply (if any) is then dropped.
            nonlocal received, refused_body
            if refused_body:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    refused_body = True
                    if not started:
                        await _reply(send, 413, self._too_large())
                    return {"type": "http.disconnect"}
            return message

        async def send_with_headers(message: dict) -> None:
            nonlocal started
            if refused_body:
                return
            if message["type"] == "http.response.start":
                started = True
                message = dict(message, headers=list(message.get("headers", [])) + HEADERS)
            await send(message)

        await self.app(scope, limited_receive, send_with_headers)

    def _authenticated(self, headers: dict[str, str]) -> bool:
        if security.token_ok(self.token, headers.get("authorization")):
            return True
        if self.sessions is None or headers.get("sec-fetch-site", "none") not in OWN_PAGE:
            return False
        return self.sessions.valid(self.sessions.cookie_value(headers.get("cookie")))

    def _too_large(self) -> str:
        return (
            f"request body: over {self.max_body} bytes; accepted: a job spec of at most {self.max_body} bytes"
        )

    def _refusal(self, scope: dict, headers: dict[str, str]) -> tuple[int, str] | None:
        host = headers.get("host", "")
        if self.hosts is not None and security.host_name(host) not in self.hosts:
            return 421, (
                f"Host {host[:100]!r}: this dashboard answers only {', '.join(sorted(self.hosts))} (any port)"
            )
        if not scope["path"].startswith("/api/"):
            return None
        signing_in = scope["path"] == SESSION_PATH and scope["method"] == "POST"
        if not signing_in and not self._authenticated(headers):
            return 401, (
                "Authorization: missing or wrong token; accepted: `Authorization: "
                "Bearer <token>` with the token `alchemist ui` printed at start, or "
                "the session of a browser its one-time URL signed in"
            )
        if scope["method"] in STATE_CHANGING:
            if headers.get(security.CSRF_HEADER.lower()) != security.CSRF_VALUE:
                return 403, (
                    f"{security.CSRF_HEADER}: missing; accepted: the header "
                    f"`{security.CSRF_HEADER}: {security.CSRF_VALUE}` on every change"
                )
            if not security.same_origin(headers.get("origin"), host) or headers.get(
                "sec-fetch-site", "same-origin"
            ) not in ("same-origin", "none"):
                return 403, "Origin: another site's page may not change anything here"
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return 413, self._too_large()
        return None


async def _reply(send: Callable, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers + HEADERS})
    await send({"type": "http.response.body", "body": body})
