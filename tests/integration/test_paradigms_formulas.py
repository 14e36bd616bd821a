"""Strategies against their formulas, with real gloo collectives between real processes,
and the one-worker reduction to plain SGD through the real training loop.

Two forked processes form a gloo group over 127.0.0.1; each runs a strategy's real hooks on
a small model whose parameters the test sets per rank, then reports what it holds.
"""

from __future__ import annotations

import io
import multiprocessing as mp
import os
import threading
import time
import traceback
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from alchemist_jobs.processes import free_port
from alchemist_jobs.runtime.metrics import WorkerMetrics
from alchemist_jobs.runtime.strategies import build_strategy
from alchemist_jobs.runtime.strategies.base import WorkerContext
from alchemist_jobs.spec import JobSpec


def _run_ranks(fn, world: int = 2, **kw) -> list:
    """Run fn(rank, world, **kw) in `world` forked processes joined by gloo; their results."""
    ctx = mp.get_context("fork")
    port, q = free_port(), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(fn, r, world, port, q, kw)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        out = dict(q.get(timeout=60) for _ in procs)
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    errors = [v for v in out.values() if isinstance(v, str)]
    assert not errors, errors[0]
    return [torch.load(io.BytesIO(out[r]), weights_only=True) for r in range(world)]


def _child(fn, rank, world, port, q, kw):
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        res = fn(rank, world, **kw)
        dist.barrier()
        buf = io.BytesIO()
        torch.save(res, buf)  # plain bytes: torch's queue reduction would share memory
        q.put((rank, buf.getvalue()))
    except BaseException:
        q.put((rank, traceback.format_exc()))
    finally:
        q.close()
        q.join_thread()  # the queue's feeder thread must flush before the hard exit
        os._exit(0)  # no gloo teardown in the fork (alchemist_jobs/runtime/bootstrap.py says why)


def _strategy(rank: int, world: int, algo: dict, model: torch.nn.Module):
    spec = JobSpec(name="t", task={"builtin": "digits"}, procs_per_node=world, algorithm=algo)
    ctx = WorkerContext(spec=spec, rank=rank, world_size=world, local_rank=rank,
                        device=torch.device("cpu"),
                        metrics=WorkerMetrics({}, enabled=False))
    strategy = build_strategy(ctx)
    return strategy, strategy.setup(model), ctx


def _model(features: int = 3, hidden: int = 4, classes: int = 2) -> torch.nn.Module:
    torch.manual_seed(0)  # identical on every rank, as the loop's seeding makes it
    return torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, classes))


# The sync model: both weight matrices are worth compressing at PowerSGD rank 2
# ((16+8)*2 < 16*8 and (4+16)*2 < 4*16).
SYNC_MODEL = dict(features=8, hidden=16, classes=4)


def _local_block(model: torch.nn.Module, rank: int, block: int) -> torch.Tensor:
    """Stand-in for a block of local steps: a rank- and block-specific move, known to both."""
    g = torch.Generator().manual_seed(100 * block + rank)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g))
    return parameters_to_vector(model.parameters()).detach().clone()


# --- BMUF -----------------------------------------------------------------------------------------


def _bmuf_ranks(rank, world, eta, zeta, nesterov, tau=2, blocks=2, **more):
    model = _model()
    s, _, ctx = _strategy(rank, world, dict(name="bmuf", tau=tau, block_momentum=eta,
                                            block_lr=zeta, nesterov=nesterov, **more), model)
    seen = {"w0": parameters_to_vector(model.parameters()).detach().clone()}
    for block in range(1, blocks + 1):
        seen[f"local{block}"] = _local_block(model, rank, block)
        for step in range(1, tau + 1):
            s.after_step((block - 1) * tau + step)
        seen[f"after{block}"] = parameters_to_vector(model.parameters()).detach().clone()
    s.finish()
    seen["final"] = parameters_to_vector(model.parameters()).detach().clone()
    seen["rounds"], seen["sent"] = ctx.comm.rounds, ctx.comm.sent_bytes
    return seen


def test_bmuf_without_momentum_is_periodic_model_averaging():
    r = _run_ranks(_bmuf_ranks, eta=0.0, zeta=1.0, nesterov=True)
    for block in (1, 2):
        avg = (r[0][f"local{block}"] + r[1][f"local{block}"]) / 2
        for rank in (0, 1):
            assert torch.allclose(r[rank][f"after{block}"], avg, atol=1e-6)
    n = r[0]["w0"].numel()
    assert r[0]["rounds"] == 2  # one all-reduce per block, none in finish (no partial block)
    # ring all-reduce with 2 ranks moves the model once each way, plus the start check
    assert r[0]["sent"] == pytest.approx(2 * n * 4 + 16)


