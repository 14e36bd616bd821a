"""Every paradigm as a real job on the local stack: torchrun agents, worker processes, real
gloo collectives, a real parameter-server process.

One job per algorithm (2 workers, digits) serves three checks: its accuracy; for sync and
async, with rank 1 slowed three times, whether the fast worker keeps its pace; for bmuf and
easgd against sync, the bytes per step read from a worker's live /metrics endpoint and from
result.json. Then a failure drill: the parameter server and a worker killed mid-run.
"""

from __future__ import annotations

import http.client
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from alchemist_jobs.rundir import RunDir, read_json
from alchemist_jobs.scheduler import SUCCEEDED
from alchemist_jobs.ui.series import metrics_url
from tests.integration.paradigm_jobs import digits_job, epochs_done_by, run_job, scrape

ALGORITHMS = {
    # sync and async run with rank 1 slowed 3x (ALCHEMIST_SLOW_RANKS) for the pace check;
    # 20 epochs so the fast worker's pace is measured over a few seconds.
    "sync": dict(algorithm={"name": "sync"}, env={"ALCHEMIST_SLOW_RANKS": "1:3"},
                 hyper={"epochs": 20}),
    "async": dict(algorithm={"name": "async"}, env={"ALCHEMIST_SLOW_RANKS": "1:3"},
                  hyper={"epochs": 20}),
    # tau = 8 for the communication check; 240 steps (a multiple of 8: no partial block)
    "bmuf": dict(algorithm={"name": "bmuf", "tau": 8}, hyper={"steps": 240}),
    "easgd": dict(algorithm={"name": "easgd", "tau": 8, "alpha": 0.3}, hyper={"steps": 240}),
    # the same bmuf job with each block's update applied one block late
    "bmuf+overlap": dict(algorithm={"name": "bmuf", "tau": 8, "overlap": True},
                         hyper={"steps": 240}),
}
COMM = ("alchemist_communication_sent_bytes_total", "alchemist_steps_total")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Run each algorithm's job once; keep its outcome and rank 0's scrapes."""
    home = tmp_path_factory.mktemp("paradigms-home")
    out = {}
    for name, over in ALGORITHMS.items():
        scrapes: list[dict[str, float]] = []
        server_scrapes: list[dict[str, float]] = []

        def tick(run: RunDir, scrapes=scrapes, server_scrapes=server_scrapes) -> None:
            for who, into in (("rank-0", scrapes), ("server-0", server_scrapes)):
                rec = read_json(run.workers / f"{who}.json")
                url = metrics_url(run.path, who)  # through the run's metrics bridge
                if rec and url and "finished" not in rec:
                    try:
                        into.append(scrape(url, timeout=20))
                    except (OSError, http.client.HTTPException):
                        pass  # not serving yet, or exited (mid-answer: IncompleteRead)

        status, run = run_job(home, digits_job(f"p-{name.replace('+', '-')}", **over), tick=tick)
        out[name] = dict(status=status, run=run, result=run.result() or {}, scrapes=scrapes,
                         server_scrapes=server_scrapes,
                         workers=[read_json(run.worker_file(r)) for r in (0, 1)])
    return out


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_strategy_reaches_090_on_digits(runs, name):
    r = runs[name]
    assert r["status"].state == SUCCEEDED, _logs(r["run"])
    assert r["result"]["test_accuracy"] >= 0.90, r["result"]
    assert r["result"]["algorithm"] == ALGORITHMS[name]["algorithm"]["name"]
    assert r["result"]["world_size"] == 2
    digests = {w["final_param_sha256"] for w in r["workers"]}
    # finish() hands every rank the same model: the averaged (bmuf), centre (easgd) or
    # server's (async) one
    assert len(digests) == 1


def test_overlapped_bmuf_with_its_default_block_momentum_stays_within_a_point(runs):
    # Delaying each block update by one block must not unsettle the block momentum filter
    # (eta = 1 - 1/2 for two workers). When a block's progress was measured from W instead of
    # from where the workers began it (W + eta*Delta), the momentum acted as 2*eta and this
    # run ended 3.3 points below plain bmuf (0.928 against 0.961).
    plain = runs["bmuf"]["result"]["test_accuracy"]
    overlapped = runs["bmuf+overlap"]["result"]["test_accuracy"]
    assert overlapped >= plain - 0.01, (overlapped, plain)


def test_parameter_server_exports_updates_and_staleness(runs):
    """The server's own /metrics (port in workers/server-0.json): updates applied, the
    staleness of each, and its traffic, as role server."""
    r = runs["async"]
    # Live: the endpoint serves the server's families while the job runs.
    assert r["server_scrapes"], "no scrape of the parameter server's /metrics"
    assert "alchemist_server_updates_total" in r["server_scrapes"][-1]
    # Final: a loaded machine can answer the last live scrape before the last update, so the
    # totals are read from the counters the server recorded as it exited.
    server = read_json(r["run"].workers / "server-0.json")
    last = server["final_metrics"]
    assert last["alchemist_server_updates_total"] == server["version"] > 0
    assert last["alchemist_staleness_steps_count"] == last["alchemist_server_updates_total"]
    assert last["alchemist_communication_sent_bytes_total"] > 0
    assert last["alchemist_communication_received_bytes_total"] > 0
    # with rank 1 three times slower, rank 0's updates land between rank 1's read and its
    # push: some updates are stale
    assert last["alchemist_staleness_steps_sum"] > 0
    # a worker sees the staleness of its own updates too
    assert r["workers"][0]["final_metrics"]["alchemist_staleness_steps_count"] > 0


def test_asynchrony_is_real(runs):
    """Rank 1 is slowed 3x. Pace is read from each worker's own epoch timestamps: over the
    time the fast worker (rank 0) trained, how many epochs did each finish?

    The slow worker's pace is pinned by the knob at 1/3 of its natural pace, so under async
    a fast worker that keeps its unslowed pace finishes 3 epochs per slow-worker epoch;
    keeping >= 90% of it means a ratio >= 2.7. The slowed worker sleeps two thirds of the
    time, which frees CPU for the others on a 2-core box, so noise pushes the ratio up, not
    down. Under sync every step waits for the slow worker: the ratio is 1 and the fast
    worker's pace falls to a third (<= 1.5 leaves room for measurement jitter)."""
    ratios = {}
    for name in ("async", "sync"):
        fast, slow = runs[name]["workers"]
        t_end = fast["epoch_ends"][-1]
        fast_pace = len(fast["epoch_ends"]) / (t_end - fast["train_started"])
        slow_pace = epochs_done_by(slow, t_end) / (t_end - slow["train_started"])
        ratios[name] = fast_pace / slow_pace
    assert ratios["async"] >= 2.7, ratios
    assert ratios["sync"] <= 1.5, ratios
    # and the fast worker really did go faster under async than under sync
    pace = {n: runs[n]["workers"][0]["train_steps"] / runs[n]["workers"][0]["train_s"]
            for n in ("async", "sync")}
    assert pace["async"] > 1.5 * pace["sync"], pace


