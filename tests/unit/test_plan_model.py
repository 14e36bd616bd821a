"""`alchemist plan`: the scaling model against hand-computed figures, and its bad input."""

from __future__ import annotations

import json

import pytest

from alchemist_jobs import cli
from alchemist_jobs.errors import UserError
from alchemist_jobs.planner import facts, model

MB = 1_000_000


def prof(fwd=0.01, bwd=0.02, nbytes=4 * MB, batch=64, opt=0.0, buckets=(), local=0.0):
    return model.Profile(
        forward_s=fwd,
        backward_s=bwd,
        exchange_bytes=nbytes,
        batch_per_worker=batch,
        optimizer_s=opt,
        buckets=buckets,
        exchange_local_s=local,
    )


def cluster(workers=1, link=1e6, latency=0.0, scale=1.0):
    return model.Cluster(
        workers_per_node=workers, link_bytes_per_s=link, latency_s=latency, compute_scale=scale
    )


def test_ring_allreduce_volume_and_latency_by_hand():
    # 4 nodes x 2 workers: W = 8, volume 2*7/8 * 4 MB = 7 MB at 1 MB/s = 7 s, plus 14 x 1 ms.
    c = cluster(workers=2, link=1 * MB, latency=1e-3)
    assert model.allreduce_s(4 * MB, 4, c) == pytest.approx(7.0 + 0.014)
    # One node: the node-local bandwidth (100 GB/s default): 2*1/2 * 4 MB / 1e11.
    assert model.allreduce_s(4 * MB, 1, c) == pytest.approx(4 * MB / 100e9)
    assert model.allreduce_s(4 * MB, 1, cluster(workers=1)) == 0.0


def test_one_bucket_hides_nothing_behind_backward():
    # The whole model in one DDP bucket (4 MB < 25 MiB): its all-reduce starts when backward
    # ends, so all of it adds to the step, however long backward is.
    p = prof(fwd=0.01, bwd=0.02, opt=0.005, buckets=((4 * MB, 1.0),))
    compute, comm, step = model.step_s(p, model.Algorithm("sync"), 2, cluster())
    assert (compute, comm) == (pytest.approx(0.035), pytest.approx(4.0))  # 2 x 1/2 x 4 MB / 1 MB/s
    assert step == pytest.approx(0.035 + 4.0)
    fast = cluster(link=1000 * MB)  # the all-reduce (4 ms) is shorter than backward (20 ms)
    _, comm, step = model.step_s(p, model.Algorithm("sync"), 2, fast)
    assert step == pytest.approx(0.035 + comm)


