"""A worker's checkpoints under its strategy, the same for the trainer and a user's own loop.

Collective strategies (sync, bmuf, easgd) gather every rank's RNG state (and its model and
optimizer where replicas differ within a block) and rank 0 writes one `step-<S>.pt`;
strategies whose workers never stand at the same step (async) write one `rank<N>-<S>.pt`
each, the model itself living on the parameter servers. Files are written and checked by
runtime/checkpoint.py (atomic, SHA-256). Restoring is two halves: before the strategy
wraps the model, the checkpoint's shared model (identical on every rank, as a fresh start
is: bmuf and easgd check that); after it, the optimizer, the strategy's state, the RNG, and
the rank's own model where replicas differed when the checkpoint was taken.
"""

from __future__ import annotations

import io
from typing import Any

import torch
import torch.distributed as dist

from alchemist_jobs.rundir import RunDir
from alchemist_jobs.runtime.checkpoint import Checkpointer
from alchemist_jobs.runtime.strategies.base import Strategy
from alchemist_jobs.runtime.train_state import rng_state, set_rng_state

Loaded = tuple[int, dict[str, Any], dict[str, Any]]  # (step, payload, this rank's entry)


class WorkerCheckpoints:
    def __init__(self, run: RunDir, keep: int, strategy: Strategy, rank: int, world: int, cuda: bool):
        self.strategy, self.rank, self.world, self.cuda = strategy, rank, world, cuda
        prefix = "step" if strategy.collective_checkpoint else f"rank{rank}"
        self.checkpointer = Checkpointer(run.checkpoints, keep=keep, prefix=prefix)

    @property
    def writes(self) -> bool:
        """This rank writes files (rank 0 of a collective strategy, every rank otherwise)."""
        return self.rank == 0 or not self.strategy.collective_checkpoint

    def newest(self) -> Loaded | None:
        """The newest complete checkpoint and this rank's part of it, or None."""
        loaded = self.checkpointer.latest()
        if loaded is None:
            return None
        step, payload = loaded
        return step, payload, rank_entry(payload, self.rank)

    def restore_model(self, model: torch.nn.Module, loaded: Loaded) -> None:
        """The checkpoint's model (rank 0's, or this worker's own for async), before the
        strategy wraps the model: every rank of a collective strategy starts the same."""
        model.load_state_dict(loaded[1]["model"])

    def restore_rest(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loaded: Loaded) -> None:
        """Once the strategy is set up: this rank's own model where replicas differed, the
        optimizer, the strategy's state and the RNG."""
        _, payload, mine = loaded
        if "model" in mine:
            model.load_state_dict(mine["model"])
        # this rank's own optimizer where replicas differed, else the one every rank shares
        optimizer.load_state_dict(mine["optimizer"] if "optimizer" in mine else payload["optimizer"])
        self.strategy.load_state_dict(payload.get("strategy", {}))
        if "rng" in mine:
            set_rng_state(mine["rng"], cuda=self.cuda)

    def save(
        self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, fields: dict[str, Any]
    ) -> int | None:
        """Every rank calls this at the same step (collective strategies); returns the bytes
        written by this rank, None where another rank writes."""
        strategy = self.strategy
        mine: dict[str, Any] = {"rng": rng_state(cuda=self.cuda)}
        if not strategy.replicas_identical:
            mine["model"], mine["optimizer"] = model.state_dict(), optimizer.state_dict()
        ranks: Any = gather_to_all(mine, self.world) if strategy.collective_checkpoint else {self.rank: mine}
        if not self.writes:
            return None
        _, size, _ = self.checkpointer.save(
            step,
            dict(
                fields,
                model=model.state_dict(),
                optimizer=optimizer.state_dict(),
                strategy=strategy.state_dict(),
                ranks=ranks,
            ),
        )
        return size


def gather_to_all(obj: dict[str, Any], world: int) -> list[dict[str, Any]]:
    """all_gather_object of a dict holding tensors. Serialised with torch.save first:
    all_gather_object's own pickling of tensors fails to load on torch 2.13
    ("UntypedStorage has no attribute dtype"). Loaded to CPU: without map_location every
    process would touch every rank's GPU."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    blobs: list[Any]  # each rank's bytes
    if world == 1 or not dist.is_initialized():
        blobs = [buf.getvalue()]
    else:
        blobs = [None] * world  # all_gather_object fills every slot
        dist.all_gather_object(blobs, buf.getvalue())
    return [torch.load(io.BytesIO(b), map_location="cpu", weights_only=True) for b in blobs]


def rank_entry(payload: dict[str, Any], rank: int) -> dict[str, Any]:
    """This rank's part of a checkpoint: a list indexed by rank (collective) or {rank: ...}."""
    ranks = payload.get("ranks", [])
    if isinstance(ranks, dict):
        return ranks.get(rank, {})
    return ranks[rank] if rank < len(ranks) else {}
