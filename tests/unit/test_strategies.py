"""Training paradigms without processes: the update formulas on hand-computable tensors, the
parameter server's shard logic (push, SSP, elastic, done, checkpoint), its wire protocol,
the large-batch rules, and the launcher side of the server role."""

from __future__ import annotations

import math
import socket
import threading
from pathlib import Path

import pytest
import torch

from alchemist_jobs.errors import UserError
from alchemist_jobs.runtime import ps_wire
from alchemist_jobs.runtime.checkpoint import Checkpointer
from alchemist_jobs.runtime.faults import slowdown
from alchemist_jobs.runtime.metrics import WorkerMetrics
from alchemist_jobs.runtime.optim import LARS, build_optimizer
from alchemist_jobs.runtime.parameter_server import Shard
from alchemist_jobs.runtime.schedule import LRSchedule, build_schedule, lr_scale
from alchemist_jobs.runtime.strategies.bmuf import block_update
from alchemist_jobs.runtime.strategies.easgd import elastic_round
from alchemist_jobs.spec import JobSpec, parse_spec

T = torch.tensor


# --- BMUF and EASGD formulas --------------------------------------------------------------------


def test_bmuf_block_update_by_hand():
    # Nesterov: the block began at S = W_prev + η·Δ_prev = [1.5, 2]; G = W̄ - S = [1.5, 0];
    # Δ = 0.5*[1, 0] + 2*[1.5, 0] = [3.5, 0]; W = W_prev + Δ = [4.5, 2]
    w, delta, start = block_update(
        T([1.0, 2.0]), T([3.0, 2.0]), T([1.0, 0.0]), eta=0.5, zeta=2.0, nesterov=True
    )
    assert torch.equal(delta, T([3.5, 0.0]))
    assert torch.equal(w, T([4.5, 2.0]))
    assert torch.equal(start, T([6.25, 2.0]))  # Nesterov: W + η·Δ
    # Without Nesterov the block began at W_prev: G = [2, 0], Δ = [4.5, 0], W = [5.5, 2]
    w, delta, plain = block_update(
        T([1.0, 2.0]), T([3.0, 2.0]), T([1.0, 0.0]), eta=0.5, zeta=2.0, nesterov=False
    )
    assert torch.equal(delta, T([4.5, 0.0]))
    assert torch.equal(plain, T([5.5, 2.0])) and torch.equal(w, plain)


@pytest.mark.parametrize("nesterov", [True, False])
def test_bmuf_block_momentum_decays_by_eta_when_a_block_makes_no_progress(nesterov):
    # Chen & Huo (ICASSP 2016), eqs. 3-6: G(t) = W̄(t) - W_g(t-1), the block's progress from
    # where the workers began it (W_g = W + η·Δ with Nesterov; CNTK's BlockMomentumSGD and
    # fairseq's bmuf.py keep that point as the reference too). Workers that stay where they
    # began add nothing, so the filtered update decays geometrically with ratio η, never
    # grows (measuring G from W instead made it 2η·Δ: no decay at all for η = 1 - 1/2).
    eta = 0.5
    w, delta = T([0.0, 0.0]), T([1.0, -2.0])
    for _ in range(4):
        began = w + eta * delta if nesterov else w
        w_next, new_delta, start = block_update(w, began.clone(), delta, eta=eta, zeta=1.0, nesterov=nesterov)
        assert torch.allclose(new_delta, eta * delta)
        assert torch.allclose(w_next, w + eta * delta)
        w, delta = w_next, new_delta


def test_bmuf_without_momentum_is_model_averaging():
    g = torch.Generator().manual_seed(1)
    w_prev, avg, delta = (torch.randn(50, generator=g) for _ in range(3))
    w, new_delta, start = block_update(w_prev, avg, delta, eta=0.0, zeta=1.0, nesterov=True)
    assert torch.allclose(w, avg) and torch.allclose(start, avg)
    assert torch.allclose(new_delta, avg - w_prev)


def test_easgd_round_by_hand():
    # Two workers x1 = [1, 3], x2 = [3, -1], centre [0, 1], α = 0.25.
    # Σ(x_j - x̃) = [1, 2] + [3, -2] = [4, 0].
    x1, centre = T([1.0, 3.0]), T([0.0, 1.0])
    x1_new, centre_new = elastic_round(x1, centre, T([4.0, 0.0]), alpha=0.25)
    assert torch.equal(x1_new, T([0.75, 2.5]))
    assert torch.equal(centre_new, T([1.0, 1.0]))


# --- shard layout and wire protocol --------------------------------------------------------------


