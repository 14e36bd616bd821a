"""The dashboard's web app: the JSON API under /api/v1 (with its OpenAPI schema) and the
page that is built on it, served from the package's own files."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from alchemist_jobs.errors import UserError
from alchemist_jobs.ui import models as m
from alchemist_jobs.ui import security
from alchemist_jobs.ui.backends import Backends, UnknownStack
from alchemist_jobs.ui.guard import Guard

STATIC = Path(__file__).resolve().parent / "static"
API = "/api/v1"
SORT_KEYS = (
    "created",
    "ended",
    "name",
    "run_id",
    "stack",
    "state",
    "owner",
    "progress",
    "loss",
    "samples_per_s",
    "accuracy",
    "restarts",
    "workers",
    "algorithm",
    "duration_s",
    "reason",
)
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": m.Problem, "description": text}
    for code, text in (
        (400, "bad input: one line naming the field, the value and what is accepted"),
        (401, "missing or wrong token"),
        (404, "no such stack or run"),
        (502, "the stack's cluster did not answer"),
    )
}


def create_app(
    backends: Backends,
    token: str | None,
    host: str,
    port: int,
    on_started: Callable[[], None] | None = None,
    login_token: str | None = None,
) -> FastAPI:
    """The app for `backends`; `token` is required on every API call unless it is None
    (only for a pod's loopback, --in-cluster), or the session cookie of a browser signed in
    with `login_token` (once: the one-time URL) or `token`. `on_started` is called once the
    server is ready."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        # The ended local runs' summaries are read before the server answers, so no request
        # pays for them or reads them a second time.
        backends.warm()
        if on_started is not None:
            on_started()
        yield
        backends.shutdown()

    app = FastAPI(
        title="Alchemist dashboard API",
        version="1",
        lifespan=lifespan,
        openapi_url=f"{API}/openapi.json",
        docs_url=None,
        redoc_url=None,
        description="Runs on every stack the dashboard serves: list, inspect, "
        "follow, cancel, submit. The page at / is built on it.",
    )
    # A loopback bind answers its own names only (DNS rebinding), token or not.
    hosts = security.allowed_hosts(host) if security.is_loopback(host) else None
    sessions = security.Sessions(token, login_token, port) if token is not None else None
    app.add_middleware(Guard, token=token, hosts=hosts, max_body=m.MAX_SPEC_BYTES + 4096, sessions=sessions)
    _session_route(app, sessions)
    _routes(app, backends)
    _handlers(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    return app


def _session_route(app: FastAPI, sessions: security.Sessions | None) -> None:
    @app.post(f"{API}/session", response_model=m.SignedIn, responses=_ERRORS)
    def session(body: m.SignIn) -> Response:
        """Sign this browser in: the one-time token of the URL `alchemist ui` printed (spent
        by the first browser) or the scripts' token, for an HttpOnly, SameSite=Strict session
        cookie that every tab of this browser then sends. Needs the change header."""
        if sessions is None:  # a pod's loopback: no token at all
            return Response(m.SignedIn(session=False).model_dump_json(), media_type="application/json")
        value = sessions.sign_in(body.token)
        if value is None:
            return JSONResponse(
                {
                    "detail": "token: wrong, or the one-time URL's, which signs "
                    "in one browser once and is spent; accepted: the "
                    "token `alchemist ui` printed for scripts (or "
                    "restart it for a new URL)"
                },
                status_code=401,
                headers={"www-authenticate": "Bearer"},
            )
        return Response(
            m.SignedIn(session=True).model_dump_json(),
            media_type="application/json",
            headers={"set-cookie": sessions.set_cookie(value)},
        )


def _routes(app: FastAPI, b: Backends) -> None:
    @app.get(f"{API}/stacks", response_model=list[m.StackFacts], responses=_ERRORS)
    def stacks() -> list[m.StackFacts]:
        """Each stack's facts from its output; never a kubeconfig or a token."""
        return [s.facts for s in b.stacks.values()]

    @app.get(f"{API}/runs", response_model=m.RunList, responses=_ERRORS)
    def runs(
        stack: list[str] = Query(default=[]),
        state: list[str] = Query(default=[]),
        q: str = Query("", max_length=200),
        sort: str = "created",
        order: str = "desc",
        limit: int = Query(500, ge=1, le=10000),
    ) -> Response:
        """Runs on every stack (or those named), filtered, sorted; newest first by default."""
        if sort not in SORT_KEYS:
            raise UserError(f"sort {sort!r}: accepted: one of {', '.join(SORT_KEYS)}")
        if order not in ("asc", "desc"):
            raise UserError(f"order {order!r}: accepted: asc or desc")
        for name in stack:
            b.stack(name)
        out, problems = [], []
        for name in stack or list(b.stacks):
            try:
                out += b.runs(name)
            except UserError as e:
                problems.append(m.StackProblem(stack=name, detail=str(e)))
            except Exception as e:  # an unreachable cluster must not hide the other stacks
                problems.append(m.StackProblem(stack=name, detail=_unreachable(name, e)))
        if state:
            out = [r for r in out if r.state in state]
        if q:
            needle = q.lower()
            out = [
                r
                for r in out
                if needle in r.run_id or needle in r.name.lower() or needle in (r.owner or "").lower()
            ]
        present = [r for r in out if getattr(r, sort) is not None]
        present.sort(key=lambda r: (getattr(r, sort), r.created or 0), reverse=order == "desc")
        out = present + [r for r in out if getattr(r, sort) is None]
        # Serialised here, not re-validated by FastAPI: a thousand runs are already models.
        body = m.RunList.model_construct(runs=out[:limit], total=len(out), problems=problems)
        return Response(body.model_dump_json(), media_type="application/json")

    run_path = f"{API}/stacks/{{stack}}/runs/{{run_id}}"

    @app.get(run_path, response_model=m.RunDetail, responses=_ERRORS)
    def run(stack: str, run_id: str) -> m.RunDetail:
        """One run: spec, ranks, checkpoints, links to TensorBoard and Grafana."""
        return b.detail(stack, run_id)

    @app.get(f"{run_path}/metrics", response_model=m.RunMetrics, responses=_ERRORS)
    def metrics(stack: str, run_id: str) -> m.RunMetrics:
        """Chart series; poll it to watch them grow."""
        return b.metrics(stack, run_id)

    @app.get(f"{run_path}/logs", response_model=m.LogChunk, responses=_ERRORS)
    def logs(stack: str, run_id: str, rank: int = 0, offset: int = 0) -> m.LogChunk:
        """A rank's log from `offset`; poll from `next_offset` to follow it."""
        return b.logs(stack, run_id, rank, offset)

    @app.post(f"{run_path}/cancel", response_model=m.RunSummary, responses=_ERRORS)
    def cancel(stack: str, run_id: str) -> m.RunSummary:
        """Stop the run and every process (or pod) of it."""
        return b.cancel(stack, run_id)

    @app.delete(run_path, response_model=m.RunSummary, responses=_ERRORS)
    def remove(stack: str, run_id: str, force: bool = False) -> m.RunSummary:
        """Remove an ended run and its files (local stack); `force` cancels a live one first.
        A run that has not ended is 409 without it."""
        return b.remove(stack, run_id, force)

    @app.post(f"{API}/check", response_model=m.Checked, responses=_ERRORS)
    def check(body: m.SpecBody) -> m.Checked:
        """Every check `alchemist run` makes before anything starts; starts nothing."""
        return b.checked(body)

    @app.post(f"{API}/runs", response_model=m.Submitted, status_code=201, responses=_ERRORS)
    def submit(body: m.SpecBody) -> m.Submitted:
        """Check the spec, then start it on the stack."""
        return b.submit(body)


def _unreachable(stack: str, e: Exception) -> str:
    # The exception's text is not shown: a client library's message may quote a request,
    # and with it a credential.
    return f"stack {stack}: the cluster did not answer ({type(e).__name__}); see the server log"


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(UserError)
    async def user_error(_request: Request, e: UserError) -> JSONResponse:
        text = str(e)
        code = 404 if "no such run" in text else 409 if "or --force to cancel" in text else 400
        return JSONResponse({"detail": text}, status_code=code)

    @app.exception_handler(UnknownStack)
    async def no_stack(_request: Request, e: UnknownStack) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=404)

    @app.exception_handler(Exception)
    async def failed(_request: Request, e: Exception) -> JSONResponse:
        # Only the type: a client library's message may quote a request and its credential.
        mod = type(e).__module__
        if mod.startswith(("alchemist_jobs.kubernetes", "kubernetes", "urllib3", "botocore")):
            return JSONResponse(
                {"detail": f"the cluster did not answer ({type(e).__name__}); see the server log"},
                status_code=502,
            )
        return JSONResponse(
            {"detail": f"internal error ({type(e).__name__}); see the server log"}, status_code=500
        )

    from fastapi.exceptions import RequestValidationError

    @app.exception_handler(RequestValidationError)
    async def bad_request(_request: Request, e: RequestValidationError) -> JSONResponse:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"] if p != "body") or "body"
        value = err.get("input")
        shown = (
            repr(value)
            if isinstance(value, (str, int, float)) and len(repr(value)) < 60
            else type(value).__name__
        )
        return JSONResponse(
            {"detail": f"{where}: {shown} is invalid; accepted: {err['msg'][0].lower() + err['msg'][1:]}"},
            status_code=400,
        )
