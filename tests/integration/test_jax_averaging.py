"""bmuf and easgd in a JAX script's own loop (issue 41, beyond the anchors): two real JAX
processes on CPU under `alchemist run` call alchemist_jobs.jax_averaging every step; at each
block's end their parameters are what the torch strategies' own maths gives for the same
inputs (runtime/strategies/bmuf.block_update, easgd.elastic_round), to float32 rounding; in
between they are left alone; bmuf clears the momentum passed (reset_momentum), and finish()
hands every process the global model (bmuf, its partial last block closed) or the centre."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from alchemist_jobs.runtime.strategies.bmuf import block_update, start_point
from alchemist_jobs.runtime.strategies.easgd import elastic_round
from tests.conftest import cli
from tests.integration.test_local_runs import only_run

pytestmark = pytest.mark.timeout(600)

TAU, STEPS, LR = 2, 5, 0.1  # blocks end at steps 2 and 4; finish() closes step 5's partial one

# Each process's gradient differs (its index), so the replicas drift apart within a block.
SCRIPT = """
import json, os
from pathlib import Path
import jax, jax.numpy as jnp, numpy as np
from alchemist_jobs import jax_averaging

jax.distributed.initialize()
me = jax.process_index()
params = {"w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3) / 7, "b": jnp.ones(3, jnp.float32)}
momentum = jax.tree.map(jnp.zeros_like, params)
flat = lambda t: np.concatenate([np.ravel(x) for x in jax.tree.leaves(t)]).tolist()
averaging = jax_averaging.averaging(params)
records = []
for step in range(1, %(steps)d + 1):
    grads = jax.tree.map(lambda p: (me + 1.0) * jnp.sin(p * step), params)
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, grads)
    params = jax.tree.map(lambda p, m: p - %(lr)r * m, params, momentum)
    before = flat(params)
    params, momentum = averaging.step(step, params, momentum)
    records.append({"before": before, "after": flat(params), "momentum": flat(momentum)})
final = averaging.finish(params)
Path(os.environ["OUT_DIR"], f"rank-{me}.json").write_text(
    json.dumps({"records": records, "final": flat(final)}))
"""

# The script's params flattened as jax orders a dict's leaves (by key: "b", then "w").
INITIAL = np.concatenate([np.ones(3, np.float32), np.arange(6, dtype=np.float32) / 7])


def _run(tmp_path, home, algorithm: str) -> list[dict]:
    (tmp_path / "train.py").write_text(SCRIPT % {"steps": STEPS, "lr": LR})
    (tmp_path / "job.yaml").write_text(
        f"name: avg\ntask: {{script: train.py, framework: jax}}\nprocs_per_node: 2\nmax_restarts: 0\n"
        f"algorithm: {algorithm}\n"
    )
    out = tmp_path / "out"
    out.mkdir()
    r = cli("run", str(tmp_path / "job.yaml"), "--quiet", "--set", f"env.OUT_DIR={out}", timeout=500)
    logs = "".join(p.read_text()[-2000:] for p in (home / "runs").glob("*/logs/rank-*.log"))
    assert r.returncode == 0, r.stdout + r.stderr + logs
    assert only_run(home).state()["state"] == "succeeded"
    return [json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)]


def _t(values) -> torch.Tensor:
    return torch.tensor(np.asarray(values, np.float32))


def test_bmuf_block_updates_match_the_strategy_s_maths(tmp_path, home):
    ranks = _run(tmp_path, home, f"{{name: bmuf, tau: {TAU}}}")
    eta, zeta, nesterov = 1.0 - 1.0 / 2, 1.0, True  # the spec's defaults for 2 workers
    w, delta = _t(INITIAL), torch.zeros(len(INITIAL))

    def block(xs: list[torch.Tensor]) -> torch.Tensor:
        nonlocal w, delta
        began = start_point(w, delta, eta, nesterov)
        avg = began + sum((x - began for x in xs), torch.zeros_like(began)) / 2  # the all-reduced sum
        w, delta, start = block_update(w, avg, delta, eta, zeta, nesterov)
        return start

    for i in range(STEPS):
        xs = [_t(r["records"][i]["before"]) for r in ranks]
        assert not torch.equal(xs[0], xs[1])  # the replicas drifted apart
        if (i + 1) % TAU == 0:
            start = block(xs)
            for r in ranks:
                assert np.allclose(r["records"][i]["after"], start.numpy(), rtol=1e-6, atol=1e-6), (i, r)
                assert not any(r["records"][i]["momentum"])  # reset_momentum: cleared
        else:
            for r, x in zip(ranks, xs):
                assert r["records"][i]["after"] == x.tolist()  # untouched within a block
    block([_t(r["records"][-1]["after"]) for r in ranks])  # finish(): step 5's partial block
    for r in ranks:
        assert np.allclose(r["final"], w.numpy(), rtol=1e-6, atol=1e-6)  # the global model


def test_easgd_elastic_rounds_match_the_strategy_s_maths(tmp_path, home):
    alpha = 0.3
    ranks = _run(tmp_path, home, f"{{name: easgd, tau: {TAU}, alpha: {alpha}}}")
    centre = _t(INITIAL)
    for i in range(STEPS):
        xs = [_t(r["records"][i]["before"]) for r in ranks]
        if (i + 1) % TAU == 0:
            diff_sum = (xs[0] - centre) + (xs[1] - centre)
            new = [elastic_round(x, centre, diff_sum, alpha) for x in xs]
            for r, (x_new, _) in zip(ranks, new):
                assert np.allclose(r["records"][i]["after"], x_new.numpy(), rtol=1e-6, atol=1e-6), (i, r)
            centre = new[0][1]
        else:
            for r, x in zip(ranks, xs):
                assert r["records"][i]["after"] == x.tolist()
    for r in ranks:
        assert np.allclose(r["final"], centre.numpy(), rtol=1e-6, atol=1e-6)  # the centre
