"""The parameter server: one process per shard, holding and updating its share of the model.

    ALCHEMIST_PS_SHARD=k ALCHEMIST_PS_PORT=p ALCHEMIST_RUN_DIR=... \
        python -m alchemist_jobs.runtime.parameter_server

The launcher starts these beside the workers (server_role.py), which find them through
ALCHEMIST_PS_ADDRS and speak ps_wire.py's protocol over one connection each (torch's rpc
cannot survive a worker's restart). Requests: `hello`, `pull`, `push` (a gradient, applied at
once by the job's optimizer; with `staleness_bound` the answer waits for the slowest worker),
`elastic` (async EASGD) and `done`. The server checkpoints every `checkpoint.every_steps`
updates, resumes from the newest checkpoint, and exits once every worker is done.

A server never builds the model: rank 0's `hello` carries its shard's names, shapes and
initial values (the other workers' `hello` waits for them), so the same server serves a
built-in task, a user's entry task and a user's own loop (`alchemist_jobs.prepare`) alike.
A server resumed from its checkpoint keeps the checkpoint's values.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import socket as _s
import socketserver
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from alchemist_jobs import environment as E
from alchemist_jobs.rundir import RunDir, write_json_atomic
from alchemist_jobs.runtime import ps_wire
from alchemist_jobs.runtime.checkpoint import Checkpointer
from alchemist_jobs.runtime.metrics import WorkerMetrics
from alchemist_jobs.server_role import server_count as count
from alchemist_jobs.spec import JobSpec

# An uninitialised shard takes rank 0's model of at most this size (an authenticated peer:
# only the job's own workers hold the run's secret).
MAX_INIT_BYTES = 64 << 30


class Shard:
    """One shard's parameters, optimizer, clocks and bookkeeping; every method holds the lock.
    Without names and tensors it waits for rank 0's (`hello`) or a checkpoint's."""

    def __init__(
        self,
        spec: JobSpec,
        shard: int,
        names: list[str] | None,
        tensors: list[torch.Tensor] | None,
        world: int,
        metrics: WorkerMetrics,
        ckpt: Checkpointer | None,
    ):
        self.spec, self.shard, self.world = spec, shard, world
        # async SGD: the job's optimizer runs here; async EASGD only adds elastic differences.
        self.async_sgd = spec.algorithm.server_optimizer
        self.names: list[str] | None = None
        self.params: list[torch.nn.Parameter] = []
        self.numels: list[int] = []
        self.payload_bytes = 0
        self.optimizer: Any = None
        if names is not None:
            self._take(names, tensors or [])
        self.bound: int | None = spec.algorithm.staleness_limit
        self.version = 0  # updates applied
        self.clocks = {r: 0 for r in range(world)}  # each worker's steps, as last reported
        self.done: set[int] = set()
        self.released: set[int] = set()  # workers that received their final answer
        self.cond = threading.Condition()
        self.finished = threading.Event()
        self.metrics, self.ckpt = metrics, ckpt
        self.every = spec.checkpoint.every_steps
        self.closing = False

    # -- state --------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.names is not None

    def _take(self, names: list[str], tensors: list[torch.Tensor]) -> None:
        from alchemist_jobs.runtime.optim import build_optimizer

        self.names = list(names)
        self.params = [torch.nn.Parameter(t.detach().clone(), requires_grad=False) for t in tensors]
        self.numels = [p.numel() for p in self.params]
        self.payload_bytes = 4 * sum(self.numels)  # float32: the only payload a request may carry
        self.optimizer = (
            build_optimizer(self.spec.hyper, self.params) if self.async_sgd and self.params else None
        )
        print(
            f"alchemist: server {self.shard} serving {len(self.names)} tensors "
            f"({sum(self.numels)} parameters)",
            flush=True,
        )

    def vector(self) -> torch.Tensor:
        return ps_wire.flat(self.params)

    def state_dict(self) -> dict[str, Any]:
        assert self.names is not None  # saved only once it holds a model (checkpoint() checks)
        return dict(
            shard=self.shard,
            names=self.names,
            version=self.version,
            clocks={str(r): c for r, c in self.clocks.items()},
            params={n: p.detach().clone() for n, p in zip(self.names, self.params)},
            optimizer=self.optimizer.state_dict() if self.optimizer else {},
            config=self.spec.model_dump(mode="json"),
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not self.ready:
            self._take(list(state["names"]), [state["params"][n] for n in state["names"]])
        if list(state["names"]) != self.names:
            raise RuntimeError(
                f"checkpoint of shard {state['shard']} holds {state['names']}, this shard {self.names}"
            )
        with torch.no_grad():
            for n, p in zip(self.names, self.params):
                p.copy_(state["params"][n])
        if self.optimizer and state["optimizer"]:
            self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        self.clocks.update({int(r): int(c) for r, c in state["clocks"].items()})

    def checkpoint(self) -> None:
        if self.ckpt is None or not self.ready:
            return
        t0 = time.perf_counter()
        _, size, _ = self.ckpt.save(self.version, self.state_dict())
        self.metrics["alchemist_checkpoint_seconds"].observe(time.perf_counter() - t0)
        self.metrics["alchemist_checkpoint_size_bytes"].set(size)
        self.metrics["alchemist_checkpoint_step"].set(self.version)

    def _applied(self) -> None:
        self.version += 1
        self.metrics["alchemist_server_updates_total"].inc()
        if self.every and self.version % self.every == 0:
            self.checkpoint()
        self.cond.notify_all()

    # -- requests -----------------------------------------------------------------------------
    def hello(
        self, h: dict[str, Any], payload: bytearray | memoryview = bytearray()
    ) -> tuple[dict[str, Any], torch.Tensor | None]:
        with self.cond:
            if not self.ready and h["rank"] == 0:  # rank 0's model is where training starts
                vec, off, tensors = ps_wire.from_bytes(payload), 0, []
                for shape in h["shapes"]:
                    n = math.prod(shape)
                    tensors.append(vec[off : off + n].view(shape))
                    off += n
                self._take(h["names"], tensors)
                self.cond.notify_all()
            while not self.ready and not self.closing:
                self.cond.wait(1.0)  # another worker's hello waits for rank 0's model
        if h.get("names") != self.names:
            return {
                "error": f"shard {self.shard} holds {self.names}, worker expects "
                f"{h.get('names')}: different models"
            }, None
        with self.cond:
            self.done.discard(h["rank"])  # a restarted worker is running again
            self.released.discard(h["rank"])
            self.cond.notify_all()
            return {"version": self.version, "world": self.world}, None

    def pull(self, h: dict[str, Any]) -> tuple[dict[str, Any], torch.Tensor]:
        with self.cond:
            return {"version": self.version}, self.vector()

    def push(self, h: dict[str, Any], payload: bytearray | memoryview) -> tuple[dict[str, Any], torch.Tensor]:
        grads = ps_wire.from_bytes(payload)
        rank = h["rank"]
        with self.cond:
            staleness = max(0, self.version - int(h["read"]))  # < 0 after a server restart
            off = 0
            for p, n in zip(self.params, self.numels):
                p.grad = grads[off : off + n].view_as(p)
                off += n
            if self.optimizer is not None:  # None: a shard left without tensors
                for g in self.optimizer.param_groups:
                    g["lr"] = float(h["lr"])
                self.optimizer.step()
            for p in self.params:
                p.grad = None
            self.metrics["alchemist_staleness_steps"].observe(staleness)
            self.clocks[rank] = int(h["clock"])
            self._applied()
            self._wait_for_slowest(rank)
            return {"version": self.version, "staleness": staleness}, self.vector()

    def elastic(
        self, h: dict[str, Any], payload: bytearray | memoryview
    ) -> tuple[dict[str, Any], torch.Tensor]:
        x = ps_wire.from_bytes(payload)
        with self.cond, torch.no_grad():
            staleness = max(0, self.version - int(h.get("read", self.version)))
            e = float(h["alpha"]) * (x - self.vector())
            off = 0
            for p, n in zip(self.params, self.numels):
                p.add_(e[off : off + n].view_as(p))
                off += n
            self.metrics["alchemist_staleness_steps"].observe(staleness)
            self.clocks[h["rank"]] = int(h["clock"])
            self._applied()
            return {"version": self.version, "staleness": staleness}, e

    def done_wait(self, h: dict[str, Any]) -> tuple[dict[str, Any], torch.Tensor]:
        with self.cond:
            self.done.add(h["rank"])
            self.cond.notify_all()
            while len(self.done) < self.world and not self.closing:
                self.cond.wait(1.0)
            return {"version": self.version}, self.vector()

    def release(self, rank: int) -> None:
        """The final answer reached `rank`; once every worker has one, the server may go."""
        with self.cond:
            self.released.add(rank)
            if len(self.released) >= self.world:
                self.finished.set()

    def _wait_for_slowest(self, rank: int) -> None:
        """SSP: hold this worker while it is more than `bound` steps ahead of the slowest
        worker still training."""
        if self.bound is None:
            return
        while not self.closing:
            running = [c for r, c in self.clocks.items() if r not in self.done]
            if not running or self.clocks[rank] - min(running) <= self.bound:
                return
            self.cond.wait(1.0)


_OPS = {"hello", "pull", "push", "elastic", "done"}
# Handshakes in progress at once (at least): past it, the oldest is cut for the newcomer.
MIN_PENDING_HANDSHAKES = 32


def _hello_size(h: dict[str, Any]) -> int | str:
    """The payload bytes rank 0's hello must carry (its names' shapes in float32), or why
    its header cannot describe a model."""
    names, shapes = h.get("names"), h.get("shapes")
    if not (
        isinstance(names, list)
        and all(isinstance(n, str) for n in names)
        and isinstance(shapes, list)
        and len(shapes) == len(names)
        and all(
            isinstance(s, list)
            and len(s) <= 16
            and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d for d in s)
            for s in shapes
        )
    ):
        return "hello from rank 0: names and shapes are not lists of names and dimensions"
    return 4 * sum(math.prod(s) for s in shapes)


def check_request(shard: Shard, h: dict[str, Any], payload: bytearray | memoryview) -> str | None:
    """Why an (authenticated) request is refused, or None: unknown op, a rank outside the
    job, a payload that is not exactly the shard's size (rank 0's hello: its model's),
    non-finite values or numbers, a request before the shard holds a model."""
    op = h.get("op")
    if op not in _OPS or (op == "push" and not shard.async_sgd):
        return f"unknown request {op!r} for algorithm {shard.spec.algorithm.name}"
    rank = h.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < shard.world:
        return f"rank {rank!r} is not a worker of this job (0..{shard.world - 1})"
    if op != "hello" and not shard.ready:
        return f"{op} before rank 0's hello gave shard {shard.shard} its model"
    want = shard.payload_bytes if op in ("push", "elastic") else 0
    if op == "hello" and rank == 0:  # rank 0's model (the shard's first, or the same again)
        size = _hello_size(h)
        if isinstance(size, str):
            return size
        want = size
    if len(payload) != want:
        return f"{op} carries {len(payload)} payload bytes; this shard takes exactly {want}"
    for key in {"push": ("lr",), "elastic": ("alpha",)}.get(op, ()):
        if not isinstance(h.get(key), (int, float)) or not math.isfinite(h[key]):
            return f"{op}: {key}={h.get(key)!r} is not a finite number"
    for key in ("clock", "read"):
        if key in h and (not isinstance(h[key], int) or isinstance(h[key], bool)):
            return f"{op}: {key}={h[key]!r} is not an integer"
    if want and not bool(torch.isfinite(ps_wire.from_bytes(payload)).all()):
        return f"{op} from rank {rank} holds non-finite values; refused, nothing applied"
    return None


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: _Server = self.server  # type: ignore[assignment]
        shard: Shard = server.shard
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A stranger's connection takes no worker's slot: until it proves the run's secret
        # it is one of a bounded set of handshakes, each over within HANDSHAKE_TIMEOUT_S, the
        # oldest dropped when a new one needs room (ps_wire.server_handshake).
        server.pending(sock)
        try:
            ps_wire.server_handshake(sock, server.secret)
        except (ConnectionError, OSError, ps_wire.ProtocolError) as e:
            server.refuse(self.client_address, f"no valid handshake ({e})")
            return
        finally:
            server.done_pending(sock)
        if not server.admit():
            server.refuse(
                self.client_address, f"more than {server.max_connections} authenticated connections"
            )
            return
        try:
            self._serve(server, shard, sock)
        finally:
            server.leave()

    def _serve(self, server: _Server, shard: Shard, sock: socket.socket) -> None:
        m = shard.metrics
        while True:
            try:
                t0 = time.perf_counter()
                h, payload, n_in = ps_wire.recv(
                    sock, max_payload=shard.payload_bytes if shard.ready else MAX_INIT_BYTES
                )
            except ps_wire.ProtocolError as e:
                server.refuse(self.client_address, str(e))
                return
            except (ConnectionError, OSError):
                return
            t_in = time.perf_counter() - t0
            op = h.get("op")
            problem = check_request(shard, h, payload)
            if problem is not None:
                server.refuse(self.client_address, problem)
                reply, vec = {"error": problem}, None
            elif op == "hello":
                reply, vec = shard.hello(h, payload)
            elif op == "pull":
                reply, vec = shard.pull(h)
            elif op == "push":
                reply, vec = shard.push(h, payload)
            elif op == "elastic":
                reply, vec = shard.elastic(h, payload)
            else:
                reply, vec = shard.done_wait(h)
            try:
                t1 = time.perf_counter()
                n_out = ps_wire.send(sock, reply, ps_wire.as_bytes(vec) if vec is not None else b"")
                t_out = time.perf_counter() - t1
            except (ConnectionError, OSError):
                return
            m["alchemist_communication_received_bytes_total"].inc(n_in)
            m["alchemist_communication_sent_bytes_total"].inc(n_out)
            m["alchemist_communication_seconds_total"].inc(t_in + t_out)
            if op in ("push", "elastic", "pull"):
                m["alchemist_sync_rounds_total"].inc()
            if "error" in reply:
                return
            if op == "done":
                shard.release(h["rank"])


REFUSED_LOG_EVERY_S = 1.0  # refused connections: one log line a second at most
REFUSED_WHY_CHARS = 200


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True  # a restarted server takes its port back at once
    daemon_threads = True

    def setup_limits(self, shard: Shard, secret: bytes) -> None:
        self.shard, self.secret = shard, secret
        # Every worker's connection, plus room for restarted workers whose old connection
        # the server has not noticed closing yet. Only authenticated connections count.
        self.max_connections = 2 * shard.world + 4
        self.max_pending = max(MIN_PENDING_HANDSHAKES, self.max_connections)
        self._active = 0
        self._pending: dict[int, socket.socket] = {}  # in arrival order
        self._lock = threading.Lock()
        self._quiet_until, self._unshown = 0.0, 0  # refusals not logged (refuse)

    def pending(self, sock: socket.socket) -> None:
        """A new connection starts its handshake; past max_pending, the oldest handshake is
        cut (a worker's takes a round trip, so it is a stranger's that waits longest)."""
        with self._lock:
            while len(self._pending) >= self.max_pending:
                oldest = self._pending.pop(next(iter(self._pending)))
                try:
                    oldest.shutdown(socket.SHUT_RDWR)  # its handler's read fails at once
                except OSError:
                    pass
            self._pending[id(sock)] = sock

    def done_pending(self, sock: socket.socket) -> None:
        with self._lock:
            self._pending.pop(id(sock), None)

    def admit(self) -> bool:
        with self._lock:
            if self._active >= self.max_connections:
                return False
            self._active += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._active -= 1

    def refuse(self, peer: Any, why: str) -> None:
        """One line per REFUSED_LOG_EVERY_S at most, of bounded length, counting the ones not
        shown: a stranger's flood of connections must not fill the run's disk."""
        now = time.monotonic()
        with self._lock:
            if now < self._quiet_until:
                self._unshown += 1
                return
            unshown, self._unshown = self._unshown, 0
            self._quiet_until = now + REFUSED_LOG_EVERY_S
        more = f" (and {unshown} more refused since the last line)" if unshown else ""
        print(
            f"alchemist: server {self.shard.shard} refused {peer[0]}:{peer[1]}: "
            f"{why[:REFUSED_WHY_CHARS]}{more}",
            flush=True,
        )


def _server(bind: str, port: int) -> _Server:
    """The shard's server: on the socket the local launcher holds for every attempt of this
    shard (ALCHEMIST_PS_LISTEN_FD, local_servers.py), else bound here (clusters: the pod's
    port)."""
    fd = E.PS_LISTEN_FD.get()
    if fd is None:
        return _Server((bind, port), _Handler)
    server = _Server((bind, port), _Handler, bind_and_activate=False)
    server.socket.close()
    server.socket = socket.socket(fileno=fd)
    server.server_address = server.socket.getsockname()
    return server


def server_count(spec: JobSpec) -> int:
    return count(spec)


def serve(spec: JobSpec, run: RunDir, shard: int, port: int, bind: str = "0.0.0.0", restart: int = 0) -> int:
    """Run one shard until every worker is done; returns the exit code."""
    node = E.NODE.get() or _s.gethostname()
    labels = dict(
        job=spec.name, run=run.run_id, rank=f"server-{shard}", node=node, algorithm=spec.algorithm.name
    )
    metrics = WorkerMetrics(labels, role="server", enabled=spec.metrics)
    metrics_port = metrics.serve(0)
    if spec.metrics:
        metrics.add_system_collector()
    metrics["alchemist_restarts"].set(restart)

    ckpt = Checkpointer(run.checkpoints, keep=spec.checkpoint.keep, prefix=f"server{shard}")
    state = Shard(spec, shard, None, None, spec.world_size, metrics, ckpt)
    resumed = ckpt.latest() if spec.checkpoint.resume else None
    if resumed is not None:
        state.load_state_dict(resumed[1])
        print(f"alchemist: server {shard} resumed from its checkpoint at update {resumed[0]}", flush=True)

    server = _server(bind, port)
    server.setup_limits(state, ps_wire.run_secret(run.path))
    record = dict(
        role="server",
        shard=shard,
        pid=os.getpid(),
        node=node,
        host=_s.gethostname(),
        port=server.server_address[1],
        metrics_port=metrics_port,
        restart=restart,
        version=state.version,
        started=time.time(),
    )
    write_json_atomic(run.workers / f"server-{shard}.json", record)
    threading.Thread(
        target=server.serve_forever, kwargs=dict(poll_interval=0.2), daemon=True, name="ps-accept"
    ).start()
    print(
        f"alchemist: server {shard} listening on {bind}:{server.server_address[1]}"
        + ("" if state.ready else "; its model comes with rank 0's hello"),
        flush=True,
    )
    state.finished.wait()
    with state.cond:
        state.closing = True
        state.checkpoint()  # the final parameters, for inspection and late readers
        state.cond.notify_all()
    server.shutdown()
    # A scrape every 15 s misses the last updates of a server that exits when its workers are
    # done: its final counters stay in its record (`final_metrics`), next to the workers'.
    write_json_atomic(
        run.workers / f"server-{shard}.json",
        dict(record, version=state.version, finished=time.time(), final_metrics=metrics.totals()),
    )
    print(f"alchemist: server {shard} done after {state.version} updates", flush=True)
    return 0


def _redirect_output(log: Path, header: str) -> None:
    """stdout and stderr to logs/server-<k>.log, appended, one header per attempt."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, header.encode())
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main() -> int:
    import yaml

    run = RunDir(E.RUN_DIR.require())
    shard = E.PS_SHARD.require()
    port = E.PS_PORT.require()
    restart = E.PS_RESTART.get(default=0)
    if not E.LOG_TO_CONSOLE.get():
        _redirect_output(
            run.logs / f"server-{shard}.log",
            f"=== server {shard} attempt {restart + 1} pid {os.getpid()} at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')} ===\n",
        )
    # SIGTERM (cancel, launcher gone): exit at once; the newest checkpoint stays.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    spec = JobSpec.model_validate(yaml.safe_load(run.spec.read_text()))
    code = serve(spec, run, shard, port, bind=E.PS_BIND.get(default="0.0.0.0"), restart=restart)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # like the workers: no interpreter teardown after the job's work is done


if __name__ == "__main__":
    main()