def test_bmuf_and_easgd_send_an_eighth_of_syncs_bytes_per_step(runs):
    per_step = {}
    for name in ("sync", "bmuf", "easgd"):
        r = runs[name]
        res = r["result"]
        comm = res["communication"]
        per_step[name] = comm["sent_bytes"] / res["steps"]
        # The live /metrics endpoint agrees with result.json's accounting: a scrape's bytes
        # are those of a whole number of steps. A step counts itself before its bytes, so a
        # scrape between the two shows `steps - 1` steps' bytes; and a scrape is no snapshot
        # (prometheus_client reads the step counter, then the byte counter, while training
        # goes on), so steps that end while it is read show in the bytes only: at most as
        # many as the next scrape (or the result) counts.
        live = [s for s in r["scrapes"] if s.get(COMM[1], 0) > 0]
        assert live, f"no scrape of rank 0's /metrics caught {name} training"
        later = [int(s[COMM[1]]) for s in live[1:]] + [res["steps"]]
        for s, upto in zip(live, later):
            steps, sent = int(s[COMM[1]]), s[COMM[0]]
            assert sent in {_expected_sent(name, comm, n) for n in range(steps - 1, upto + 1)}, \
                (name, s, upto)
    # tau = 8: one model-sized all-reduce every 8 steps vs one gradient-sized every step;
    # the small control traffic is bmuf/easgd's 16-byte start check.
    model_bytes = per_step["sync"]
    for name in ("bmuf", "easgd"):
        assert per_step[name] <= model_bytes / 8 + 16 / 240, per_step
        assert per_step[name] >= model_bytes / 8, per_step  # it did communicate
    assert runs["bmuf"]["result"]["communication"]["rounds"] == 240 // 8


