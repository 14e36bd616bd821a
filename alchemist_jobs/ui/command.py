"""`alchemist ui`: serve the dashboard for the local stack and any cluster stack."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from alchemist_jobs import environment as E
from alchemist_jobs.commands import command
from alchemist_jobs.commands.stack import complete_stack
from alchemist_jobs.errors import UserError
from alchemist_jobs.stack_kinds import kind_of
from alchemist_jobs.ui import security

DEFAULT_PORT = 8740


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "ui",
        "serve the web dashboard and its JSON API (/api/v1)",
        ["alchemist ui", "alchemist ui --stack local --stack dev", "alchemist ui --port 0"],
    )
    p.add_argument(
        "--stack",
        dest="stacks",
        action="append",
        default=[],
        metavar="STACK",
        help="a stack to show (repeatable; default: local)",
    ).completer = complete_stack  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument(
        "--outputs",
        action="append",
        default=[],
        metavar="STACK=FILE",
        help="a JSON file with a stack's `alchemist` output, instead of Pulumi (repeatable)",
    )
    p.add_argument(
        "--home",
        type=Path,
        default=None,
        help=f"local stack's shared-file-system root (default: ${E.HOME.name} or ~/.alchemist)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1); every API call needs the token "
        "printed at start, on loopback too: any account of this machine "
        "reaches loopback",
    )
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)"
    )
    p.add_argument(
        "--spec-dir",
        type=Path,
        default=None,
        help="directory submitted specs are relative to, as a spec file's own "
        "directory is for `alchemist run` (default: the current directory)",
    )
    for service, title, port in (("prometheus", "Prometheus", 9090), ("tensorboard", "TensorBoard", 6006)):
        p.add_argument(
            f"--{service}-url",
            default=None,
            metavar="URL",
            help=f"local stack: link runs to this {title} (e.g. "
            f"http://127.0.0.1:{port} from `alchemist monitor`)",
        )
    p.add_argument(
        "--in-cluster",
        action="store_true",
        help="run inside a pod of a cluster stack: reach the API server with the "
        "pod's ServiceAccount (see docs/dashboard.md)",
    )
    p.add_argument(
        "--manifests",
        action="store_true",
        help="print the in-cluster dashboard's manifests for the (one) cluster "
        "--stack as YAML, for `kubectl apply -f -`, and exit",
    )
    p.set_defaults(func=cmd_ui)


def _outputs(pairs: list[str]) -> dict[str, Path]:
    out = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--outputs {pair!r}: accepted: STACK=FILE, e.g. --outputs dev=dev-outputs.json")
        out[name] = Path(path)
    return out


def _print_manifests(args: argparse.Namespace) -> int:
    import yaml

    from alchemist_jobs.stacks import resolve
    from alchemist_jobs.ui.manifests import build

    if len(args.stacks) != 1 or kind_of(args.stacks[0]).runs_here:
        raise UserError(
            f"--manifests --stack {' '.join(args.stacks) or '(none)'}: accepted: "
            "exactly one cluster stack (the local stack runs no pods)"
        )
    (stack,) = args.stacks
    out = resolve(stack, _outputs(args.outputs).get(stack))
    sys.stdout.write(yaml.safe_dump_all(build(out), sort_keys=False))
    return 0


def _local_links(args: argparse.Namespace):
    from alchemist_jobs.ui.models import Links

    for flag, url in (("--prometheus-url", args.prometheus_url), ("--tensorboard-url", args.tensorboard_url)):
        if url is not None and not url.startswith(("http://", "https://")):
            raise UserError(f"{flag} {url!r}: accepted: an http:// or https:// URL")
    return Links(prometheus=args.prometheus_url, tensorboard=args.tensorboard_url)


def _bind(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise UserError(f"--port {port}: accepted: 0 to 65535")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise UserError(
            f"--host {host!r}: not an address of this machine; accepted: an IP "
            "address or host name, e.g. 127.0.0.1 or 0.0.0.0"
        ) from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise UserError(
            f"--host {host} --port {port}: cannot listen there ({e.strerror}); "
            "accepted: a free port (or --port 0)"
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def cmd_ui(args: argparse.Namespace) -> int:
    try:
        import uvicorn  # noqa: F401  (the `ui` extra)
    except ImportError:
        raise UserError("alchemist ui: needs the `ui` extra; accepted: pip install 'alchemist[ui]'") from None
    from alchemist_jobs.ui.backends import Backends

    if args.manifests:
        return _print_manifests(args)
    # Everything is checked before the port opens: a bad stack is one line and exit 2.
    backends = Backends(
        args.stacks or ["local"],
        home=args.home,
        outputs=_outputs(args.outputs),
        spec_dir=args.spec_dir,
        in_cluster=args.in_cluster,
        local_links=_local_links(args),
    )
    sock = _bind(args.host, args.port)
    port = sock.getsockname()[1]
    # Loopback is not private on a machine several people share: every other account can
    # reach it. Only a pod's loopback (--in-cluster) is reached by port-forward alone, which
    # the cluster's RBAC already grants to the team and no one else (ui/manifests.py).
    in_pod = args.in_cluster and security.is_loopback(args.host)
    token = None if in_pod else security.new_token()
    # The URL's token is another one: it signs one browser in, once (ui/security.py).
    login = None if in_pod else security.new_token()
    return _serve(backends, sock, args.host, port, token, login)


def _serve(backends, sock: socket.socket, host: str, port: int, token: str | None, login: str | None) -> int:
    import uvicorn

    from alchemist_jobs.ui.app import create_app

    shown = f"[{host}]" if ":" in host else host
    stacks = ", ".join(backends.stacks)

    def banner() -> None:
        # Printed once the server is ready (and Ctrl-C is a clean stop), for people and for
        # scripts that wait for it.
        if token is None:
            print(f"dashboard: http://{shown}:{port}/  (stacks: {stacks})", file=sys.stderr, flush=True)
            return
        # Shown once, here, to the terminal of who started it, in one write; the fragment
        # (#token=) never reaches a server log or a Referer. The first browser to open the
        # URL trades its token for a session cookie (every tab of that browser is then signed
        # in) and spends it; scripts use the other token.
        print(
            f"dashboard: http://{shown}:{port}/#token={login}  (stacks: {stacks})\n"
            f"dashboard: open the URL above once: it signs in one browser, then is spent; "
            f"scripts (and another browser) use `Authorization: Bearer {token}`; neither "
            f"token is shown again",
            file=sys.stderr,
            flush=True,
        )

    app = create_app(backends, token, host, port, on_started=banner, login_token=login)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C after its graceful shutdown
        pass
    print("dashboard: stopped", file=sys.stderr, flush=True)
    return 0
