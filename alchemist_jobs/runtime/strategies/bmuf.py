"""`bmuf`: blockwise model-update filtering (Chen & Huo, 2016) over an all-reduce.

Each worker runs tau local optimizer steps (a block). Then the models are averaged with one
all-reduce, and the global model moves by a filtered block update:

    S_{t-1} = W_{t-1} + η·Δ_{t-1}  with Nesterov, else W_{t-1}   (where the block began)
    G_t   = W̄_t - S_{t-1}                  (the block's averaged progress)
    Δ_t   = η·Δ_{t-1} + ζ·G_t              (block momentum η, block learning rate ζ)
    W_t   = W_{t-1} + Δ_t

as in the paper (and CNTK's and fairseq's implementations): the block's progress is measured
from the point the workers started it, so a block that makes no progress leaves
Δ_t = η·Δ_{t-1}. With η = 0 and ζ = 1 this is periodic model averaging. W and Δ are identical
on every rank (they are computed from the all-reduced average), so they need no exchange of
their own. What is all-reduced is W_i − S_{t-1}, in the spec's `exchange_dtype`.

`overlap: true` hides the exchange behind the next block (as overlapping local SGD does): at
a block's end each worker snapshots P_i = W_i, starts the all-reduce of P_i − S_{t-1} and
keeps stepping; at the next block's end it waits for it, computes the block update and
moves by what the update changes of its snapshot, W_i ← W_i + (S_t − P_i), keeping the
local steps made meanwhile; then it snapshots and starts the next one. The average it
applies is one block old. A checkpoint does not keep an exchange in flight: a resumed run
drops it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from alchemist_jobs.runtime.strategies.averaging import Exchange, check_same_start, swapped
from alchemist_jobs.runtime.strategies.base import Strategy

if TYPE_CHECKING:
    from alchemist_jobs.spec import BmufAlgo


def start_point(w: torch.Tensor, delta: torch.Tensor, eta: float, nesterov: bool) -> torch.Tensor:
    """Where workers begin a block after the update (W, Δ): S = W + η·Δ with Nesterov, else W.
    A separate tensor even without Nesterov: vector_to_parameters makes the parameters views
    of what it is given, and local steps must not move W."""
    return w + eta * delta if nesterov else w.clone()


def block_update(
    w_prev: torch.Tensor, w_avg: torch.Tensor, delta: torch.Tensor, eta: float, zeta: float, nesterov: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One BMUF block update: (W_t, Δ_t, the point workers restart from), given W_{t-1},
    the workers' average W̄_t and Δ_{t-1}."""
    began = start_point(w_prev, delta, eta, nesterov)  # S_{t-1}
    delta = eta * delta + zeta * (w_avg - began)
    w = w_prev + delta
    return w, delta, start_point(w, delta, eta, nesterov)


