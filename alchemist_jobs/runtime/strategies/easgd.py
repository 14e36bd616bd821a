"""`easgd`: elastic averaging SGD (Zhang, Choromanska & LeCun, 2015).

Each worker keeps its own parameters x_i, trained by its local optimizer (the local learning
rate is hyper.lr), and is pulled toward a centre variable x̃ by an elastic force. Every tau
steps workers and centre exchange the elastic differences, with moving rate α:

    x_i ← x_i − α·(x_i − x̃)
    x̃   ← x̃ + α·Σ_i (x_i − x̃)

`variant: sync` sums the differences with one all-reduce; the centre is kept identically on
every rank (it is updated from the all-reduced sum), so it needs no exchange of its own.
`variant: async` keeps the centre on a parameter server: each worker, on its own clock,
sends x_i and gets back α·(x_i − x̃) while the server adds the same to x̃ (one atomic
exchange per worker, as in the paper's asynchronous EASGD). The centre is the model that
finish() hands every rank: it is what the method trains.

With `variant: sync`, `exchange_dtype` sets the differences' precision on the wire, and
`overlap: true` hides the exchange behind the next tau steps: each worker snapshots its
difference d_i = x_i − x̃, starts the all-reduce and keeps stepping; tau steps later it
waits for it and applies x_i ← x_i − α·d_i and x̃ ← x̃ + α·Σ_j d_j (the elastic force one
exchange old, on top of the local steps made meanwhile), then starts the next one. A
checkpoint does not keep an exchange in flight: a resumed run drops it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from alchemist_jobs.runtime.strategies.averaging import Exchange, check_same_start, swapped
from alchemist_jobs.runtime.strategies.base import Strategy, WorkerContext

if TYPE_CHECKING:
    from alchemist_jobs.spec import EasgdAlgo


def elastic_round(
    x: torch.Tensor, centre: torch.Tensor, diff_sum: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One synchronous EASGD exchange for one worker: (new x_i, new centre), given
    diff_sum = Σ_j (x_j − x̃) over all workers."""
    return x - alpha * (x - centre), centre + alpha * diff_sum


class EasgdStrategy(Strategy):
    """Synchronous EASGD over all-reduce."""

    name = "easgd"
    replicas_identical = False

    def setup(self, model: torch.nn.Module) -> torch.nn.Module:
        self.model = model
        self.params = list(model.parameters())
        algo = cast(
            "EasgdAlgo", self.ctx.spec.algorithm
        )  # this strategy is built only for its own algorithm (its spec class names it)
        self.tau, self.alpha = algo.tau, algo.alpha
        self.active = self.ctx.world_size > 1 and dist.is_initialized()
        self.centre = parameters_to_vector(self.params).detach().clone()
        self.overlap = algo.overlap
        self.exchange = Exchange(self.ctx.comm, self.ctx.world_size, self.ctx.device, algo.exchange_dtype)
        self.sent: torch.Tensor | None = None  # this worker's difference in flight
        if self.active:
            check_same_start(self.centre, self.ctx.comm, "easgd")
        return model

    def after_step(self, step: int) -> None:
        if self.active and step % self.tau == 0:
            self._overlapped_exchange() if self.overlap else self._exchange()

    @torch.no_grad()
    def _exchange(self) -> None:
        x = parameters_to_vector(self.params).detach()
        diff_sum = self.exchange.sum(x - self.centre)
        x_new, self.centre = elastic_round(x, self.centre, diff_sum, self.alpha)
        vector_to_parameters(x_new, self.params)

    @torch.no_grad()
    def _overlapped_exchange(self) -> None:
        x = parameters_to_vector(self.params).detach()
        if self.exchange.in_flight:
            x = self._land(x)
            vector_to_parameters(x, self.params)
        self.sent = x - self.centre
        self.exchange.start(self.sent)

    def _land(self, x: torch.Tensor) -> torch.Tensor:
        """The exchange in flight, applied to the local model x (a new tensor)."""
        assert self.sent is not None  # set with every start(); landed only while in flight
        diff_sum = self.exchange.land()
        x = x - self.alpha * self.sent
        self.centre = self.centre + self.alpha * diff_sum
        self.sent = None
        return x

    @torch.no_grad()
    def finish(self) -> None:
        if self.active:
            if self.exchange.in_flight:
                self._land(parameters_to_vector(self.params).detach())
            vector_to_parameters(self.centre.clone(), self.params)

    @contextlib.contextmanager
    def evaluation_model(self) -> Iterator[torch.nn.Module]:
        if not self.active:
            assert self.model is not None  # setup() ran first
            yield self.model
            return
        with swapped(self.params, self.centre):
            assert self.model is not None  # setup() ran first
            yield self.model

    def state_dict(self) -> dict[str, Any]:
        return {"centre": self.centre}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:  # checkpoints load to CPU: back to the device the model trains on
            self.centre = state["centre"].to(self.centre.device, copy=True)


def easgd_strategy(ctx: WorkerContext) -> Strategy:
    """The variant the spec asks for (registered as `easgd`)."""
    if cast("EasgdAlgo", ctx.spec.algorithm).variant == "async":  # registered for easgd only
        from alchemist_jobs.runtime.strategies.async_ps import AsyncEasgdStrategy

        return AsyncEasgdStrategy(ctx)
    return EasgdStrategy(ctx)


def timed_exchange(algo: Any, params: list, optimizer: Any, world: int) -> Any:
    """One elastic round's local arithmetic as the strategy does it (not its all-reduce), on
    `params`: what the planner's profile times (planner/profile.py)."""
    centre = {"c": parameters_to_vector(params).detach().clone()}

    def exchange() -> None:
        x = parameters_to_vector(params).detach()
        x_new, centre["c"] = elastic_round(x, centre["c"], x - centre["c"], algo.alpha)
        vector_to_parameters(x_new, params)

    return exchange
