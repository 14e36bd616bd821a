"""The dashboard's browser session (issue 35.4): the URL `alchemist ui` prints signs one
browser in, once, with an HttpOnly, SameSite=Strict session cookie; new tabs and shared
links of that browser need nothing more; the URL is then spent for every other browser;
scripts keep their Bearer token; changes still need the header and the page's origin."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from alchemist_jobs.ui import security
from tests.ui.conftest import AUTH, TEST_TOKEN, UiServer, make_app

LOCAL = "http://127.0.0.1:8740"
CHANGE = {security.CSRF_HEADER: security.CSRF_VALUE}
LOGIN = "one-time-login-token-of-the-test-9d2f"
SESSION = "/api/v1/session"


def _cookie_attributes(set_cookie: str) -> tuple[str, str, set[str]]:
    """(name, value, attributes in lower case) of one Set-Cookie header."""
    first, *attrs = [p.strip() for p in set_cookie.split(";")]
    name, _, value = first.partition("=")
    return name, value, {a.lower() for a in attrs}


def test_the_printed_url_signs_one_browser_in_once_with_a_session_cookie(tmp_path):
    import httpx

    server = UiServer(tmp_path)
    try:
        # Compared as booleans: a failure must not print a token.
        two_tokens = bool(server.login_token and server.token) and \
            server.login_token != server.token
        assert two_tokens, "the URL's token and the scripts' token are not two tokens"
        base = server.url.rstrip("/")
        with httpx.Client(base_url=base, timeout=120) as first:  # the first browser
            r = first.post(SESSION, json={"token": server.login_token}, headers=CHANGE)
            assert r.status_code == 200, r.text
            name, value, attrs = _cookie_attributes(r.headers["set-cookie"])
            assert {"httponly", "samesite=strict", "path=/"} <= attrs, attrs
            # A browser-session cookie: it ends with the browser, never written for later.
            assert not any(a.startswith(("max-age", "expires")) for a in attrs), attrs
            own_value = len(value) >= 40 and value not in (server.login_token, server.token)
            assert own_value, "the cookie's value is not a fresh secret of its own"
            # Every call of this browser (a new tab, a shared link) needs nothing else.
            assert first.get("/api/v1/runs").status_code == 200
            assert first.get("/api/v1/stacks").json()[0]["name"] == "local"

        with httpx.Client(base_url=base, timeout=120) as other:  # another browser profile
            r = other.post(SESSION, json={"token": server.login_token}, headers=CHANGE)
            assert r.status_code == 401 and "once" in r.json()["detail"]
            assert "set-cookie" not in r.headers
            assert other.get("/api/v1/runs").status_code == 401
            spent = {"Authorization": f"Bearer {server.login_token}"}
            assert other.get("/api/v1/runs", headers=spent).status_code == 401
            # Scripts keep their Bearer token; the owner may paste it into another browser.
            assert other.get("/api/v1/runs", headers=server.auth).status_code == 200
            r = other.post(SESSION, json={"token": server.token}, headers=CHANGE)
            assert r.status_code == 200 and other.get("/api/v1/runs").status_code == 200
    finally:
        assert server.stop() == 0
    shown = "".join(server.banner)
    # Each secret once, at start, to the owner's terminal; no cookie value ever.
    once = shown.count(server.login_token) == 1 and shown.count(server.token) == 1
    assert once and value not in shown, "a secret was shown twice, or a cookie at all"


@pytest.fixture
def app_client(finished_home):
    app, _ = make_app(finished_home[0], login=LOGIN)
    with TestClient(app, base_url=LOCAL) as c:
        yield c


def _signed_in(c: TestClient) -> str:
    r = c.post(SESSION, json={"token": LOGIN}, headers=CHANGE)
    assert r.status_code == 200, r.text
    name, value, _ = _cookie_attributes(r.headers["set-cookie"])
    assert name.startswith("alchemist-session")
    return value


def test_signing_in_is_a_change_the_page_alone_can_make(app_client):
    c = app_client
    assert c.post(SESSION, json={"token": LOGIN}).status_code == 403  # no header
    for cross in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                  {"Origin": "http://127.0.0.1:9999"}):  # another account's port
        assert c.post(SESSION, json={"token": LOGIN}, headers={**CHANGE, **cross}) \
            .status_code == 403
    for wrong in ("x" * len(LOGIN), LOGIN[:-1], "", TEST_TOKEN[:-1]):
        r = c.post(SESSION, json={"token": wrong}, headers=CHANGE)
        assert r.status_code == 401 and "set-cookie" not in r.headers
        assert LOGIN not in r.text and TEST_TOKEN not in r.text
    # None of the refusals spent the URL's token.
    _signed_in(c)


def test_the_session_cookie_keeps_the_csrf_protections(app_client, finished_home):
    _, run_id = finished_home
    c = app_client
    _signed_in(c)
    cancel = f"/api/v1/stacks/local/runs/{run_id}/cancel"
    assert c.get("/api/v1/runs").json()["total"] == 1
    r = c.post(cancel)
    assert r.status_code == 403 and security.CSRF_HEADER in r.json()["detail"]
    assert c.post(cancel, headers={**CHANGE, "Origin": "http://evil.example"}).status_code == 403
    # Refused before its change is looked at: a cross-site request's cookie counts for nothing.
    assert c.post(cancel, headers={**CHANGE, "Sec-Fetch-Site": "cross-site"}).status_code == 401
    # Cookies are not kept apart by port: a page on another port of this host (another
    # account's server) is same-site, so the browser sends the cookie with its requests.
    # The cookie counts only for the dashboard's own pages.
    for site in ("same-site", "cross-site"):
        r = c.get("/api/v1/runs", headers={"Sec-Fetch-Site": site})
        assert r.status_code == 401, site
    assert c.get("/api/v1/runs", headers={"Sec-Fetch-Site": "same-origin"}).status_code == 200
    assert c.post(cancel, headers={**CHANGE, "Origin": LOCAL}).status_code == 200


def test_a_made_up_or_stale_cookie_is_refused(finished_home):
    app, _ = make_app(finished_home[0], login=LOGIN)
    with TestClient(app, base_url=LOCAL) as c:
        value = _signed_in(c)
        name = next(iter(c.cookies.keys()))
    c2_app, _ = make_app(finished_home[0], login=LOGIN)  # another start of the dashboard
    with TestClient(c2_app, base_url=LOCAL) as c2:
        c2.cookies.set(name, value)
        assert c2.get("/api/v1/runs").status_code == 401
        c2.cookies.set(name, "A" * len(value))
        assert c2.get("/api/v1/runs").status_code == 401
        assert c2.get("/api/v1/runs", headers=AUTH).status_code == 200
