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
    with SameDevice(), pytest.raises(_Reached):  # Refused (a CPU float64) before the fix
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
        assert on_device.state_dict()[k].device == META, k  # stayed on CPU before the fix


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
    assert torch.equal(w, torch.ones(3))  # start aliased W_t before the fix

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
    """torch.cuda.Event's timing surface: elapsed_time in milliseconds from a fake clock."""

    def __init__(self, t_ms: float):
        self.t, self.synced = t_ms, False

    def synchronize(self) -> None:
        self.synced = True

    def elapsed_time(self, end: "_FakeEvent") -> float:
        assert end.synced, "elapsed_time before the end event completed"
        return end.t - self.t


def test_gpu_communication_time_is_the_event_span_of_the_step():
    comm = CommStats()
    # Three buckets issued at 0, 2 and 3 ms finishing at 5, 4 and 9 ms: 9 ms in flight.
    for start, end in ((0, 5), (2, 4), (3, 9)):
        comm.event_window(_FakeEvent(start), _FakeEvent(end))
    assert comm.close_window() == pytest.approx(0.009)
    assert comm.close_window() == 0.0 and comm.seconds == pytest.approx(0.009)
