"""`alchemist plan`'s measured facts: the link probe's fit and file, the profile's DDP buckets
(against DDP's own), its exchange arithmetic, and profiling emulated nodes at once."""

from __future__ import annotations

import json
import math

import pytest

from alchemist_jobs import cli
from alchemist_jobs.planner import facts, probe, profile
from alchemist_jobs.spec import parse_spec
from tests.conftest import REPO

MB = 1_000_000


def ring_times(world, rate, latency, sizes):
    return [
        dict(bytes=s, seconds=probe.ring_volume(s, world) / rate + 2 * (world - 1) * latency) for s in sizes
    ]


def test_the_probe_fit_recovers_bandwidth_and_latency():
    for world in (2, 3, 4):
        rate, latency = probe.fit(world, ring_times(world, 6e6, 2e-4, probe.DEFAULT_SIZES))
        assert rate == pytest.approx(6e6) and latency == pytest.approx(2e-4)


def test_a_negative_intercept_is_no_negative_latency():
    # Measured through a 50 Mbit/s token bucket: 4 MB all-reduces get a little less of the
    # rate than 1 MB ones, so the line through the points has a negative intercept. The fit
    # then goes through the origin: no latency, the bandwidth of the large tensors.
    points = [
        dict(bytes=65_536, seconds=0.001),
        dict(bytes=1 << 20, seconds=0.1775),
        dict(bytes=4 << 20, seconds=0.7318),
    ]
    rate, latency = probe.fit(2, points)
    assert latency == 0.0
    assert rate * 8 / 1e6 == pytest.approx(45.6, rel=0.01)  # of a 50 Mbit/s bucket
    with pytest.raises(ValueError, match="two tensor sizes"):
        probe.fit(2, points[:1])


def test_a_probe_file_is_the_plans_link_as_measured(tmp_path):
    path = tmp_path / "link.json"
    path.write_text(
        json.dumps(probe.result(2, ring_times(2, 5.5e6, 1e-4, probe.DEFAULT_SIZES), "two test hosts"))
    )
    c = facts.cluster_facts(
        workers_per_node=1, link=None, latency_us=50, stack=None, runs_root=None, job_name="j", probe=path
    )
    # Used as measured: no header share taken off (the probe's bytes are payload already).
    assert c.link_bytes_per_s == pytest.approx(5.5e6) and c.latency_s == pytest.approx(1e-4)
    assert any("link probe link.json" in a and "two test hosts" in a for a in c.assumptions)
    nominal = facts.cluster_facts(
        workers_per_node=1, link="44mbit", latency_us=50, stack=None, runs_root=None, job_name="j"
    )
    assert nominal.link_bytes_per_s == pytest.approx(5.5e6 * facts.LINK_EFFICIENCY)
    with pytest.raises(Exception, match="--link and --link-probe"):
        facts.cluster_facts(
            workers_per_node=1,
            link="1gbit",
            latency_us=50,
            stack=None,
            runs_root=None,
            job_name="j",
            probe=path,
        )


