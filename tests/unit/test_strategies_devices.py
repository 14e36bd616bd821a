"""The GPU paths without a GPU: strategies keep every tensor on the model's device, hand
NCCL only device tensors, restore checkpoint state to the device, and BMUF's local steps
never move the global model. See tests/unit/fake_gpu.py for the stand-in GPU."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch

from alchemist_jobs.runtime import ps_wire
from alchemist_jobs.runtime.metrics import WorkerMetrics
from alchemist_jobs.runtime.strategies.async_ps import AsyncEasgdStrategy, HostStaging
from alchemist_jobs.runtime.strategies.base import CommStats, WorkerContext
from alchemist_jobs.runtime.strategies.bmuf import BmufStrategy, block_update
from alchemist_jobs.runtime.strategies.easgd import EasgdStrategy
from alchemist_jobs.spec import JobSpec
from tests.unit.fake_gpu import NcclLikeGroup, Refused, SameDevice

META = torch.device("meta")


def _ctx(algo: dict, device: torch.device, world: int) -> WorkerContext:
    spec = JobSpec(name="dev", task={"builtin": "digits"}, algorithm=algo, metrics=False,
                   nodes=1, procs_per_node=max(world, 1))
    return WorkerContext(spec=spec, rank=0, world_size=world, local_rank=0, device=device,
                         metrics=WorkerMetrics({}, enabled=False))


def _model(device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2)).to(device)


class _Reached(Exception):
    pass


@pytest.mark.parametrize("algo", [{"name": "bmuf", "tau": 2}, {"name": "easgd", "tau": 2}])
def test_start_check_hands_the_group_only_device_tensors(monkeypatch, algo):
    group = NcclLikeGroup(monkeypatch, "meta")
    real = group.all_reduce

    def stop_after(tensor, *a, **k):  # values of meta tensors cannot be read back: stop here
        real(tensor, *a, **k)
        raise _Reached

    monkeypatch.setattr("torch.distributed.all_reduce", stop_after)
    strategy = (BmufStrategy if algo["name"] == "bmuf" else EasgdStrategy)(_ctx(algo, META, 2))
    with SameDevice(), pytest.raises(_Reached):  # reached: the device check passed (a CPU float64 fails it)
        strategy.setup(_model(META))
    assert group.calls == [META]


@pytest.mark.parametrize("algo", [{"name": "bmuf", "tau": 2}, {"name": "easgd", "tau": 2}])
def test_block_exchange_stays_on_the_device(monkeypatch, algo):
    group = NcclLikeGroup(monkeypatch, "meta")
    monkeypatch.setattr("alchemist_jobs.runtime.strategies.bmuf.check_same_start", lambda *a: None)
    monkeypatch.setattr("alchemist_jobs.runtime.strategies.easgd.check_same_start", lambda *a: None)
    strategy = (BmufStrategy if algo["name"] == "bmuf" else EasgdStrategy)(_ctx(algo, META, 2))
    with SameDevice():
        strategy.setup(_model(META))
        strategy.after_step(2)
        strategy.finish()
    assert group.calls and set(group.calls) == {META}


@pytest.mark.parametrize("algo,key", [({"name": "bmuf", "tau": 2}, ("global_model", "delta")),
                                      ({"name": "easgd", "tau": 2}, ("centre",))])
def test_checkpoint_state_comes_back_on_the_models_device(algo, key):
    cls = BmufStrategy if algo["name"] == "bmuf" else EasgdStrategy
    saved = cls(_ctx(algo, torch.device("cpu"), 1))
    saved.setup(_model(torch.device("cpu")))
    buf = io.BytesIO()
    torch.save(saved.state_dict(), buf)
    state = torch.load(io.BytesIO(buf.getvalue()), map_location="cpu", weights_only=True)

    on_device = cls(_ctx(algo, META, 1))
    on_device.setup(_model(META))
    on_device.load_state_dict(state)
    for k in key:
        assert on_device.state_dict()[k].device == META, k  # moved to the model's device


def test_parameter_server_answers_are_moved_to_the_device_before_use():
    strategy = AsyncEasgdStrategy(_ctx({"name": "easgd", "variant": "async", "tau": 1}, META, 2))
    model = _model(META)
    strategy.shards = [list(model.parameters())]
    strategy.staging = HostStaging(strategy.shards, META)
    strategy.client = SimpleNamespace(versions=[0])
    n = sum(p.numel() for p in model.parameters())
    with SameDevice():  # a CPU answer added into a device parameter fails on CUDA
        strategy._load([({"version": 1}, torch.ones(n))], add=True, sign=-1.0)
    assert strategy.client.versions == [1]


def test_the_wire_takes_only_host_memory():
    with pytest.raises(ValueError, match="host memory"):
        ps_wire.as_bytes(torch.ones(3, device=META))
    staged = HostStaging([[torch.ones(2)]], torch.device("cpu")).to_host([torch.ones(2)])
    assert staged[0].device.type == "cpu"
    assert bytes(ps_wire.as_bytes(staged[0])) == torch.ones(2).numpy().tobytes()


def test_bmuf_without_nesterov_local_steps_never_move_the_global_model(monkeypatch):
    w, delta, start = block_update(torch.zeros(3), torch.ones(3), torch.zeros(3), 0.5, 1.0,
                                   nesterov=False)
    start.add_(10.0)  # what a local optimizer step does to the parameters
    assert torch.equal(w, torch.ones(3))  # W_t is a copy, not an alias of the parameters

    NcclLikeGroup(monkeypatch, "cpu")  # a peer that holds exactly our values
    strategy = BmufStrategy(_ctx({"name": "bmuf", "tau": 1, "nesterov": False,
                                  "block_momentum": 0.5}, torch.device("cpu"), 2))
    model = _model(torch.device("cpu"))
    strategy.setup(model)
    strategy.after_step(1)  # a block: parameters are now loaded from W_t
    global_before = strategy.global_model.clone()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # a local step of the next block
    assert torch.equal(strategy.global_model, global_before)


class _FakeEvent:
    """torch.cuda.Event's timing surface: elapsed_time in milliseconds from a fake clock;
    counts host waits (synchronize) so a test can see when the host blocks on the device."""

    waits = 0

    def __init__(self, t_ms: float):
        self.t, self.synced = t_ms, False

    def synchronize(self) -> None:
        _FakeEvent.waits += 1
        self.synced = True

    def query(self) -> bool:
        return self.synced

    def elapsed_time(self, end: "_FakeEvent") -> float:
        assert end.synced, "elapsed_time before the end event completed"
        return end.t - self.t


# Three DDP buckets issued at 0, 2 and 3 ms, finishing at 5, 4 and 9 ms: in flight 9 ms, but
# backward was done when the last bucket started (3 ms): the step waited 6 ms, 3 ms were hidden.
BUCKETS = ((0, 5), (2, 4), (3, 9))


def test_sync_communication_is_the_wait_after_the_last_bucket_on_the_host_clock():
    comm = CommStats()
    for start, end in BUCKETS:
        comm.window(start / 1e3, end / 1e3, overlaps=True)
    comm.close_window(tag="step")
    (tag, exposed, overlapped), = comm.settle()
    assert tag == "step"
    assert exposed == pytest.approx(0.006) and overlapped == pytest.approx(0.003)
    assert comm.seconds == pytest.approx(0.006) and comm.overlapped_seconds == pytest.approx(0.003)
    assert comm.settle() == []


def test_gpu_communication_is_read_from_events_only_when_the_loop_syncs():
    _FakeEvent.waits = 0
    comm = CommStats()
    for start, end in BUCKETS:
        comm.event_window(_FakeEvent(start), _FakeEvent(end), overlaps=True)
    comm.close_window(tag=1)
    comm.event_window(_FakeEvent(20), _FakeEvent(24))  # a blocking exchange (bmuf, easgd)
    comm.close_window(tag=2)
    assert _FakeEvent.waits == 0  # close_window does not synchronise the step's events
    assert comm.settle(block=False) == [] and _FakeEvent.waits == 0
    got = comm.settle(block=True)
    assert [t for t, _, _ in got] == [1, 2]
    assert got[0][1:] == pytest.approx((0.006, 0.003))
    assert got[1][1:] == pytest.approx((0.004, 0.0))  # a blocking exchange is all waited for


def test_host_windows_are_read_at_once_and_gpu_windows_stay_in_order():
    comm = CommStats()
    comm.window(0.0, 0.002)
    comm.close_window(tag="cpu")
    assert [t for t, _, _ in comm.settle()] == ["cpu"]
    comm.event_window(_FakeEvent(0), _FakeEvent(1))
    comm.close_window(tag="gpu")
    comm.window(0.0, 0.001)
    comm.close_window(tag="after")
    assert comm.settle() == []  # the host window behind an unread GPU window waits its turn
    assert [t for t, _, _ in comm.settle(block=True)] == ["gpu", "after"]


def test_step_metrics_book_only_the_wait_as_communication():
    from alchemist_jobs.runtime.step_metrics import StepMetrics

    comm, sm = CommStats(), StepMetrics(WorkerMetrics({"job": "t"}, enabled=True))
    for start, end in BUCKETS:
        comm.window(start / 1e3, end / 1e3, overlaps=True)
    sm.record(step_s=0.020, data_s=0.002, samples=8, lr=0.1, epoch=0.0, comm=comm)
    assert sm.split.communication == pytest.approx(0.006)
    assert sm.split.overlapped == pytest.approx(0.003)
    assert sm.split.compute == pytest.approx(0.020 - 0.002 - 0.006)
    totals = sm.metrics.totals()
    assert totals["alchemist_communication_seconds_total"] == pytest.approx(0.006)
    assert totals["alchemist_communication_overlapped_seconds_total"] == pytest.approx(0.003)


class _Bucket:
    """dist.GradBucket's surface the hooks use: one flat buffer of a bucket's gradients."""

    def __init__(self, buffer: torch.Tensor):
        self._buffer = buffer

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def set_buffer(self, tensor: torch.Tensor) -> None:
        self._buffer = tensor

    def gradients(self) -> list[torch.Tensor]:
        return [self._buffer]


@pytest.mark.parametrize("compression,wire", [("none", torch.float32), ("fp16", torch.float16),
                                              ("bf16", torch.bfloat16)])
def test_sync_buckets_reach_the_group_on_the_device_and_come_back_there(monkeypatch, compression,
                                                                         wire):
    from alchemist_jobs.runtime.strategies.sync import SyncStrategy, _make_hook

    group = NcclLikeGroup(monkeypatch, "meta")
    ctx = _ctx({"name": "sync", "compression": compression}, META, 2)
    strategy = SyncStrategy(ctx)
    hook = _make_hook(ctx.spec.algorithm, strategy)
    with SameDevice():
        out = hook(strategy, _Bucket(torch.ones(1000, device=META))).wait()
    assert out.device == META and out.dtype == torch.float32 and out.numel() == 1000
    assert group.calls == [META] and group.dtypes == [wire]
    assert ctx.comm.sent_bytes == 1000 * torch.empty(0, dtype=wire).element_size()  # 2(n-1)/n = 1
    ctx.comm.close_window()
    (_, exposed, overlapped), = ctx.comm.settle()
    assert exposed >= 0.0 and overlapped == 0.0  # one bucket: all of it after the last start


def test_parameter_server_answers_land_in_the_staging_buffers(monkeypatch, tmp_path):
    """The socket writes each answer straight into the shard's staging buffer (pinned on a
    GPU), which is then what gets copied to the device: no pageable bytearray on the way."""
    import socket

    from alchemist_jobs.runtime.strategies.async_ps import PSClient

    model = _model(META)
    shards = [list(model.parameters())]
    staging = HostStaging(shards, META, pin=False)  # pinning needs CUDA; the meta GPU has none
    n = sum(p.numel() for p in model.parameters())
    monkeypatch.setenv("ALCHEMIST_PS_ADDRS", "127.0.0.1:1")
    monkeypatch.setenv("ALCHEMIST_PS_SECRET", "test")
    ctx = _ctx({"name": "async"}, META, 2)
    ctx.extra["run"] = SimpleNamespace(path=tmp_path)
    client = PSClient(ctx, [["w"]])
    ours, server = socket.socketpair()
    client.socks = [ours]  # an open connection to a server shard
    answer = torch.arange(n, dtype=torch.float32)
    ps_wire.send(server, {"version": 7}, ps_wire.as_bytes(answer))
    ((h, vec),) = client.exchange([{"op": "pull"}], [None], staging)  # no staging before
    assert h["version"] == 7 and torch.equal(vec, answer)
    assert vec.data_ptr() == staging.answers[0].data_ptr()
    ours.close()
    server.close()


def test_exchanges_outside_a_step_stay_out_of_the_step_time_split():
    from alchemist_jobs.runtime.step_metrics import StepMetrics
    from alchemist_jobs.runtime.strategies.comm_stats import OFF_STEP

    comm, sm = CommStats(), StepMetrics(WorkerMetrics({"job": "t"}, enabled=True))
    comm.window(0.0, 0.5)  # a parameter-server pull for an evaluation, between steps
    comm.close_window(OFF_STEP)
    comm.window(1.0, 1.004)
    sm.record(step_s=0.010, data_s=0.0, samples=8, lr=0.1, epoch=0.0, comm=comm)
    assert sm.split.communication == pytest.approx(0.004)
    assert sm.split.compute + sm.split.communication == pytest.approx(0.010)
    assert comm.seconds == pytest.approx(0.504)  # result.json's total still counts it