def test_bmuf_block_momentum_and_nesterov_follow_the_formula():
    eta, zeta = 0.5, 1.5
    r = _run_ranks(_bmuf_ranks, eta=eta, zeta=zeta, nesterov=True)
    w_prev, delta = r[0]["w0"], torch.zeros_like(r[0]["w0"])
    for block in (1, 2):
        # the workers began this block from the previous restart point (not from W), and
        # the block's progress is measured from there (Chen & Huo 2016, eq. 3)
        avg = (r[0][f"local{block}"] + r[1][f"local{block}"]) / 2
        delta = eta * delta + zeta * (avg - (w_prev + eta * delta))
        w_prev = w_prev + delta
        for rank in (0, 1):
            assert torch.allclose(r[rank][f"after{block}"], w_prev + eta * delta, atol=1e-5)
    for rank in (0, 1):  # finish hands out the global model W, not the look-ahead point
        assert torch.allclose(r[rank]["final"], w_prev, atol=1e-5)
    assert torch.equal(r[0]["final"], r[1]["final"])


def test_bmuf_finish_closes_a_partial_block():
    r = _run_ranks(_bmuf_partial)
    avg = (r[0]["local"] + r[1]["local"]) / 2
    assert torch.allclose(r[0]["final"], avg, atol=1e-6) and torch.equal(r[0]["final"], r[1]["final"])
    assert r[0]["rounds"] == 1


def _bmuf_partial(rank, world):
    model = _model()
    s, _, ctx = _strategy(rank, world, dict(name="bmuf", tau=4, block_momentum=0.0), model)
    local = _local_block(model, rank, 1)
    s.after_step(1)
    s.after_step(2)  # half a block, then training ends
    s.finish()
    return {"local": local, "final": parameters_to_vector(model.parameters()).detach().clone(),
            "rounds": ctx.comm.rounds}


def test_overlapped_bmuf_applies_each_block_update_one_block_late():
    eta, zeta = 0.5, 1.5
    r = _run_ranks(_bmuf_ranks, eta=eta, zeta=zeta, nesterov=True, blocks=3, overlap=True)
    w, delta = r[0]["w0"], torch.zeros_like(r[0]["w0"])
    x = {k: r[k]["w0"] for k in (0, 1)}  # each worker's model
    sent: dict = {}
    for block in (1, 2, 3):
        # the block's local moves, on top of where the worker stood
        x = {k: x[k] + (r[k][f"local{block}"] - r[k][f"after{block - 1}"] if block > 1
                        else r[k]["local1"] - r[k]["w0"]) for k in (0, 1)}
        if sent:  # the exchange started a block ago lands: its update moves the snapshot
            avg = (sent[0] + sent[1]) / 2
            delta = eta * delta + zeta * (avg - (w + eta * delta))
            w = w + delta
            x = {k: x[k] + (w + eta * delta - sent[k]) for k in (0, 1)}
        sent = dict(x)
        for k in (0, 1):
            assert torch.allclose(r[k][f"after{block}"], x[k], atol=1e-5), (block, k)
    avg = (sent[0] + sent[1]) / 2  # finish lands the last one and hands out W
    w = w + eta * delta + zeta * (avg - (w + eta * delta))
    for k in (0, 1):
        assert torch.allclose(r[k]["final"], w, atol=1e-5)
    assert torch.equal(r[0]["final"], r[1]["final"])
    assert r[0]["rounds"] == 3  # one exchange per block, the last landed by finish
    # the non-overlapped run differs: block 2 already moves by block 1's average
    r_sync = _run_ranks(_bmuf_ranks, eta=eta, zeta=zeta, nesterov=True, blocks=3)
    assert not torch.allclose(r_sync[0]["after1"], r[0]["after1"], atol=1e-3)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_half_precision_exchange_sends_half_the_bytes_and_stays_close(dtype):
    full = _run_ranks(_bmuf_ranks, eta=0.5, zeta=1.0, nesterov=True)
    half = _run_ranks(_bmuf_ranks, eta=0.5, zeta=1.0, nesterov=True, exchange_dtype=dtype)
    n = full[0]["w0"].numel()
    assert full[0]["sent"] == pytest.approx(2 * n * 4 + 16)
    assert half[0]["sent"] == pytest.approx(2 * n * 2 + 16)
    tol = 2e-2 if dtype == "bf16" else 2e-3  # the differences' rounding, relative
    for k in (0, 1):
        assert torch.allclose(half[k]["final"], full[k]["final"], rtol=tol, atol=tol)
        assert not torch.equal(half[k]["final"], full[k]["final"])  # it did round


# --- EASGD ----------------------------------------------------------------------------------------


