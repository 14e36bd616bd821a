"""SSP over a real thread: a worker that runs too far ahead is held until the slowest catches up
(proving it waits takes a real wait)."""

from __future__ import annotations

import threading

import torch

from tests.unit.test_strategies import _push, _shard, _spec


def test_ssp_holds_a_worker_that_runs_too_far_ahead():
    shard = _shard(_spec(staleness_bound=1), [torch.zeros(2)])
    g = [torch.ones(2)]
    _push(shard, 0, 1, g)  # 1 step ahead of worker 1: within the bound
    done = threading.Event()

    def ahead():
        _push(shard, 0, 2, g)  # 2 ahead: must wait for worker 1
        done.set()

    t = threading.Thread(target=ahead, daemon=True)
    t.start()
    # Can only fail if the push returns while worker 1 is still 2 steps behind.
    assert not done.wait(0.5)
    _push(shard, 1, 1, g)  # the slowest catches up: 1 behind, worker 0 may go on
    assert done.wait(10)
    # A finished worker no longer holds the others back.
    shard.done.add(1)
    _push(shard, 0, 5, g)
