"""`async`: asynchronous SGD through a parameter server; also the client of async EASGD.

After backward a worker pushes its gradient to the server shards (ALCHEMIST_PS_ADDRS) and
loads the parameters they answer with, without waiting for any other worker; it then sets
its gradients to None, so the loop's optimizer.step() has nothing to do: the server's
optimizer applied the update (runtime/parameter_server.py). Workers do not move in
lock-step, so each writes its own checkpoint (position and RNG); the model itself lives on
the servers, and a (re)started worker pulls it.

Traffic is counted as the bytes actually sent and received (frames and headers included).

On a GPU, what goes on the wire is staged through one pinned host buffer per shard: the
shard is flattened on the device, copied asynchronously into its buffer, and the step waits
once for all shards' copies (one host sync per exchange, not one blocking copy per tensor).
Answers land in a second pinned buffer per shard, straight from the socket, and are copied to
the device once per shard (asynchronously) before they touch the parameters.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch

from alchemist_jobs import environment as E
from alchemist_jobs.runtime import ps_wire
from alchemist_jobs.runtime.strategies.base import Strategy, WorkerContext
from alchemist_jobs.runtime.strategies.comm_stats import OFF_STEP
from alchemist_jobs.server_role import server_count

if TYPE_CHECKING:
    from alchemist_jobs.spec import EasgdAlgo

CONNECT_TIMEOUT_S = E.PS_CONNECT_TIMEOUT.get(default=300.0)


class PSClient:
    """One persistent connection per shard. A broken connection (a server restarting from
    its checkpoint) is re-established and the request sent again."""

    def __init__(
        self,
        ctx: WorkerContext,
        names: list[list[str]],
        model: Sequence[Sequence[torch.Tensor]] | None = None,
    ):
        self.ctx = ctx
        # Rank 0's hello gives each shard its model (the servers never build one).
        self.model = model if ctx.rank == 0 else None
        self.addrs = ps_wire.parse_addrs(E.PS_ADDRS.get(default=""))
        if len(self.addrs) != len(names):
            raise ValueError(
                f"{E.PS_ADDRS.name} names {len(self.addrs)} servers; the job has {len(names)} shards"
            )
        self.names = names
        self.secret = ps_wire.run_secret(ctx.extra["run"].path)
        self.socks: list[socket.socket | None] = [None] * len(self.addrs)
        self.versions = [0] * len(self.addrs)  # the server version each shard's params came from

    def _open(self, k: int) -> socket.socket:
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            sock = ps_wire.connect(*self.addrs[k], deadline=deadline)
            try:
                shook = ps_wire.client_handshake(sock, self.secret)
                hello: dict[str, Any] = {"op": "hello", "rank": self.ctx.rank, "names": self.names[k]}
                body: bytes | memoryview = b""
                if self.model is not None:
                    hello["shapes"] = [list(p.shape) for p in self.model[k]]
                    body = ps_wire.as_bytes(ps_wire.flat(self.model[k]).cpu())
                sent = ps_wire.send(sock, hello, body)
                h, _, got = ps_wire.recv(sock)
                got += shook
            except ps_wire.AuthError:
                sock.close()
                raise
            except (ConnectionError, OSError):
                sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                continue
            self.ctx.comm.payload(sent, got)
            if "error" in h:
                sock.close()
                raise RuntimeError(f"parameter server {k}: {h['error']}")
            self.socks[k] = sock
            return sock

    def connect(self) -> None:
        for k in range(len(self.addrs)):
            self._open(k)

    def exchange(
        self,
        headers: list[dict[str, Any]],
        payloads: Sequence[torch.Tensor | None],
        staging: HostStaging | None = None,
    ) -> list[tuple[dict[str, Any], torch.Tensor]]:
        """Send one request to every shard, then collect every answer (shards work in
        parallel); retried on a fresh connection where one breaks. With `staging`, answers
        land in its (pinned) answer buffers."""
        comm = self.ctx.comm
        replies: list[Any] = [None] * len(self.addrs)
        todo = list(range(len(self.addrs)))
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        with comm.timed():
            while todo:
                failed = []
                for k in todo:
                    try:
                        sock = self.socks[k] or self._open(k)
                        payload = payloads[k]
                        body = ps_wire.as_bytes(payload) if payload is not None else b""
                        comm.payload(ps_wire.send(sock, headers[k], body), 0)
                    except (ConnectionError, OSError):
                        failed.append(k)
                for k in todo:
                    if k in failed:
                        continue
                    sent_on = self.socks[k]
                    assert sent_on is not None  # sent to above: opened, or failed and skipped
                    try:
                        h, buf, got = ps_wire.recv(sent_on, into=staging.landing(k) if staging else None)
                    except (ConnectionError, OSError):
                        failed.append(k)
                        continue
                    comm.payload(0, got)
                    if "error" in h:
                        raise RuntimeError(f"parameter server {k}: {h['error']}")
                    replies[k] = (h, staging.answer(k, buf) if staging else ps_wire.from_bytes(buf))
                for k in failed:
                    self._drop(k)
                if failed and time.monotonic() > deadline:
                    raise ConnectionError(f"parameter servers {failed} unreachable")
                todo = sorted(set(failed))
        return replies

    def _drop(self, k: int) -> None:
        sock = self.socks[k]
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
            self.socks[k] = None

    def close(self) -> None:
        for k in range(len(self.socks)):
            self._drop(k)


class HostStaging:
    """Pinned float32 host buffers per shard for a model on a GPU: one for what goes on the
    wire, one for the answer, which the socket writes into directly, so its copy to the
    device is a true asynchronous DMA (a pageable source makes the copy wait for the host).
    On CPU nothing is staged. `pin` defaults to the device being a GPU (tests stage for the
    meta device in plain host memory: pinning needs CUDA)."""

    def __init__(
        self, shards: Sequence[Sequence[torch.Tensor]], device: torch.device, pin: bool | None = None
    ):
        self.device = device
        self.staged = device.type != "cpu"
        self.cuda = device.type == "cuda"
        pin = self.cuda if pin is None else pin
        sizes = [sum(p.numel() for p in shard) for shard in shards] if self.staged else []
        self.bufs = [torch.empty(n, dtype=torch.float32, pin_memory=pin) for n in sizes]
        self.answers = [torch.empty(n, dtype=torch.float32, pin_memory=pin) for n in sizes]
        self._copied: list[Any] = [None] * len(sizes)  # CUDA event: answer k left its buffer

    def to_host(self, vectors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each shard's flat vector in host memory, ready for the wire."""
        if not self.cuda:
            return [v.cpu() for v in vectors]
        for buf, v in zip(self.bufs, vectors):
            buf.copy_(v, non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()  # the one wait of this exchange
        return self.bufs

    def landing(self, k: int) -> memoryview | None:
        """Shard k's answer buffer as bytes for the socket, once the device has copied the
        previous answer out of it (long done by the next exchange: no real wait)."""
        if not self.staged or self.answers[k].numel() == 0:
            return None
        if self._copied[k] is not None:
            self._copied[k].synchronize()
            self._copied[k] = None
        return self.answers[k].numpy().data.cast("B")

    def answer(self, k: int, buf: bytearray | memoryview) -> torch.Tensor:
        """The answer as a tensor: the staging buffer itself where it landed there."""
        if self.staged and isinstance(buf, memoryview) and len(buf) == self.answers[k].numel() * 4:
            return self.answers[k]
        return ps_wire.from_bytes(buf)

    def to_device(self, vec: torch.Tensor, k: int | None = None) -> torch.Tensor:
        out = vec.to(self.device, non_blocking=self.cuda)
        if self.cuda and k is not None and vec is self.answers[k]:
            self._copied[k] = torch.cuda.Event()
            self._copied[k].record()  # the buffer may be refilled once this copy is done
        return out


class _PSStrategy(Strategy):
    """What async SGD and async EASGD share: the shard layout and the connections."""

    collective_checkpoint = False  # workers are never at the same step: one file each
    replicas_identical = False

    def setup(self, model: torch.nn.Module) -> torch.nn.Module:
        self.model = model
        named = list(model.named_parameters())
        layout = ps_wire.shard_layout([p.numel() for _, p in named], server_count(self.ctx.spec))
        self.shards = [[named[i][1] for i in idx] for idx in layout]
        self.staging = HostStaging(self.shards, self.ctx.device)
        self.client = PSClient(self.ctx, [[named[i][0] for i in idx] for idx in layout], self.shards)
        self.client.connect()
        return model

    def _rank_header(self, **h: Any) -> list[dict[str, Any]]:
        return [dict(h, rank=self.ctx.rank, read=v) for v in self.client.versions]

    @torch.no_grad()
    def _load(
        self, replies: list[tuple[dict[str, Any], torch.Tensor]], add: bool = False, sign: float = 1.0
    ) -> None:
        """Copy (or, with add, add sign times) each shard's answer into the model."""
        for k, (h, vec) in enumerate(replies):
            vec = self.staging.to_device(vec, k)  # the answer arrives in host memory
            off = 0
            for p in self.shards[k]:
                part = vec[off : off + p.numel()].view_as(p)
                p.add_(part, alpha=sign) if add else p.copy_(part)
                off += p.numel()
            self.client.versions[k] = int(h.get("version", self.client.versions[k]))

    def _staleness(self, replies: list[tuple[dict[str, Any], torch.Tensor]]) -> None:
        s = [h["staleness"] for h, _ in replies if "staleness" in h]
        if s:
            self.ctx.metrics["alchemist_staleness_steps"].observe(max(s))

    def _pull(self) -> None:
        self._load(
            self.client.exchange(self._rank_header(op="pull"), [None] * len(self.shards), self.staging)
        )

    def _done(self) -> None:
        """Tell the servers this worker finished; their answer (once every worker has
        finished) is the final model."""
        self._load(
            self.client.exchange(self._rank_header(op="done"), [None] * len(self.shards), self.staging)
        )

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()


class AsyncStrategy(_PSStrategy):
    name = "async"

    def setup(self, model: torch.nn.Module) -> torch.nn.Module:
        super().setup(model)
        self._pull()  # the servers hold the model; a restarted worker continues from theirs
        self.ctx.comm.close_window(OFF_STEP)  # not to be merged with the first step's exchange
        return model

    def after_backward(self, step: int) -> None:
        grads = self.staging.to_host(
            [
                ps_wire.flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in shard])
                for shard in self.shards
            ]
        )
        replies = self.client.exchange(
            self._rank_header(op="push", clock=step + 1, lr=self.ctx.lr), grads, self.staging
        )
        self.ctx.comm.rounds += 1
        self._load(replies)
        self._staleness(replies)
        for shard in self.shards:
            for p in shard:
                p.grad = None  # the server applied the update: the local step has nothing to do

    def finish(self) -> None:
        self._done()


