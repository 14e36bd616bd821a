"""Validate `alchemist plan` on measured runs: predict, then run, on 2-4 emulated hosts.

    .venv/bin/python bench/plan_validate.py [--hosts 2,3,4] [--rates 50,100,400]
        [--algorithms sync,bmuf] [--steps 40] [--max-load 1.5]

The emulated hosts are network namespaces (tests/netns.py) whose links a token bucket limits to
the rate, one worker per host. For every link rate, before any run at that rate:

1. **Probe the link with two hosts** (alchemist_jobs/planner/probe.py): two fresh hosts at
   that rate time gloo all-reduces of 4 kB to 4 MB, and the fit gives bandwidth and
   per-message latency (bench/results/plan/probe-<rate>mbit-2hosts.json). The table gives
   what the plan predicts from this probe alone, as on a real cluster, where one probe
   between two nodes serves every node count.

Then for every (algorithm, hosts) point:

2. **Plan first.** Profile the job with as many processes computing at once as the run will
   have hosts (`alchemist plan --emulated`: the hosts share this machine's processors); probe
   the link with as many fresh hosts as the run will have (their network stacks share the
   processors too, so at 400 Mbit/s the link a host gets falls as more hosts send at once:
   probe-<rate>mbit-<hosts>hosts-<algorithm>.json, named in the table); predict the step
   time from both (`alchemist plan --emulated --link-probe FILE`). A probe is its own short
   run, never the measured one.
3. **Run** the same job on that many hosts and take rank 0's steady-state step time: from its
   first TensorBoard `train/loss` point at or after step WARMUP (the first steps and bmuf's
   first exchange set up buffers and connections) to the end of its last step (its worker
   record: `train_started + train_s`), divided by the steps between. The final `train/loss`
   point is not used: rank 0 writes it after the final exchange, the evaluation and the
   result. Progress points come every 0.5 s, not at block ends, so for bmuf the prediction
   compared is the plan's for that very window: its steps' compute plus the exchanges the
   window holds (equal to the plan's step time when it holds whole blocks).

Before each link rate's batch the 1-minute load average must be at most --max-load (others
share this machine); the script waits (checking every 60 s, up to --wait-s) and records the
load at the start of every point. Writes bench/results/plan/validation.{md,json} after every
point; exits 1 if any point is off by more than 15%. Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from alchemist_jobs.planner import model  # noqa: E402
from alchemist_jobs.planner.facts import cluster_facts  # noqa: E402
from alchemist_jobs.planner.profile import profile_spec  # noqa: E402
from alchemist_jobs.spec import parse_spec  # noqa: E402

RESULTS = REPO / "bench" / "results" / "plan"
TOLERANCE = 0.15
WARMUP = 4  # steps not timed: the plan predicts the steady state
TAU = 4  # bmuf's steps per exchange in these jobs
PROBE_PORT = 29511


def job(hosts: int, algo: str, steps: int, params: int) -> dict:
    """An MLP of `params` parameters on synthetic data; no epoch end (no evaluation) and no
    checkpoint inside the timed steps."""
    algorithm = {"name": algo} if algo == "sync" else {"name": algo, "tau": TAU}
    return dict(name=f"plan-{algo}-{hosts}", nodes=hosts, procs_per_node=1,
                task={"builtin": "synthetic",
                      "synthetic": {"params": params, "samples": 65536, "features": 32}},
                algorithm=algorithm,
                hyper=dict(batch_size=64, lr=0.01, momentum=0.9, steps=steps, seed=0),
                checkpoint={"every_steps": 1_000_000}, max_restarts=0, metrics=False)


def probe_link(rate: int, out: Path, hosts: int = 2, repeats: int = 7,
               timeout: float = 300) -> Path:
    """Run the link probe on `hosts` fresh hosts limited to `rate` Mbit/s; returns its result."""
    from tests.netns import Hosts

    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    with Hosts(hosts, rate_mbit=rate) as net:
        procs = []
        for h in net.hosts:
            env = dict(os.environ, GLOO_SOCKET_IFNAME=h.ifname, OMP_NUM_THREADS="1",
                       PYTHONPATH=str(REPO))
            procs.append(subprocess.Popen(
                [*h.exec_prefix, sys.executable, "-m", "alchemist_jobs.planner.probe",
                 "--rank", str(h.index), "--world", str(hosts),
                 "--master", f"{net[0].addr}:{PROBE_PORT}", "--repeats", str(repeats),
                 "--out", str(out), "--where", f"{hosts} netns hosts, token bucket {rate} Mbit/s"],
                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"link probe at {rate} Mbit/s: no result in {timeout:g} s") from None
        if not out.exists() or any(p.returncode for p in procs):
            logs = "\n".join((p.stdout.read() or "")[-1500:] for p in procs)
            raise RuntimeError(f"link probe at {rate} Mbit/s failed:\n{logs}")
    return out


def predict(spec, prof: model.Profile, hosts: int, probe: Path) -> model.Point:
    """The plan's point, as `alchemist plan --link-probe PROBE --emulated --workers-per-node 1`."""
    cluster = cluster_facts(workers_per_node=1, link=None, latency_us=50.0, stack=None,
                            runs_root=None, job_name=spec.name, probe=probe)
    algo = model.Algorithm(spec.algorithm.name, getattr(spec.algorithm, "tau", 1))
    return model.predict({hosts: prof}, [algo], [hosts], cluster)[0]