def test_shard_layout_balances_whole_tensors_in_model_order():
    layout = ps_wire.shard_layout([100, 10, 50, 5], 2)
    assert layout == [[0], [1, 2, 3]]
    assert ps_wire.shard_layout([100, 10, 50, 5], 1) == [[0, 1, 2, 3]]
    three = ps_wire.shard_layout([4, 4, 4, 4, 4, 4], 3)
    assert sorted(i for s in three for i in s) == list(range(6))
    assert [len(s) for s in three] == [2, 2, 2]
    assert ps_wire.shard_layout([7], 2) == [[0], []]  # more shards than tensors: one idles


def test_parse_addrs():
    assert ps_wire.parse_addrs("10.0.0.1:29600, h:5") == [("10.0.0.1", 29600), ("h", 5)]
    with pytest.raises(ValueError, match="not HOST:PORT"):
        ps_wire.parse_addrs("host-without-port")
    with pytest.raises(ValueError, match="empty"):
        ps_wire.parse_addrs("")


def test_wire_round_trip_is_exact():
    a, b = socket.socketpair()
    try:
        vec = torch.randn(1000)
        sent = ps_wire.send(a, {"op": "push", "lr": 0.1}, ps_wire.as_bytes(vec))
        h, payload, got = ps_wire.recv(b)
        assert h == {"op": "push", "lr": 0.1}
        assert sent == got == ps_wire.HEAD.size + len(b'{"op":"push","lr":0.1}') + 4000
        assert torch.equal(ps_wire.from_bytes(payload), vec)
        a.sendall(ps_wire.HEAD.pack(ps_wire.MAX_HEADER + 1, 0))
        with pytest.raises(ps_wire.ProtocolError):
            ps_wire.recv(b)
    finally:
        a.close()
        b.close()


# --- the parameter server's shard -------------------------------------------------------------


def _spec(**algo) -> JobSpec:
    return JobSpec(
        name="t",
        task={"builtin": "digits"},
        procs_per_node=2,
        algorithm={"name": "async", **algo},
        hyper={"lr": 0.1, "momentum": 0.9},
        checkpoint={"every_steps": 1000},
    )


def _shard(spec: JobSpec, tensors, ckpt: Checkpointer | None = None) -> Shard:
    metrics = WorkerMetrics({}, role="server", enabled=False)
    return Shard(spec, 0, [f"p{i}" for i in range(len(tensors))], tensors, spec.world_size, metrics, ckpt)


def test_a_shard_without_a_model_answers_other_ranks_once_rank_0_brought_it():
    """Workers other than rank 0 wait in their hello until rank 0's gives the shard its model,
    and then hold rank 0's values, whatever they built themselves."""
    import threading

    spec = _spec()
    shard = Shard(spec, 0, None, None, spec.world_size, WorkerMetrics({}, role="server", enabled=False), None)
    model = [torch.arange(6.0).view(2, 3), torch.ones(3)]
    answers: list = []
    waiter = threading.Thread(
        target=lambda: answers.append(shard.hello(dict(op="hello", rank=1, names=["p0", "p1"]))), daemon=True
    )
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not answers and not shard.ready
    shard.hello(
        dict(op="hello", rank=0, names=["p0", "p1"], shapes=[[2, 3], [3]]),
        bytearray(ps_wire.as_bytes(ps_wire.flat(model))),
    )
    waiter.join(10)
    assert answers and answers[0][0] == {"version": 0, "world": 2}
    assert torch.equal(shard.vector(), ps_wire.flat(model))


def _push(shard: Shard, rank: int, clock: int, grads: list[torch.Tensor], read: int = 0, lr: float = 0.1):
    payload = bytearray(ps_wire.as_bytes(ps_wire.flat(grads)))
    return shard.push(dict(op="push", rank=rank, clock=clock, lr=lr, read=read), payload)


def test_push_applies_the_jobs_optimizer_exactly():
    spec = _spec()
    init = [torch.randn(3, 4), torch.randn(4)]
    shard = _shard(spec, init)
    local = [torch.nn.Parameter(t.clone()) for t in init]
    opt = build_optimizer(spec.hyper, local)  # SGD with momentum 0.9, as the workers' loop
    for step in range(3):
        grads = [torch.randn_like(t) for t in init]
        reply, vec = _push(shard, rank=step % 2, clock=step + 1, grads=grads, read=step, lr=0.1 * (step + 1))
        for p, g in zip(local, grads):
            p.grad = g
        for group in opt.param_groups:
            group["lr"] = 0.1 * (step + 1)
        opt.step()
        assert reply["version"] == step + 1
        assert torch.equal(vec, ps_wire.flat(local))


def test_staleness_is_updates_applied_since_the_workers_read():
    shard = _shard(_spec(), [torch.zeros(2)])
    g = [torch.ones(2)]
    _push(shard, 0, 1, g, read=0)
    _push(shard, 0, 2, g, read=1)
    reply, _ = _push(shard, 1, 1, g, read=0)  # read before both of worker 0's updates
    assert reply["staleness"] == 2


