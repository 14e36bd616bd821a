"""TensorBoard for `alchemist monitor`, asking every request for the monitor's login.

TensorBoard has no authentication of its own, and any account of a machine reaches its
loopback ports. So the monitor runs TensorBoard's own WSGI application behind HTTP basic auth
(the same login as its Prometheus: user and password file in `<home>/monitor/`) in this
process: no unauthenticated listener exists, not even on loopback, and a browser asks once.

    python -m alchemist_jobs.monitor_tensorboard --logdir DIR --port PORT \
        --username USER --password-file FILE

Two of TensorBoard's defaults would open doors beside the login, and are closed here: the
Rust data server (`--load_fast`) is a gRPC listener on loopback with no authentication, so the
Python reader is used; and TensorBoard's `.tensorboard-info` folder under /tmp (made 0777,
naming the port and logdir of every TensorBoard) is not written.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import sys
from pathlib import Path

REALM = "alchemist monitor"


def basic_auth(app, username: str, password: str):
    """`app` answering only requests that carry `username:password` (401 otherwise)."""
    want = f"{username}:{password}".encode()

    def guarded(environ, start_response):
        given = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _, token = given.partition(" ")
        try:
            pair = base64.b64decode(token.strip(), validate=True)
        except ValueError:
            pair = b""
        if scheme.lower() == "basic" and hmac.compare_digest(pair, want):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [
                ("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"'),
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", "25"),
            ],
        )
        return [b"log in: alchemist monitor"]

    return guarded


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m alchemist_jobs.monitor_tensorboard")
    p.add_argument("--logdir", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--username", required=True)
    p.add_argument("--password-file", type=Path, required=True)
    args = p.parse_args(argv)
    password = args.password_file.read_text().strip()
    if not password:
        print(f"{args.password_file}: empty password", file=sys.stderr)
        return 2

    from tensorboard import default, main_lib, program

    main_lib.global_init()  # as `tensorboard` itself starts

    def server(app, flags):
        return program.WerkzeugServer(basic_auth(app, args.username, password), flags)

    tb = program.TensorBoard(plugins=default.get_plugins(), server_class=server)
    tb.configure(
        argv=[
            sys.argv[0],
            "--logdir",
            args.logdir,
            "--host",
            "127.0.0.1",
            "--port",
            str(args.port),
            "--load_fast",
            "false",
        ]
    )
    tb._register_info = lambda server: None  # the world-writable /tmp/.tensorboard-info
    return tb.main()


if __name__ == "__main__":
    sys.exit(main())
