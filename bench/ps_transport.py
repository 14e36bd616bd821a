"""Parameter-server transport: the hand-written frame protocol (ps_wire) against gRPC on the
same payloads, loopback, one client, one request in flight (what an async worker does: send
a gradient, get the parameters back). Each server runs in its own process, as in a job.

    python bench/ps_transport.py [--sizes 16384,1048576,16777216] [--seconds 3]

Prints round trips per second and the ratio hand-written / gRPC per payload size. Both
servers do no work beyond receiving the request and answering with a payload of the same
size, so the difference is the transport.
"""

from __future__ import annotations

import argparse
import socket
import socketserver
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from alchemist_jobs.runtime import ps_wire  # noqa: E402

METHOD = "/alchemist.ParameterServer/Push"


def _frame_server() -> tuple[socketserver.ThreadingTCPServer, int]:
    class H(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            s = self.request
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                try:
                    h, payload, _ = ps_wire.recv(s)
                except (ConnectionError, OSError):
                    return
                ps_wire.send(s, {"version": 1}, memoryview(payload))

    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def _grpc_server(max_bytes: int):
    import grpc

    def push(request: bytes, context) -> bytes:
        return request

    handler = grpc.method_handlers_generic_handler("alchemist.ParameterServer", {
        "Push": grpc.unary_unary_rpc_method_handler(push)})
    opts = [("grpc.max_receive_message_length", max_bytes), ("grpc.max_send_message_length", max_bytes)]
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=opts)
    srv.add_generic_rpc_handlers((handler,))
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    return srv, port, opts


def rate_frames(port: int, payload: bytes, seconds: float) -> float:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    header = {"op": "push", "rank": 0, "clock": 1, "lr": 0.1, "read": 0}
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        ps_wire.send(s, header, payload)
        ps_wire.recv(s)
        n += 1
    s.close()
    return n / (time.perf_counter() - t0)


def rate_grpc(port: int, opts, payload: bytes, seconds: float) -> float:
    import grpc

    ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=opts)
    call = ch.unary_unary(METHOD)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        call(payload, metadata=(("x-rank", "0"), ("x-clock", "1")))
        n += 1
    ch.close()
    return n / (time.perf_counter() - t0)


def _serve_in_child(kind: str, max_bytes: int, conn) -> None:
    if kind == "frames":
        srv, port = _frame_server()
        opts = None
    else:
        srv, port, opts = _grpc_server(max_bytes)
    conn.send(port)
    conn.recv()  # until the parent is done


def _start(kind: str, max_bytes: int):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve_in_child, args=(kind, max_bytes, child), daemon=True)
    proc.start()
    return proc, parent, parent.recv()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16384,1048576,16777216", help="payload bytes, comma-separated")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    max_bytes = max(sizes) + (1 << 20)
    opts = [("grpc.max_receive_message_length", max_bytes), ("grpc.max_send_message_length", max_bytes)]
    fproc, fpipe, fport = _start("frames", max_bytes)
    gproc, gpipe, gport = _start("grpc", max_bytes)
    print("| payload | hand-written round trips/s | gRPC round trips/s | hand-written / gRPC |")
    print("|---|---|---|---|")
    for size in sizes:
        payload = bytes(size)
        rate_frames(fport, payload, 0.3)  # warm-up
        rate_grpc(gport, opts, payload, 0.3)
        f = rate_frames(fport, payload, args.seconds)
        g = rate_grpc(gport, opts, payload, args.seconds)
        print(f"| {size / 1024:,.0f} KiB | {f:,.0f} | {g:,.0f} | {f / g:.2f}x |", flush=True)
    for pipe, proc in ((fpipe, fproc), (gpipe, gproc)):
        pipe.send("stop")
        proc.join(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