def _expected_sent(name: str, comm: dict[str, float], steps: int) -> float:
    """Bytes a worker has sent after `steps` steps, from the run's own per-round cost."""
    if name == "sync":
        return comm["sent_bytes"] / comm["rounds"] * steps
    per_round = (comm["sent_bytes"] - 16) / comm["rounds"]
    return 16 + per_round * (steps // 8)


def test_killed_server_and_worker_resume_from_checkpoints(tmp_path: Path):
    """Async job with two server shards: SIGKILL shard 0 mid-run, then (once it has resumed)
    a worker. The shard restarts from its newest checkpoint, the worker group from theirs,
    and the job finishes with a model as good as an undisturbed one."""
    killed: dict[str, Any] = {}

    def tick(run: RunDir) -> None:
        step = (run.progress() or {}).get("step", 0)
        server = read_json(run.workers / "server-0.json") or {}
        if "server" not in killed and step >= 150 and _alive(server.get("pid")):
            if _kill(server["pid"]):
                killed["server"] = (server["pid"], step)
        elif "server" in killed and "worker" not in killed and server.get("restart") == 1 \
                and step >= killed["server"][1] + 100:
            # The record may still name an attempt that has ended (a stale pid): only a live
            # worker counts; otherwise try again at the next tick.
            w = read_json(run.worker_file(1)) or {}
            if _alive(w.get("pid")) and _kill(w["pid"]):
                killed["worker"] = (w["pid"], step)

    job = digits_job("p-fail", {"name": "async", "servers": 2}, hyper={"epochs": 40})
    status, run = run_job(tmp_path, job, tick=tick, timeout=300)
    assert set(killed) == {"server", "worker"}, (killed, _logs(run))
    assert status.state == SUCCEEDED, _logs(run)
    server_log = (run.logs / "server-0.log").read_text()
    assert "attempt 2" in server_log and "resumed from its checkpoint at update" in server_log
    assert "attempt 2" not in (run.logs / "server-1.log").read_text()  # the other shard ran on
    res = run.result()
    assert res["restarts"] == 1 and res["resumed_from_step"] is not None
    for rank in (0, 1):  # each worker resumed from its own newest checkpoint
        assert "resumed from checkpoint at step" in run.rank_log(rank).read_text()
    assert res["test_accuracy"] >= 0.90
    assert res["steps"] == run.progress()["total_steps"]  # the whole job was done
    # nothing left running: servers and workers are gone (waited for, as exits are reaped
    # asynchronously)
    for pid in [killed["server"][0], killed["worker"][0], *run.state().get("servers", [])]:
        deadline = time.monotonic() + 60
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), pid


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def _alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _logs(run: RunDir) -> str:
    parts = []
    for p in sorted(run.logs.glob("*.log")):
        parts.append(f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:])
    return "\n".join(parts)