def _easgd_ranks(rank, world, alpha, tau=3, blocks=2, **more):
    model = _model()
    s, _, ctx = _strategy(rank, world, dict(name="easgd", tau=tau, alpha=alpha, **more), model)
    seen = {"c0": parameters_to_vector(model.parameters()).detach().clone()}
    for block in range(1, blocks + 1):
        seen[f"local{block}"] = _local_block(model, rank, block)
        for step in range(1, tau + 1):
            s.after_step((block - 1) * tau + step)
        seen[f"after{block}"] = parameters_to_vector(model.parameters()).detach().clone()
        seen[f"centre{block}"] = s.centre.clone()
    s.finish()
    seen["final"] = parameters_to_vector(model.parameters()).detach().clone()
    seen["rounds"], seen["sent"] = ctx.comm.rounds, ctx.comm.sent_bytes
    return seen


def test_easgd_exchange_follows_the_formula():
    alpha = 0.3
    r = _run_ranks(_easgd_ranks, alpha=alpha)
    centre = r[0]["c0"]
    for block in (1, 2):
        x = [r[k][f"local{block}"] for k in (0, 1)]
        expect_x = [xi - alpha * (xi - centre) for xi in x]
        centre = centre + alpha * sum(xi - centre for xi in x)
        for k in (0, 1):
            assert torch.allclose(r[k][f"after{block}"], expect_x[k], atol=1e-6)
            assert torch.allclose(r[k][f"centre{block}"], centre, atol=1e-6)
    assert torch.equal(r[0]["centre2"], r[1]["centre2"])  # kept identically on every rank
    for k in (0, 1):
        assert torch.equal(r[k]["final"], r[k]["centre2"])  # finish hands out the centre
    assert r[0]["rounds"] == 2


def test_overlapped_easgd_applies_each_elastic_force_one_exchange_late():
    alpha = 0.3
    r = _run_ranks(_easgd_ranks, alpha=alpha, blocks=3, overlap=True)
    centre = r[0]["c0"]
    x = {k: r[k]["c0"] for k in (0, 1)}
    sent: dict = {}
    for block in (1, 2, 3):
        x = {k: x[k] + (r[k][f"local{block}"] - (r[k][f"after{block - 1}"] if block > 1
                                                   else r[k]["c0"])) for k in (0, 1)}
        if sent:
            x = {k: x[k] - alpha * sent[k] for k in (0, 1)}
            centre = centre + alpha * (sent[0] + sent[1])
        sent = {k: x[k] - centre for k in (0, 1)}
        for k in (0, 1):
            assert torch.allclose(r[k][f"after{block}"], x[k], atol=1e-5), (block, k)
            assert torch.allclose(r[k][f"centre{block}"], centre, atol=1e-5), (block, k)
    centre = centre + alpha * (sent[0] + sent[1])  # finish lands the last one
    for k in (0, 1):
        assert torch.allclose(r[k]["final"], centre, atol=1e-5)
    assert r[0]["rounds"] == 3


def test_overlap_and_exchange_dtype_need_the_all_reduce_variant():
    with pytest.raises(ValueError, match="variant: sync"):
        JobSpec(name="t", task={"builtin": "digits"},
                algorithm=dict(name="easgd", variant="async", overlap=True))


# --- sync: compression hooks and gradient accumulation --------------------------------------------