def test_done_answers_once_every_worker_is_done_and_hello_reopens():
    shard = _shard(_spec(), [torch.full((2,), 3.0)])
    answers = []
    t = threading.Thread(target=lambda: answers.append(shard.done_wait({"rank": 0})), daemon=True)
    t.start()
    t.join(0.3)
    assert t.is_alive() and not answers  # worker 1 still training
    shard.hello({"rank": 0, "names": shard.names})  # worker 0 restarted: running again
    assert 0 not in shard.done
    shard.done.add(0)
    _, vec = shard.done_wait({"rank": 1})
    t.join(10)
    assert torch.equal(vec, T([3.0, 3.0])) and answers
    shard.release(0)
    assert not shard.finished.is_set()
    shard.release(1)
    assert shard.finished.is_set()


def test_hello_rejects_a_different_model():
    shard = _shard(_spec(), [torch.zeros(2)])
    reply, _ = shard.hello({"rank": 0, "names": ["other"]})
    assert "different models" in reply["error"]


def test_elastic_exchange_moves_centre_and_answers_the_difference():
    spec = JobSpec(
        name="t",
        task={"builtin": "digits"},
        procs_per_node=2,
        algorithm={"name": "easgd", "variant": "async", "alpha": 0.25},
    )
    shard = _shard(spec, [T([0.0, 1.0])])
    reply, e = shard.elastic(
        dict(rank=0, clock=8, alpha=0.25, read=0), bytearray(ps_wire.as_bytes(T([1.0, 3.0])))
    )
    assert torch.equal(e, T([0.25, 0.5]))  # α(x - x̃)
    assert torch.equal(shard.vector(), T([0.25, 1.5]))  # x̃ + α(x - x̃)
    assert reply["version"] == 1