class BmufStrategy(Strategy):
    name = "bmuf"
    replicas_identical = False  # replicas differ within a block

    def setup(self, model: torch.nn.Module) -> torch.nn.Module:
        self.model = model
        self.params = list(model.parameters())
        algo = cast(
            "BmufAlgo", self.ctx.spec.algorithm
        )  # this strategy is built only for its own algorithm (its spec class names it)
        eta = algo.block_momentum
        if eta is None:  # the paper's rule of thumb for N workers
            eta = 1.0 - 1.0 / self.ctx.world_size
        self.tau, self.eta, self.zeta, self.nesterov = algo.tau, eta, algo.block_lr, algo.nesterov
        self.reset_momentum = algo.reset_momentum
        self.active = self.ctx.world_size > 1 and dist.is_initialized()
        self.global_model = parameters_to_vector(self.params).detach().clone()  # W_{t-1}
        self.delta = torch.zeros_like(self.global_model)
        self.pending = 0  # local steps not yet in any exchange
        self.overlap = algo.overlap
        self.exchange = Exchange(self.ctx.comm, self.ctx.world_size, self.ctx.device, algo.exchange_dtype)
        self.sent: torch.Tensor | None = None  # the snapshot of the exchange in flight
        if self.active:
            check_same_start(self.global_model, self.ctx.comm, "bmuf")
        return model

    def after_step(self, step: int) -> None:
        if not self.active:
            return
        self.pending += 1
        if step % self.tau == 0:
            self._overlapped_block() if self.overlap else self._block()

    @torch.no_grad()
    def _block(self) -> None:
        x = parameters_to_vector(self.params).detach()
        diff = self.exchange.sum(x - self._began())
        vector_to_parameters(self._update(diff), self.params)
        self.pending = 0

    @torch.no_grad()
    def _overlapped_block(self) -> None:
        x = parameters_to_vector(self.params).detach()
        if self.exchange.in_flight:
            x = self._land(x)
            vector_to_parameters(x, self.params)
        self.sent = x.clone()
        self.exchange.start(self.sent - self._began())
        self.pending = 0

    def _land(self, x: torch.Tensor) -> torch.Tensor:
        """The exchange in flight, applied to the local model x (a new tensor)."""
        assert self.sent is not None  # set with every start(); landed only while in flight
        start = self._update(self.exchange.land())
        x = x + (start - self.sent)
        self.sent = None
        return x

    def _began(self) -> torch.Tensor:
        """S_{t-1}: where the workers began the block now ending."""
        return start_point(self.global_model, self.delta, self.eta, self.nesterov)

    def _update(self, diff_sum: torch.Tensor) -> torch.Tensor:
        """The block update from Σ_i (W_i − S_{t-1}); the point workers restart from."""
        avg = self._began() + diff_sum / self.ctx.world_size
        self.global_model, self.delta, start = block_update(
            self.global_model, avg, self.delta, self.eta, self.zeta, self.nesterov
        )
        if self.reset_momentum and self.optimizer is not None:
            for state in self.optimizer.state.values():
                state.pop("momentum_buffer", None)  # SGD and LARS start a fresh one
        return start

    @torch.no_grad()
    def finish(self) -> None:
        """Land the exchange in flight, close a partial last block, then hand every rank
        the global model W_t."""
        if self.active:
            if self.exchange.in_flight:
                vector_to_parameters(self._land(parameters_to_vector(self.params).detach()), self.params)
            if self.pending:
                self._block()
            vector_to_parameters(self.global_model.clone(), self.params)

    @contextlib.contextmanager
    def evaluation_model(self) -> Iterator[torch.nn.Module]:
        """The global model of the last block (what finish() would hand out)."""
        if not self.active:
            assert self.model is not None  # setup() ran first
            yield self.model
            return
        with swapped(self.params, self.global_model):
            assert self.model is not None  # setup() ran first
            yield self.model

    def state_dict(self) -> dict[str, Any]:
        return {"global_model": self.global_model, "delta": self.delta, "pending": self.pending}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:  # checkpoints load to CPU: back to the device the model trains on
            device = self.global_model.device
            self.global_model = state["global_model"].to(device, copy=True)
            self.delta = state["delta"].to(device, copy=True)
            self.pending = int(state["pending"])


def timed_exchange(algo: Any, params: list, optimizer: Any, world: int) -> Any:
    """One block's local arithmetic as the strategy does it (not its all-reduce), on `params`:
    what the planner's profile times (planner/profile.py)."""
    eta = algo.block_momentum if algo.block_momentum is not None else 1.0 - 1.0 / world
    state = {"w": parameters_to_vector(params).detach().clone()}
    state["delta"] = torch.zeros_like(state["w"])

    def exchange() -> None:
        # The strategy divides the all-reduced sum by the world size; alone, this replica is
        # the average, so the same division is by 1.
        avg = parameters_to_vector(params).detach().clone().div_(1.0)
        state["w"], state["delta"], start = block_update(
            state["w"], avg, state["delta"], eta, algo.block_lr, algo.nesterov
        )
        vector_to_parameters(start, params)
        if algo.reset_momentum:
            for st in optimizer.state.values():
                st.pop("momentum_buffer", None)

    return exchange