def test_buckets_overlap_the_backward_still_to_run():
    # Two 2 MB buckets, ready at 25% and 100% of a 2 s backward, on a 1 MB/s link (2 s each
    # over two nodes): the first runs 0.5-2.5 s, the second 2.5-4.5 s; backward ends at 2 s.
    p = prof(fwd=0.0, bwd=2.0, buckets=((2 * MB, 0.25), (2 * MB, 1.0)))
    _, comm, step = model.step_s(p, model.Algorithm("sync"), 2, cluster())
    assert comm == pytest.approx(4.0)
    assert step == pytest.approx(2.0 + 2.5)
    # The link idles until a bucket is ready: a late second bucket starts at its own time.
    late = prof(fwd=0.0, bwd=2.0, buckets=((MB // 10, 0.0), (2 * MB, 1.0)))
    _, _, step = model.step_s(late, model.Algorithm("sync"), 2, cluster())
    assert step == pytest.approx(2.0 + 2.0)


def test_the_optimizer_waits_for_the_exchange():
    base = prof(bwd=0.02, buckets=((4 * MB, 1.0),))
    slow_opt = prof(bwd=0.02, opt=0.1, buckets=((4 * MB, 1.0),))
    _, _, a = model.step_s(base, model.Algorithm("sync"), 2, cluster())
    _, _, b = model.step_s(slow_opt, model.Algorithm("sync"), 2, cluster())
    assert b - a == pytest.approx(0.1)  # never hidden behind communication


def test_ddp_buckets_follow_ddp_rule():
    # Gradients in ready order (bytes, ready fraction); DDP closes a bucket once it holds at
    # least its limit, the first bucket's limit apart.
    grads = [(40, 0.1), (400_000, 0.3), (4_000_000, 0.8), (130_000, 1.0)]
    assert model.ddp_buckets(grads, 25 * model.MIB) == ((4_530_040, 1.0),)
    assert model.ddp_buckets(grads, 25 * model.MIB, first_cap_bytes=model.MIB) == (
        (4_400_040, 0.8),
        (130_000, 1.0),
    )
    assert model.ddp_buckets(grads, 300_000) == ((400_040, 0.3), (4_000_000, 0.8), (130_000, 1.0))


def test_uniform_buckets_without_layer_facts():
    assert model.uniform_buckets(60, 25) == ((25, 25 / 60), (25, 50 / 60), (10, 1.0))


def test_block_algorithms_amortise_one_blocking_exchange_over_tau():
    _, comm, step = model.step_s(prof(), model.Algorithm("bmuf", tau=8), 2, cluster())
    assert comm == pytest.approx(4.0 / 8) and step == pytest.approx(0.03 + 0.5)
    _, _, step = model.step_s(prof(), model.Algorithm("easgd", tau=4), 2, cluster(scale=2.0))
    assert step == pytest.approx(0.06 + 1.0)
    # The exchange's own arithmetic (flatten, average, block update, load back) blocks too.
    _, comm, step = model.step_s(prof(local=0.2), model.Algorithm("bmuf", tau=8), 2, cluster())
    assert comm == pytest.approx((4.0 + 0.2) / 8) and step == pytest.approx(0.03 + 4.2 / 8)
    # ...but one worker exchanges nothing.
    _, comm, _ = model.step_s(prof(local=0.2), model.Algorithm("bmuf", tau=8), 1, cluster())
    assert comm == 0.0
    with pytest.raises(ValueError, match="async"):
        model.step_s(prof(), model.Algorithm("async"), 2, cluster())


def test_an_overlapped_exchange_waits_only_for_what_outlasts_the_next_block():
    # 2 nodes: the ring moves 4 MB each way, 4 s at 1 MB/s; a block of 8 steps computes 0.24 s
    _, comm, step = model.step_s(prof(local=0.2), model.Algorithm("bmuf", tau=8, overlap=True), 2, cluster())
    assert comm == pytest.approx(4.2 / 8) and step == pytest.approx(0.03 + (4.0 - 0.24 + 0.2) / 8)
    # a link fast enough to finish within the block: only the local arithmetic remains
    _, comm, step = model.step_s(
        prof(local=0.01), model.Algorithm("easgd", tau=2, overlap=True), 2, cluster(link=1e8)
    )
    assert comm == pytest.approx(0.05 / 2) and step == pytest.approx(0.03 + 0.01 / 2)


def test_auto_tau_is_the_smallest_that_waits_at_most_a_tenth_of_compute():
    # t = 0.04 s per exchange, compute 0.03 s per step: blocking needs t / tau <= 0.003
    assert model.choose_tau(prof(), model.Algorithm("bmuf"), 2, cluster(link=1e8)) == 14
    # overlapped, two steps' compute (0.06 s) cover the 0.04 s exchange
    assert model.choose_tau(prof(), model.Algorithm("bmuf", overlap=True), 2, cluster(link=1e8)) == 2
    # a link too slow for any tau up to the cap
    assert model.choose_tau(prof(), model.Algorithm("bmuf"), 2, cluster(link=1e3)) == model.AUTO_TAU_MAX


def test_plan_tau_auto_names_its_choice(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ALCHEMIST_HOME", str(tmp_path))
    argv = [
        "plan",
        "examples/digits.yaml",
        "--nodes",
        "1,2",
        "--link",
        "100mbit",
        "--step-ms",
        "60",
        "--model-mb",
        "4",
        "--algorithms",
        "sync,bmuf",
        "--tau",
        "auto",
        "--json",
    ]
    assert cli.main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    tau = plan["tau"]["bmuf"]
    assert 1 < tau < model.AUTO_TAU_MAX
    assert any(a.startswith(f"tau auto: bmuf {tau},") for a in plan["assumptions"])
    at2 = {p["algorithm"]: p for p in plan["points"] if p["nodes"] == 2}
    assert at2["bmuf"]["exposed_s"] <= model.AUTO_TAU_EXPOSED * at2["bmuf"]["compute_s"] + 1e-12
    assert at2["sync"]["exposed_s"] > at2["bmuf"]["exposed_s"]
    # one step fewer would wait longer than the rule allows
    assert cli.main([*argv[:-3], "--tau", str(tau - 1), "--json"]) == 0
    worse = next(
        p
        for p in json.loads(capsys.readouterr().out)["points"]
        if p["nodes"] == 2 and p["algorithm"] == "bmuf"
    )
    assert worse["exposed_s"] > model.AUTO_TAU_EXPOSED * worse["compute_s"]


def test_speedup_and_efficiency_are_against_one_node_of_the_same_algorithm():
    c = cluster(workers=8, link=1000 * MB)
    pts = model.predict(prof(nbytes=100 * MB), [model.Algorithm("sync")], [1, 2, 4], c)
    one = pts[0]
    assert (one.speedup, one.efficiency) == (pytest.approx(1.0), pytest.approx(1.0))
    for p in pts[1:]:
        assert p.samples_per_s == pytest.approx(p.workers * 64 / p.step_s)
        assert p.speedup == pytest.approx(p.samples_per_s / one.samples_per_s)
        assert p.efficiency == pytest.approx(p.speedup / p.nodes)
        assert p.efficiency < 1.0  # the link costs something once the ring leaves the node


def test_the_plan_prefers_sync_unless_another_is_clearly_faster():
    c = cluster(workers=1, link=1 * MB)
    pts = model.predict(prof(), [model.Algorithm("sync"), model.Algorithm("bmuf", tau=8)], [1, 4], c)
    assert model.best_by_nodes(pts) == {1: "sync", 4: "bmuf"}


def test_rates_and_node_lists():
    assert facts.parse_rate("100mbit") == pytest.approx(12.5e6)
    assert facts.parse_rate("25Gbit") == pytest.approx(25e9 / 8)
    assert facts.parse_nodes("8,1,2,2") == [1, 2, 8]
    for bad in ("0", "1,,2", "-1", "x", "5000"):
        with pytest.raises(Exception, match="--nodes"):
            facts.parse_nodes(bad)
    with pytest.raises(Exception, match="--link"):
        facts.parse_rate("fast")


def test_past_runs_supply_the_measured_bandwidth(tmp_path):
    runs = tmp_path / "runs"
    (runs / "job-1").mkdir(parents=True)
    (runs / "job-1" / "result.json").write_text(
        json.dumps(dict(world_size=2, algorithm="sync", communication=dict(sent_bytes=8e6, seconds=2.0)))
    )
    (runs / "job-2").mkdir()
    (runs / "job-2" / "result.json").write_text("{not json")  # ignored, not fatal
    c = facts.cluster_facts(
        workers_per_node=1, link=None, latency_us=0, stack=None, runs_root=runs, job_name="job"
    )
    assert c.link_bytes_per_s == pytest.approx(4e6)
    assert any("measured by past run job-1" in a for a in c.assumptions)


def test_the_measured_bandwidth_counts_the_time_hidden_behind_backward_too(tmp_path):
    """A run's `seconds` is what its steps waited for; the link was busy for the overlapped
    seconds as well, so the bandwidth divides by both (it read 8e6 B/s here before)."""
    (tmp_path / "runs" / "job-1").mkdir(parents=True)
    (tmp_path / "runs" / "job-1" / "result.json").write_text(
        json.dumps(
            dict(
                world_size=2,
                algorithm="sync",
                communication=dict(sent_bytes=8e6, seconds=1.0, overlapped_seconds=3.0),
            )
        )
    )
    c = facts.cluster_facts(
        workers_per_node=1, link=None, latency_us=0, stack=None, runs_root=tmp_path / "runs", job_name="job"
    )
    assert c.link_bytes_per_s == pytest.approx(2e6)


def test_a_point_says_what_the_step_waits_for_as_a_run_reports_it():
    profile = model.Profile(
        forward_s=0.01, backward_s=0.02, exchange_bytes=50 * model.MIB, batch_per_worker=32
    )
    cluster = model.Cluster(workers_per_node=1, link_bytes_per_s=1e9, latency_s=0.0)
    for p in model.predict(
        profile, [model.Algorithm("sync"), model.Algorithm("bmuf", tau=4)], [1, 2], cluster
    ):
        assert p.exposed_s == pytest.approx(p.step_s - p.compute_s)
        assert 0 <= p.exposed_s <= p.communication_s + 1e-12


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--nodes", "0"], "--nodes"),
        (["--nodes", "1,2", "--link", "fast"], "--link"),
        (["--nodes", "1,2"], "--link"),
        (["--nodes", "1,2", "--link", "1gbit", "--algorithms", "async"], "--algorithms"),
        (["--nodes", "1,2", "--link", "1gbit", "--stack", "no-such-stack"], "no-such-stack"),
        (["--nodes", "1,2", "--link", "1gbit", "--step-ms", "5"], "--model-mb"),
        (["--nodes", "1,2", "--link", "1gbit", "--tau", "often"], "--tau"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, field, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ALCHEMIST_HOME", str(tmp_path))
    rc = cli.main(["plan", "examples/digits.yaml", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and field in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_script_tasks_need_their_cost_given(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ALCHEMIST_HOME", str(tmp_path))
    assert cli.main(["plan", "examples/script.yaml", "--nodes", "1,2", "--link", "1gbit"]) == 2
    assert "--step-ms" in capsys.readouterr().err
    assert (
        cli.main(
            [
                "plan",
                "examples/script.yaml",
                "--nodes",
                "1,2",
                "--link",
                "1gbit",
                "--step-ms",
                "100",
                "--model-mb",
                "100",
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert [p["nodes"] for p in plan["points"]] == [1, 2]
    assert plan["profile"]["exchange_bytes"] == 100 * MB


def test_the_link_is_the_stacks_fabric_as_its_provider_describes_it():
    """A stack with a network fabric (here the AWS provider's EFA, 100 Gbit/s a device by its own
    description) gives the link between nodes; the planner knows no fabric by name."""
    from alchemist_jobs.contract import StackOutput
    from infra.providers.aws.fabric import network_fabric
    from tests.k8s_stacks import stack

    data = stack("aws-us-west-2").output.model_dump(mode="json")
    data["gpu"]["fabric"] = network_fabric(per_node=4, rdma_read=True)
    out = StackOutput.parse(data, "test")
    c = facts.cluster_facts(
        workers_per_node=1, link=None, latency_us=50.0, stack=out, runs_root=None, job_name="j"
    )
    assert c.link_bytes_per_s == 4 * 100e9 / 8 * facts.LINK_EFFICIENCY
    assert any(
        n.startswith("each node sends at 400 Gbit/s: 4 EFA device(s) of 100 Gbit/s (stack aws-us-west-2)")
        for n in c.assumptions
    ), c.assumptions
    data["gpu"].pop("fabric")
    with pytest.raises(UserError, match="stack aws-us-west-2 exports no network fabric"):
        facts.cluster_facts(
            workers_per_node=1, link=None, latency_us=50.0, stack=StackOutput.parse(data, "t"),
            runs_root=None, job_name="j",
        )  # fmt: skip