def test_shard_checkpoint_resumes_params_optimizer_version_and_clocks(tmp_path: Path):
    spec = _spec()
    ckpt = Checkpointer(tmp_path, keep=2, prefix="server0")
    shard = _shard(spec, [torch.randn(5)], ckpt)
    for c in range(1, 4):
        _push(shard, 0, c, [torch.randn(5)], read=c - 1)
    shard.checkpoint()
    again = _shard(spec, [torch.zeros(5)], ckpt)
    step, state = ckpt.latest()
    again.load_state_dict(state)
    assert step == 3 and again.version == 3 and again.clocks[0] == 3
    assert torch.equal(again.vector(), shard.vector())
    # momentum restored: the same next gradient gives the same parameters
    g = [torch.randn(5)]
    assert torch.equal(_push(shard, 1, 1, g, read=3)[1], _push(again, 1, 1, g, read=3)[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "server0-000000003.pt",
        "server0-000000003.pt.sha256",
    ]


# --- large-batch rules ------------------------------------------------------------------------


def test_lr_scaling_rules():
    assert lr_scale("none", 4096, 32) == 1.0
    assert lr_scale("linear", 4096, 32) == 128.0
    assert lr_scale("sqrt", 4096, 32) == pytest.approx(math.sqrt(128))


def test_warmup_goes_from_base_lr_to_the_scaled_peak():
    s = LRSchedule(base_lr=0.1, scale=8.0, warmup_steps=4, total_steps=100)
    lrs = [s(i) for i in range(6)]
    assert lrs[0] == pytest.approx(0.1 + 0.7 / 4)
    assert lrs[3] == pytest.approx(0.8) and lrs[4] == pytest.approx(0.8) == lrs[5]
    assert all(a < b for a, b in zip(lrs[:4], lrs[1:4]))
    small = LRSchedule(base_lr=0.1, scale=1.0, warmup_steps=4, total_steps=100)
    assert small(0) == pytest.approx(0.025)  # no scaling: warm up from 0


def test_decay_after_warmup():
    cos = LRSchedule(base_lr=1.0, scale=1.0, warmup_steps=10, total_steps=110, decay="cosine")
    assert cos(10) == pytest.approx(1.0) and cos(60) == pytest.approx(0.5)
    assert cos(110) == pytest.approx(0.0, abs=1e-12)
    step = LRSchedule(base_lr=1.0, scale=1.0, warmup_steps=0, total_steps=100, decay="step")
    assert [step(i) for i in (0, 49, 50, 75)] == pytest.approx([1.0, 1.0, 0.1, 0.01])


def test_warmup_epochs_are_counted_in_optimizer_steps():
    spec = JobSpec(
        name="t",
        task={"builtin": "digits"},
        hyper={
            "lr": 0.1,
            "lr_scaling": "linear",
            "reference_batch": 32,
            "batch_size": 128,
            "warmup_epochs": 2.5,
        },
    )
    s = build_schedule(spec.hyper, global_batch=256, steps_per_epoch=6, total_steps=60)
    assert s.warmup_steps == 15 and s.peak == pytest.approx(0.8)


def test_lars_step_by_hand():
    w = torch.nn.Parameter(T([[3.0, 4.0]]))  # ||w|| = 5
    b = torch.nn.Parameter(T([1.0]))
    opt = LARS([w, b], lr=1.0, momentum=0.0, weight_decay=0.0, eta=0.01)
    w.grad, b.grad = T([[0.6, 0.8]]), T([0.5])  # ||g|| = 1 -> trust 0.01 * 5 / 1 = 0.05
    opt.step()
    assert torch.allclose(w.detach(), T([[3.0 - 0.03, 4.0 - 0.04]]))
    assert torch.allclose(b.detach(), T([0.5]))  # biases take the plain step


def test_lars_weight_decay_follows_the_paper():
    w = torch.nn.Parameter(T([[3.0, 4.0]]))
    opt = LARS([w], lr=1.0, momentum=0.0, weight_decay=0.1, eta=0.01)
    w.grad = T([[0.6, 0.8]])
    opt.step()
    trust = 0.01 * 5 / (1 + 0.1 * 5)  # η||w|| / (||g|| + β||w||)
    expect = T([[3.0, 4.0]]) - trust * (T([[0.6, 0.8]]) + 0.1 * T([[3.0, 4.0]]))
    assert torch.allclose(w.detach(), expect)


# --- fault injection, spec, launcher side -----------------------------------------------------------


def test_slow_ranks_knob():
    assert slowdown(1, "1:3") == 3.0 and slowdown(0, "1:3") == 1.0
    assert slowdown(2, "0:1.5, 2:2") == 2.0 and slowdown(0, "") == 1.0
    with pytest.raises(ValueError, match="RANK:FACTOR"):
        slowdown(0, "fast")
    with pytest.raises(ValueError, match="below 1"):
        slowdown(0, "0:0.5")


def test_spec_errors_name_the_field():
    base = dict(name="t", task={"builtin": "digits"}, procs_per_node=2, hyper={"batch_size": 256})
    with pytest.raises(
        UserError,
        match=r"^job.yaml: algorithm.grad_accum: 3 micro-batches .*"
        r"accepted: grad_accum <= 2$",
    ):
        parse_spec(dict(base, algorithm={"name": "sync", "grad_accum": 3}), "job.yaml")
    with pytest.raises(
        UserError,
        match=r"algorithm.block_momentum: 1 is invalid; accepted: "
        r"a number < 1",
    ):
        parse_spec(dict(base, algorithm={"name": "bmuf", "block_momentum": 1}), "job.yaml")
    with pytest.raises(
        UserError,
        match=r"algorithm.variant: 'ring' is invalid; accepted: "
        r"one of sync or async$",
    ):
        parse_spec(dict(base, algorithm={"name": "easgd", "variant": "ring"}), "job.yaml")


def test_server_role_only_for_parameter_server_algorithms(tmp_path: Path):
    from alchemist_jobs.local_backend import LocalScheduler
    from alchemist_jobs.server_role import CLUSTER_BASE_PORT, server_count

    def spec(algo):
        return JobSpec(name="t", task={"builtin": "digits"}, procs_per_node=2, algorithm=algo)

    assert server_count(spec({"name": "sync"})) == 0
    assert server_count(spec({"name": "bmuf"})) == 0
    assert server_count(spec({"name": "easgd"})) == 0
    assert server_count(spec({"name": "easgd", "variant": "async"})) == 1
    assert server_count(spec({"name": "async", "servers": 2})) == 2
    assert CLUSTER_BASE_PORT == 29600

    sched = LocalScheduler(tmp_path)
    req = sched.dryrun(spec({"name": "async", "servers": 2}), tmp_path)
    text = req.describe()
    assert text.count("-m alchemist_jobs.runtime.parameter_server") == 2
    ports = [s.port for s in req.servers]  # real free ports, picked by the dry run
    assert all(isinstance(p, int) and p > 0 for p in ports) and len(set(ports)) == 2
    assert "ALCHEMIST_PS_SHARD=1" in text and f"ALCHEMIST_PS_PORT={ports[1]}" in text
    assert f"ALCHEMIST_PS_ADDRS=127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}" in text
    assert not list(tmp_path.iterdir())  # dryrun creates nothing
    plain = sched.dryrun(spec({"name": "bmuf"}), tmp_path).describe()
    assert "parameter_server" not in plain and "ALCHEMIST_PS_ADDRS" not in plain