def _sync_ranks(rank, world, compression, accum, steps=4):
    model = _model(**SYNC_MODEL)
    ref = _model(**SYNC_MODEL)  # single-process SGD on everyone's micro-batches: what sync must equal
    s, ddp, ctx = _strategy(rank, world, dict(name="sync", compression=compression,
                                              grad_accum=accum, bucket_mb=0.0001), model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    per_step, digests = [], []
    for step in range(steps):
        batches = {(r, i): _batch(step, r, i) for r in range(world) for i in range(accum)}
        opt.zero_grad(set_to_none=True)
        for i in range(accum):
            x, y = batches[(rank, i)]
            with s.accumulate(last=(i == accum - 1)):
                (F.cross_entropy(ddp(x), y) / accum).backward()
        s.after_backward(step)
        opt.step()
        ctx.comm.close_window()
        ref_opt.zero_grad()
        for (r, i), (x, y) in batches.items():
            (F.cross_entropy(ref(x), y) / (accum * world)).backward()
        ref_opt.step()
        per_step.append(ctx.comm.sent_bytes)
        digests.append(parameters_to_vector(model.parameters()).detach().clone())
    return {"params": digests, "ref": parameters_to_vector(ref.parameters()).detach().clone(),
            "sent": per_step, "rounds": ctx.comm.rounds,
            "numel": sum(p.numel() for p in model.parameters())}


def _batch(step: int, rank: int, micro: int):
    g = torch.Generator().manual_seed(1000 * step + 10 * rank + micro)
    return torch.randn(8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)


@pytest.fixture(scope="module")
def ddp_imports():
    """DDP's first construction imports torch._dynamo (seconds): once, before the forks."""
    import torch._dynamo  # noqa: F401


@pytest.mark.usefixtures("ddp_imports")
@pytest.mark.parametrize("compression,accum,atol,bytes_per_elem", [
    ("none", 1, 1e-6, 4), ("none", 2, 1e-6, 4), ("fp16", 2, 2e-3, 2), ("bf16", 1, 2e-2, 2),
])
def test_sync_equals_sgd_on_the_global_batch(compression, accum, atol, bytes_per_elem):
    r = _run_ranks(_sync_ranks, compression=compression, accum=accum)
    for a, b in zip(r[0]["params"], r[1]["params"]):
        assert torch.equal(a, b)  # replicas never drift, compressed or not
    assert torch.allclose(r[0]["params"][-1], r[0]["ref"], atol=atol)
    # One all-reduce of the whole gradient per optimizer step, however many micro-batches:
    # ring accounting with 2 ranks = the gradient's bytes each way.
    assert r[0]["rounds"] == 4
    assert r[0]["sent"][-1] == pytest.approx(4 * r[0]["numel"] * bytes_per_elem)


@pytest.mark.usefixtures("ddp_imports")
def test_powersgd_compresses_after_its_warmup_steps():
    r = _run_ranks(_sync_ranks, compression="powersgd", accum=1, steps=5)
    for a, b in zip(r[0]["params"], r[1]["params"]):
        assert torch.equal(a, b)
    sent = [b - a for a, b in zip([0.0] + r[0]["sent"], r[0]["sent"])]
    full = r[0]["numel"] * 4
    assert sent[0] == pytest.approx(full) and sent[1] == pytest.approx(full)  # plain warm-up
    # rank-2 factors of the 16x8 and 4x16 weights, (16+8)*2 + (4+16)*2 = 88 floats instead
    # of 192, plus the biases uncompressed (16 + 4)
    assert full == 212 * 4
    assert sent[2] == pytest.approx((88 + 20) * 4) and sent[4] == sent[2]


# --- one worker: every strategy is plain SGD ----------------------------------------------------------


ONE_WORKER_ALGOS = [
    {"name": "sync"},
    {"name": "bmuf", "tau": 4, "block_momentum": 0.9},
    {"name": "easgd", "tau": 4, "alpha": 0.3},
    {"name": "async"},
    {"name": "easgd", "tau": 4, "variant": "async"},
]


@pytest.fixture
def one_worker_env(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delenv("ALCHEMIST_SLOW_RANKS", raising=False)
    return monkeypatch


def _train_one(tmp_path: Path, algo: dict, monkeypatch: pytest.MonkeyPatch) -> str:
    from alchemist_jobs.rundir import RunDir, read_json
    from alchemist_jobs.runtime import parameter_server, trainer
    from alchemist_jobs.server_role import server_count

    spec = JobSpec(name="one", task={"builtin": "digits"}, algorithm=algo, metrics=False,
                   hyper={"steps": 30, "lr": 0.05, "batch_size": 32},
                   checkpoint={"every_steps": 10})
    run = RunDir(tmp_path / "runs" / f"one-{algo['name']}-{algo.get('variant', '')}")
    run.create()
    run.spec.write_text(spec.to_yaml())
    server = None
    if server_count(spec):
        port = free_port()
        monkeypatch.setenv("ALCHEMIST_PS_ADDRS", f"127.0.0.1:{port}")
        server = threading.Thread(target=parameter_server.serve, daemon=True, args=(
            spec, run, 0, port), kwargs=dict(bind="127.0.0.1"))
        server.start()
        # Listening before the worker starts: its hello gives the server the model.
        deadline = time.monotonic() + 60
        while not (run.workers / "server-0.json").exists():
            assert server.is_alive() and time.monotonic() < deadline
            time.sleep(0.05)
    trainer.train(spec, run, tmp_path)
    if server is not None:
        server.join(30)
        assert not server.is_alive()  # the server stops once its worker is done
    return read_json(run.worker_file(0))["final_param_sha256"]


def test_one_worker_every_strategy_is_plain_sgd(tmp_path: Path, one_worker_env):
    digests = {}
    for algo in ONE_WORKER_ALGOS:
        digests[f"{algo['name']}-{algo.get('variant', '')}"] = _train_one(
            tmp_path, algo, one_worker_env)
    # Bit-identical parameters after the same 30 steps: async's server applied the same
    # SGD-with-momentum updates the local optimizer would have.
    assert len(set(digests.values())) == 1, digests