@pytest.mark.parametrize(
    "text, why",
    [
        ("{not json", "cannot read"),
        ('{"kind": "other"}', "not a link probe"),
        (json.dumps(dict(kind=probe.KIND, link_bytes_per_s=-1, latency_s=0)), "out of range"),
    ],
)
def test_a_bad_probe_file_is_one_line_naming_it(text, why, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ALCHEMIST_HOME", str(tmp_path))
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    rc = cli.main(
        [
            "plan",
            "examples/digits.yaml",
            "--nodes",
            "1,2",
            "--link-probe",
            str(bad),
            "--step-ms",
            "10",
            "--model-mb",
            "1",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--link-probe" in err and why in err


def _spec(algorithm: dict, **synthetic):
    return parse_spec(
        dict(
            name="p",
            task={
                "builtin": "synthetic",
                "synthetic": dict(params=300_000, samples=512, features=32, **synthetic),
            },
            algorithm=algorithm,
            hyper=dict(batch_size=32, steps=10),
        ),
        "<test>",
        REPO,
    )


def _ddp_bucket_bytes(module, bucket_mb, tmp_path) -> list[int]:
    """What DistributedDataParallel itself makes of `module` after rebuilding its buckets, built
    as the sync strategy builds it, in a one-process gloo group."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(
            module, bucket_cap_mb=bucket_mb, gradient_as_bucket_view=True
        )
        sizes: list[int] = []

        def hook(state, bucket):  # unannotated: DDP checks the annotations' classes
            sizes.append(bucket.buffer().numel() * bucket.buffer().element_size())
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        ddp.register_comm_hook(None, hook)
        for _ in range(3):  # buckets are rebuilt in gradient-ready order after the first step
            sizes.clear()
            ddp(torch.randn(8, 32)).sum().backward()
        return sizes
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("bucket_mb", [25.0, 0.5, 0.05])
def test_profiled_buckets_are_ddps_buckets(bucket_mb, tmp_path):
    from alchemist_jobs.runtime.tasks import build_model, load_task_data

    spec = _spec({"name": "sync", "bucket_mb": bucket_mb}, layers=3)
    prof = profile.profile_spec(spec, tmp_path, steps=3, warmup=1)
    module = build_model(spec, load_task_data(spec, tmp_path))
    assert [b for b, _ in prof.buckets] == _ddp_bucket_bytes(module, bucket_mb, tmp_path)
    assert sum(b for b, _ in prof.buckets) == prof.exchange_bytes
    readiness = [r for _, r in prof.buckets]
    assert readiness == sorted(readiness) and 0 < readiness[-1] <= 1.0


def test_compressed_buckets_carry_half_the_bytes(tmp_path):
    full = profile.profile_spec(_spec({"name": "sync", "bucket_mb": 0.5}), tmp_path, steps=2, warmup=1)
    half = profile.profile_spec(
        _spec({"name": "sync", "bucket_mb": 0.5, "compression": "bf16"}), tmp_path, steps=2, warmup=1
    )
    assert [b // 2 for b, _ in full.buckets] == [b for b, _ in half.buckets]
    assert half.exchange_bytes * 2 == full.exchange_bytes


def test_a_half_precision_block_exchange_carries_half_the_bytes(tmp_path):
    full = profile.profile_spec(_spec({"name": "bmuf", "tau": 2}), tmp_path, steps=2, warmup=1)
    half = profile.profile_spec(
        _spec({"name": "bmuf", "tau": 2, "exchange_dtype": "fp16"}), tmp_path, steps=2, warmup=1
    )
    assert half.exchange_bytes * 2 == full.exchange_bytes


def test_block_algorithms_profile_their_exchange_arithmetic(tmp_path):
    for algo in ({"name": "bmuf", "tau": 2}, {"name": "easgd", "tau": 2}):
        prof = profile.profile_spec(_spec(algo), tmp_path, steps=4, warmup=1)
        assert prof.exchange_local_s > 0, algo
        assert all(math.isfinite(v) for v in (prof.forward_s, prof.backward_s, prof.optimizer_s))
    assert profile.profile_spec(_spec({"name": "sync"}), tmp_path, steps=2, warmup=1).exchange_local_s == 0


def test_each_node_count_takes_the_probe_of_its_process_count(tmp_path, capsys, monkeypatch):
    # Emulated hosts share this machine's processors for their network stacks: 4 hosts at
    # once get less of a fast link than 2. Each count takes the probe nearest to it.
    monkeypatch.setenv("ALCHEMIST_HOME", str(tmp_path))
    paths = []
    for world, rate in ((2, 6e6), (4, 3e6)):
        paths += ["--link-probe", str(tmp_path / f"p{world}.json")]
        (tmp_path / f"p{world}.json").write_text(
            json.dumps(
                probe.result(world, ring_times(world, rate, 0.0, probe.DEFAULT_SIZES), f"{world} hosts")
            )
        )
    assert (
        cli.main(
            [
                "plan",
                "examples/digits.yaml",
                "--nodes",
                "2,3,4",
                *paths,
                "--step-ms",
                "10",
                "--workers-per-node",
                "1",
                "--model-mb",
                "4",
                "--algorithms",
                "bmuf",
                "--tau",
                "1",
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    comm = {p["nodes"]: p["communication_s"] for p in plan["points"]}
    assert comm[2] == pytest.approx(4 * MB / 6e6)  # 2(W-1)/W = 1 at W = 2
    assert comm[3] == pytest.approx(4 / 3 * 4 * MB / 6e6)  # a tie: the smaller count's probe
    assert comm[4] == pytest.approx(1.5 * 4 * MB / 3e6)
    assert any("nearest process count (2, 4)" in a for a in plan["assumptions"])
    twice = ["--link-probe", str(tmp_path / "p2.json")] * 2
    assert (
        cli.main(
            ["plan", "examples/digits.yaml", "--nodes", "2", *twice, "--step-ms", "10", "--model-mb", "4"]
        )
        == 2
    )
    assert "one per process count" in capsys.readouterr().err


def test_copies_in_lockstep_go_at_the_slowest_ones_pace():
    # Two copies start every period together (as workers do after an exchange); each computes
    # 10 ms a step on average, but in each period one of them is descheduled and ends last:
    # the period lasts from the first start to the last end, 20 ms, twice the mean.
    def run(spans):
        return dict(forward=0.002, backward=0.006, optimizer=0.002, period=1, spans=spans)

    runs = [run([(0.0, 0.010), (1.0, 1.020)]), run([(0.001, 0.020), (1.0, 1.010)])]
    assert profile.slowest_copy_factor(runs) == pytest.approx(2.0)
    # A block of tau steps is one period: 4 steps of 10 ms in 48 ms is 1.2x.
    blocks = [dict(run([(0.0, 0.040)]), period=4), dict(run([(0.0, 0.048)]), period=4)]
    assert profile.slowest_copy_factor(blocks) == pytest.approx(1.2)
    assert profile.slowest_copy_factor(runs[:1]) == 1.0  # one process waits for nobody