class AsyncEasgdStrategy(_PSStrategy):
    """EASGD with the centre variable on a parameter server (`easgd` with variant async)."""

    name = "easgd"

    def setup(self, model: torch.nn.Module) -> torch.nn.Module:
        super().setup(model)
        algo = cast("EasgdAlgo", self.ctx.spec.algorithm)  # built only for easgd, variant async
        self.tau, self.alpha = algo.tau, algo.alpha
        self.active = self.ctx.world_size > 1  # one worker: plain SGD, no elastic force
        return model

    def after_step(self, step: int) -> None:
        if not self.active or step % self.tau:
            return
        xs = self.staging.to_host([ps_wire.flat(shard) for shard in self.shards])
        replies = self.client.exchange(
            self._rank_header(op="elastic", clock=step, alpha=self.alpha), xs, self.staging
        )
        self.ctx.comm.rounds += 1
        self._load(replies, add=True, sign=-1.0)  # x_i ← x_i − α(x_i − x̃)
        self._staleness(replies)

    def finish(self) -> None:
        if self.active:
            self._done()  # every rank leaves with the centre
        else:
            saved = [p.detach().clone() for shard in self.shards for p in shard]
            self._done()  # the server may only stop once told; keep the local model
            with torch.no_grad():
                for p, v in zip((p for shard in self.shards for p in shard), saved):
                    p.copy_(v)

    @contextlib.contextmanager
    def evaluation_model(self) -> Iterator[torch.nn.Module]:
        """The centre, pulled from the servers (counted as traffic like any other)."""
        if not self.active:
            assert self.model is not None  # setup() ran first
            yield self.model
            return
        saved = [p.detach().clone() for shard in self.shards for p in shard]
        versions = list(self.client.versions)
        self._pull()
        self.client.versions = versions
        self.ctx.comm.close_window(OFF_STEP)  # off-step traffic: not in a step's time
        try:
            assert self.model is not None  # setup() ran first
            yield self.model
        finally:
            with torch.no_grad():
                for p, v in zip((p for shard in self.shards for p in shard), saved):
                    p.copy_(v)