def window_prediction(point: model.Point, tau: int, first: int, last: int) -> float:
    """The plan's mean step time over steps first+1..last: equal to point.step_s when the
    window holds whole blocks, else counting the exchanges the window really holds."""
    if tau <= 1 or last <= first:
        return point.step_s
    exchanges = last // tau - first // tau
    return point.compute_s + point.communication_s * tau * exchanges / (last - first)


def measure(spec, home: Path, hosts: int, rate: int, timeout: float = 900) -> dict:
    """Run the job on `hosts` emulated hosts; rank 0's steady window and the run's records."""
    from tests.netns import Hosts, NetnsScheduler

    deadline = time.monotonic() + timeout

    def tick() -> None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{spec.name} on {hosts} hosts at {rate} Mbit/s: not done in "
                               f"{timeout:g} s")

    with Hosts(hosts, rate_mbit=rate) as net:
        sched = NetnsScheduler(home, net)
        handle = sched.schedule(sched.dryrun(spec, REPO))
        status = sched.wait(handle, tick=tick)
        if status.state != "succeeded":
            raise RuntimeError(f"{handle.run.run_id} {status.state}; logs in {handle.run.logs}")
        return steady_window(handle.run)


def steady_window(run) -> dict:
    """Rank 0's steady state: from its first `train/loss` point at or after WARMUP to the end
    of its last step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    worker = json.loads(run.worker_file(0).read_text())
    end_wall = worker["train_started"] + worker["train_s"]
    last = worker["train_steps"]
    acc = EventAccumulator(str(run.tensorboard))
    acc.Reload()
    events = acc.Scalars("train/loss")[:-1]  # the last is the final one, after finish()
    events = [e for e in events if WARMUP <= e.step < last and e.wall_time < end_wall]
    if not events:
        raise RuntimeError(f"{run.path}: no progress point between step {WARMUP} and {last}")
    start = events[0]
    seconds = (end_wall - start.wall_time) / (last - start.step)
    result = json.loads(run.result_file.read_text())
    comm = result["communication"]
    return dict(step_s=seconds, first=start.step, last=last, run=run.run_id,
                # in flight per round (waited + hidden behind backward), as the model's
                # communication_s counts it
                comm_s_per_round=(comm["seconds"] + comm.get("overlapped_seconds", 0.0))
                / max(1, comm["rounds"]),
                compute_s_per_step=result["time_split_s"]["compute"] / max(1, result["steps"]))


def note_probe(probes: dict, path: Path) -> None:
    data = json.loads(path.read_text())
    probes[path.name] = dict(mbit=data["link_bytes_per_s"] * 8 / 1e6, hosts=data["world"],
                             latency_us=data["latency_s"] * 1e6, load=load1())
    print(f"probe {path.name}: {probes[path.name]['mbit']:.1f} Mbit/s, "
          f"{probes[path.name]['latency_us']:.0f} us per message", flush=True)


def load1() -> float:
    return os.getloadavg()[0]


def wait_quiet(max_load: float, wait_s: float) -> float:
    """Wait (checking every 60 s, up to wait_s) for the 1-minute load to fall to max_load."""
    waited = 0.0
    while load1() > max_load and waited < wait_s:
        print(f"load {load1():.2f} > {max_load}: waiting", flush=True)
        time.sleep(60)
        waited += 60
    return load1()


def write_tables(rows: list[dict], probes: dict, command: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "validation.json").write_text(json.dumps(dict(command=command, probes=probes,
                                                             rows=rows), indent=2) + "\n")
    lines = ["| algorithm | hosts | link Mbit/s | link probe (hosts at once): Mbit/s | compute "
             "ms/step (hosts at once) | predicted ms/step | measured ms/step | error | "
             "predicted from the batch's 2-host probe (error) | load (1 min) before batch / at "
             "point |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = probes[r["probe"]]
        two = r["predicted_2host_ms"]
        lines.append(
            f"| {r['algorithm']} | {r['hosts']} | {r['mbit']} | {p['mbit']:.1f} "
            f"(`{r['probe']}`) | {r['compute_ms']:.1f} | {r['predicted_ms']:.1f} | "
            f"{r['measured_ms']:.1f} | {r['error']:+.1%} | "
            + f"{two:.1f} ({r['measured_ms'] / two - 1:+.1%})"
            + f" | {r['load_batch']:.2f} / {r['load_point']:.2f} |")
    (RESULTS / "validation.md").write_text("\n".join(lines) + "\n")


def run_point(args, home: Path, algo: str, hosts: int, rate: int, probe2: Path,
              probes: dict) -> dict:
    """Plan, then run, one (algorithm, hosts, rate) point: profile `hosts` processes at once,
    probe the link with `hosts` hosts, predict, run."""
    spec = parse_spec(job(hosts, algo, args.steps, args.params), "<plan>", REPO)
    point_load = load1()
    prof = profile_spec(spec, home, steps=args.profile_steps, warmup=10, concurrent=hosts)
    probe = probe_link(rate, RESULTS / f"probe-{rate}mbit-{hosts}hosts-{algo}.json", hosts=hosts,
                       repeats=args.probe_repeats)
    note_probe(probes, probe)
    point = predict(spec, prof, hosts, probe)  # before the run
    point2 = predict(spec, prof, hosts, probe2)
    t0 = time.time()
    m = measure(spec, home, hosts, rate)
    tau = TAU if algo != "sync" else 1
    predicted = window_prediction(point, tau, m["first"], m["last"])
    predicted2 = window_prediction(point2, tau, m["first"], m["last"])
    return dict(algorithm=algo, hosts=hosts, mbit=rate, probe=probe.name,
                compute_ms=point.compute_s * 1e3, communication_ms=point.communication_s * 1e3,
                exchange_local_ms=prof.exchange_local_s * 1e3,
                plan_step_ms=point.step_s * 1e3, predicted_ms=predicted * 1e3,
                predicted_2host_ms=predicted2 * 1e3,
                measured_ms=m["step_s"] * 1e3, error=m["step_s"] / predicted - 1,
                load_point=point_load, wall_s=time.time() - t0,
                **{k: v for k, v in m.items() if k != "step_s"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="2,3,4")
    ap.add_argument("--rates", default="50,100,400", help="Mbit/s")
    ap.add_argument("--algorithms", default="sync,bmuf")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--params", type=int, default=1_000_000)
    ap.add_argument("--profile-steps", type=int, default=60)
    ap.add_argument("--probe-repeats", type=int, default=9)
    ap.add_argument("--max-load", type=float, default=1.5)
    ap.add_argument("--wait-s", type=float, default=1200)
    args = ap.parse_args()
    command = "bench/plan_validate.py " + " ".join(sys.argv[1:])
    home = Path(os.environ.get("ALCHEMIST_BENCH_HOME", f"/tmp/alchemist-bench-{os.getuid()}")) / "plan"
    home.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    probes: dict[str, dict] = {}
    for rate in map(int, args.rates.split(",")):
        batch_load = wait_quiet(args.max_load, args.wait_s)
        probe2 = probe_link(rate, RESULTS / f"probe-{rate}mbit-2hosts.json",
                            repeats=args.probe_repeats)
        note_probe(probes, probe2)
        for algo in args.algorithms.split(","):
            for hosts in map(int, args.hosts.split(",")):
                row = run_point(args, home, algo, hosts, rate, probe2, probes)
                row["load_batch"] = batch_load
                rows.append(row)
                print(f"{algo:5} hosts={hosts} {rate:4} Mbit/s  compute {row['compute_ms']:6.1f}"
                      f"  predicted {row['predicted_ms']:8.1f} ms  measured {row['measured_ms']:8.1f}"
                      f" ms  error {row['error']:+.1%}  (steps {row['first']}-{row['last']}, load "
                      f"{row['load_point']:.2f})", flush=True)
                write_tables(rows, probes, command)
    print((RESULTS / "validation.md").read_text())
    bad = [r for r in rows if abs(r["error"]) > TOLERANCE]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
