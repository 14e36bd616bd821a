"""Experiment 3: time to a target accuracy for sync, bmuf and easgd (and async) on two hosts
joined by a 100 Mbit/s link, with a model of about a million parameters.

    .venv/bin/python bench/paradigms/two_host_tta.py [--epochs 6] [--rate 100] [--repeats 3]

Two network namespaces (tests/netns.py) with a token-bucket limit on each host's
egress; one worker per host (nodes: 2), the parameter server (async) in host 0. The task is
`synthetic` (8 features, 8192 samples) with an MLP of ~1M parameters (8-991-991-10), batch
64 per worker, lr 0.02, momentum 0.9 for every algorithm; bmuf and easgd exchange every
tau = 8 steps (bmuf: block momentum 1 - 1/N = 0.5, Nesterov, block lr 1; easgd: alpha =
0.9 / N = 0.45, the paper's beta = 0.9), plain, with `overlap`, with `exchange_dtype: fp16`
and with both (with overlap, also with block momentum 0: delayed model averaging), and
`bmuf+plan-tau`: bmuf+overlap+fp16 at the tau `alchemist plan --tau auto` picks for this
link; and with fewer exchanges (bmuf+fp16 every 16 steps, easgd+fp16 every 32). Sync as a
careful user runs it on a slow link: `sync+fp16` (fp16 gradients) and `sync+powersgd2`/`4`
(PowerSGD at rank 2 and 4); and `auto`, the pick of `alchemist plan --auto --target 0.82`
for the probed link, made before any run (its calibration runs are cached in the
experiment's home, so the second rate reuses them). Needs root.

    .venv/bin/python bench/paradigms/two_host_tta.py --rate 100    # two_host_tta.{md,png,json}
    .venv/bin/python bench/paradigms/two_host_tta.py --rate 1000   # two_host_tta-1000mbit.*

The plan first: before any run, the link is probed (alchemist_jobs/planner/probe.py, on two
fresh hosts at the same rate) and each variant is profiled with two processes computing at
once (`alchemist plan --emulated --link-probe`); the table compares the plan's step time with
rank 0's measured steady-state step time (bench/plan_validate.py's window: from its first
progress point at step 4 or later to its last step).

The curve: rank 0 writes the model it would hand out (bmuf: the global model, easgd: the
centre) every 16 steps (`curve.every_steps`); this script evaluates the snapshots after the
run, so evaluation never holds up training. Time runs from the workers' start; the time to
the target is interpolated linearly between the two snapshots around the crossing. Each
variant runs `--repeats` times, round-robin (so slow drifts of the machine spread over all),
repeat r with seed r (initialisation and data order; the data set itself is generated from
seed 0 for all, `task.synthetic.data_seed`): a repeat with the same seed reruns the same
arithmetic, so its spread would be the machine's alone, while the seeds show the spread of the
convergence itself, which decides a time to target as much as the step time does. The table
gives medians and the spread (min-max). The auto plan calibrates on seed 0.

Writes bench/results/paradigms/two_host_tta.{md,png,json} and the probe two_host_tta-probe.json
(other rates: two_host_tta-<rate>mbit.*); `--replot [--rate R]` redraws the figure from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from common import REPO, RESULTS, figure, home, run_job, save_figure, write_markdown

from alchemist_jobs.planner import model
from alchemist_jobs.planner.facts import cluster_facts
from alchemist_jobs.planner.profile import profile_spec
from alchemist_jobs.rundir import RunDir
from alchemist_jobs.runtime.curve import evaluate_snapshots, time_to_target
from alchemist_jobs.spec import parse_spec
from bench.plan_validate import probe_link, steady_window
from tests.netns import Hosts, NetnsScheduler, unavailable

# The data set is generated from seed 0 for every run: the repeats vary the job's seed
# (initialisation, data order) over the same data.
TASK = {
    "builtin": "synthetic",
    "synthetic": {"params": 1_000_000, "samples": 8192, "features": 8, "data_seed": 0},
}
TARGET = 0.82
EVERY = 16  # steps between snapshots (two bmuf/easgd blocks)
BMUF = {"name": "bmuf", "tau": 8}
EASGD = {"name": "easgd", "tau": 8, "alpha": 0.45}
ALGOS = {
    "sync": {"name": "sync"},
    "sync+1mb": {"name": "sync", "bucket_mb": 1.0},  # four buckets in flight, not one
    "async": {"name": "async"},
    "bmuf": BMUF,
    "bmuf+overlap": dict(BMUF, overlap=True),
    "bmuf+fp16": dict(BMUF, exchange_dtype="fp16"),
    "bmuf+overlap+fp16": dict(BMUF, overlap=True, exchange_dtype="fp16"),
    # overlap with plain delayed averaging (block momentum 0), as overlapping local SGD does
    "bmuf+overlap+fp16+avg": dict(BMUF, overlap=True, exchange_dtype="fp16", block_momentum=0.0),
    "easgd": EASGD,
    "easgd+overlap": dict(EASGD, overlap=True),
    "easgd+fp16": dict(EASGD, exchange_dtype="fp16"),
    "easgd+overlap+fp16": dict(EASGD, overlap=True, exchange_dtype="fp16"),
    # fewer exchanges: half precision every 16 (bmuf) or 32 (easgd) steps
    "bmuf+fp16+tau16": dict(BMUF, tau=16, exchange_dtype="fp16"),
    "easgd+fp16+tau32": dict(EASGD, tau=32, exchange_dtype="fp16"),
}
# sync as a careful user runs it on a slow link: gradients in half precision, or PowerSGD
ALGOS["sync+fp16"] = {"name": "sync", "compression": "fp16"}
ALGOS["sync+powersgd2"] = {"name": "sync", "compression": "powersgd", "powersgd_rank": 2}
ALGOS["sync+powersgd4"] = {"name": "sync", "compression": "powersgd", "powersgd_rank": 4}
SYNCS = ["sync", "sync+1mb", "sync+fp16", "sync+powersgd2", "sync+powersgd4"]
AUTO = "auto"  # `alchemist plan --auto`'s pick for this link, made before any run
ALGOS[AUTO] = {"name": "sync"}  # replaced by the pick
PLAN_TAU = "bmuf+plan-tau"  # bmuf+overlap+fp16 at the tau the plan picks (--tau auto)
ALGOS[PLAN_TAU] = dict(ALGOS["bmuf+overlap+fp16"])
DEFAULT = [
    "sync",
    "sync+fp16",
    "sync+powersgd2",
    "sync+powersgd4",
    "bmuf+fp16+tau16",
    PLAN_TAU,
    "easgd+fp16+tau32",
    AUTO,
]


def job(name: str, algo: dict, epochs: float, seed: int = 0) -> dict:
    return dict(
        name=f"tta-{name.replace('+', '-')}",
        task=TASK,
        nodes=2,
        procs_per_node=1,
        algorithm=algo,
        hyper=dict(batch_size=64, lr=0.02, momentum=0.9, epochs=epochs, seed=seed),
        checkpoint={"every_steps": 1_000_000},
        curve={"every_steps": EVERY},
        data={"path": "data"},
        max_restarts=0,
    )


def link_mbit(hosts: Hosts, megabytes: int = 4) -> float:
    """Measure the link once: host 0 sends `megabytes` to host 1."""
    recv = (
        f"import socket,time;s=socket.socket();s.bind(('{hosts[1].addr}',5001));s.listen();"
        "c,_=s.accept();n=0;t=None\n"
        "while True:\n b=c.recv(65536)\n if not b: break\n"
        " t=t or time.perf_counter();n+=len(b)\n"
        "print(n*8/(time.perf_counter()-t)/1e6)"
    )
    send = (
        "import socket,time\nfor i in range(100):\n try: s=socket.create_connection("
        f"('{hosts[1].addr}',5001));break\n except OSError: time.sleep(0.05)\n"
        f"s.sendall(b'x'*{megabytes * 1_000_000});s.close()"
    )
    rx = subprocess.Popen(
        [*hosts[1].exec_prefix, sys.executable, "-c", recv], stdout=subprocess.PIPE, text=True
    )
    subprocess.run([*hosts[0].exec_prefix, sys.executable, "-c", send], check=True, timeout=120)
    return float(rx.communicate(timeout=120)[0])


def out_name(rate: float) -> str:
    """The results' file name: the 100 Mbit/s table keeps its name, other rates add theirs."""
    return "two_host_tta" if rate == 100 else f"two_host_tta-{rate:g}mbit"


def plan_auto(root: Path, probe: Path, names: list[str], epochs: float) -> dict[str, dict]:
    """`alchemist plan SPEC --auto --target 0.82 --emulated --link-probe PROBE` on the sync job,
    as a user runs it (its calibration runs go to this experiment's home, once for both
    rates); sets the auto variant to its pick. Returns its prediction for every variant
    the convergence model covers, the pick under AUTO."""
    import yaml

    from alchemist_jobs.commands.plan import auto_plan

    os.environ["ALCHEMIST_HOME"] = str(root)
    spec_file = root / "tta-auto.yaml"
    spec_file.write_text(yaml.safe_dump(job("auto", {"name": "sync"}, epochs)))
    args = argparse.Namespace(
        spec=str(spec_file),
        overrides=[],
        target=TARGET,
        link=None,
        link_probe=[probe],
        latency_us=50.0,
        workers_per_node=None,
        emulated=True,
        profile_steps=60,
        step_ms=None,
        model_mb=None,
        calibration_seeds=None,  # the default, as a user runs it
    )
    picked = auto_plan(args, log=lambda m: print(m, flush=True), extra=[ALGOS[n] for n in names if n != AUTO])
    ALGOS[AUTO] = dict(picked["pick"]["algorithm"])
    print(
        f"auto pick: {picked['pick']['label']}, predicted {picked['pick']['time_to_target_s']:.1f} s; "
        f"runner-up {picked['runner_up'] and picked['runner_up']['label']}",
        flush=True,
    )
    by_label = {e["label"]: e for e in picked.get("extra", [])}
    from alchemist_jobs.planner.auto import Candidate

    out = {n: by_label.get(Candidate(ALGOS[n]).label) for n in names if n != AUTO}
    out[AUTO] = picked["pick"]
    out["_plan"] = {
        k: picked[k]
        for k in ("pick", "runner_up", "start_s", "convergence", "calibration", "assumptions", "left_out")
    }
    return out


_PROFILES: dict[tuple, model.Profile] = {}  # (algorithm, exchange dtype) -> its profile


def _profile(root: Path, name: str, epochs: float) -> model.Profile:
    """Two processes computing at once, 60 steps; once per algorithm and exchange dtype."""
    algo = ALGOS[name]
    key = (algo["name"], algo.get("exchange_dtype"))
    if key not in _PROFILES:
        spec = parse_spec(job(name, algo, epochs), "<plan>", REPO)
        _PROFILES[key] = profile_spec(spec, root, steps=60, warmup=10, concurrent=2)
    return _PROFILES[key]


def set_plan_tau(root: Path, epochs: float, rate: float) -> int:
    """The plan-tau variant's tau: `--tau auto`'s choice for this link. Chosen before the auto
    plan is asked for its prediction of each variant, so that it predicts this tau."""
    algo = ALGOS[PLAN_TAU]
    a = model.Algorithm(algo["name"], algo.get("tau", 1), algo.get("overlap", False))
    tau = model.choose_tau(_profile(root, PLAN_TAU, epochs), a, 2, _cluster(rate))
    ALGOS[PLAN_TAU] = dict(algo, tau=tau)
    return tau


def _cluster(rate: float):
    probe = RESULTS / f"{out_name(rate)}-probe.json"
    return cluster_facts(
        workers_per_node=1,
        link=None,
        latency_us=50.0,
        stack=None,
        runs_root=None,
        job_name="tta",
        probe=probe,
    )


def plan_first(
    root: Path, names: list[str], epochs: float, rate: float, auto: dict[str, dict]
) -> dict[str, dict]:
    """The plan's step time for every variant, from a fresh link probe and profiles of two
    processes computing at once (the plan-tau variant at the tau set_plan_tau chose). Sync
    with compression (which the scaling model's profile does not take) and the auto pick:
    the auto plan's step time."""
    cluster = _cluster(rate)
    out = {}
    for name in names:
        algo = ALGOS[name]
        if name == AUTO or algo.get("compression", "none") != "none":
            p = auto.get(name)
            out[name] = dict(tau=algo.get("tau", 1), step_s=p["step_s"] if p else None)
            continue
        prof = _profile(root, name, epochs)
        a = model.Algorithm(algo["name"], algo.get("tau", 1), algo.get("overlap", False))
        point = model.predict({2: prof}, [a], [2], cluster)[0]
        out[name] = dict(tau=a.tau, step_s=point.step_s, compute_s=point.compute_s, exposed_s=point.exposed_s)
        print(
            f"plan {name:>18}: tau {a.tau}, step {point.step_s * 1e3:.1f} ms "
            f"(compute {point.compute_s * 1e3:.1f}, waited {point.exposed_s * 1e3:.1f})",
            flush=True,
        )
    return out


def med(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs: list) -> str:
    ys = [x for x in xs if x is not None]
    miss = len(xs) - len(ys)
    text = f"{min(ys):.1f}-{max(ys):.1f}" if ys else "—"
    return text + (f" ({miss} missed)" if miss else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=float, default=6)
    ap.add_argument("--rate", type=float, default=100, help="link limit, Mbit/s")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--only",
        nargs="*",
        default=DEFAULT,
        choices=list(ALGOS),
        help="variants to run (sync first: the baseline)",
    )
    ap.add_argument(
        "--replot", action="store_true", help="redraw the figure from the last run's JSON, running nothing"
    )
    args = ap.parse_args()
    if args.replot:
        saved = json.loads((RESULTS / f"{out_name(args.rate)}.json").read_text())
        plot(saved["runs"], saved["rate_mbit"], out_name(args.rate))
        return
    reason = unavailable()
    if reason:
        sys.exit(f"two_host_tta: {reason}")
    root = home("two_host_tta")
    runs: dict[str, list[dict]] = {n: [] for n in args.only}
    load = [os.getloadavg()[0]]
    probe = probe_link(int(args.rate), RESULTS / f"{out_name(args.rate)}-probe.json")
    if PLAN_TAU in args.only:
        print(f"{PLAN_TAU}: tau {set_plan_tau(root, args.epochs, args.rate)}", flush=True)
    auto = plan_auto(root, probe, args.only, args.epochs) if AUTO in args.only else {}
    plan = plan_first(root, args.only, args.epochs, args.rate, auto)
    with Hosts(2, rate_mbit=args.rate) as hosts:
        measured = link_mbit(hosts)
        print(f"link: limit {args.rate:g} Mbit/s, measured {measured:.1f} Mbit/s", flush=True)
        sched = NetnsScheduler(root, hosts)
        for rep in range(args.repeats):
            for name in args.only:
                o = run_job(root, job(name, ALGOS[name], args.epochs, seed=rep), scheduler=sched)
                o["curve"] = evaluate_snapshots(RunDir(Path(o["run_dir"])), root)
                o["tta"] = time_to_target(o["curve"], TARGET)
                res = o["result"]
                c = res["communication"]
                busy = c["seconds"] + c["overlapped_seconds"]
                o["link_use"] = c["sent_bytes"] * 8 / busy / (measured * 1e6) if busy else None
                o["steady_step_s"] = steady_window(RunDir(Path(o["run_dir"])))["step_s"]
                runs[name].append(o)
                load.append(os.getloadavg()[0])
                print(
                    f"[{rep + 1}/{args.repeats}] {name:>18}: accuracy {res['test_accuracy']:.4f}, "
                    f"time to {TARGET}: {o['tta'] and round(o['tta'], 1)} s, wall "
                    f"{res['wall_s']:.1f} s, snapshots {res['curve_snapshot_s']:.2f} s",
                    flush=True,
                )

    base = med([o["tta"] for o in runs.get("sync", [])])
    sync_meds = [med([o["tta"] for o in runs[n]]) for n in runs if n in SYNCS]
    best_sync = min((t for t in sync_meds if t is not None), default=None)
    sync_acc = med([o["result"]["test_accuracy"] for o in runs.get("sync", [])])
    rows = []
    for name, os_ in runs.items():
        ttas = [o["tta"] for o in os_]
        acc = med([o["result"]["test_accuracy"] for o in os_])
        t = med(ttas)
        steps_s = med([o["workers"][0]["train_steps"] / o["workers"][0]["train_s"] for o in os_])
        rows.append(
            [
                name,
                round(acc, 4),
                None if sync_acc is None else round(100 * (acc - sync_acc), 2),
                None if t is None else round(t, 1),
                spread(ttas),
                None if (t is None or base is None) else round(base / t, 2),
                None if (t is None or best_sync is None) else round(best_sync / t, 2),
                round(med([o["result"]["communication"]["sent_bytes"] / o["result"]["steps"] for o in os_])),
                round(steps_s, 2),
                round(
                    med([o["result"]["communication"]["seconds"] / o["result"]["steps"] for o in os_]) * 1e3,
                    1,
                ),
                None
                if med([o["link_use"] for o in os_]) is None
                else round(med([o["link_use"] for o in os_]), 2),
                round(med([o["result"]["curve_snapshot_s"] / o["result"]["wall_s"] for o in os_]) * 100, 2),
                ALGOS[name].get("tau", 1),
                None if plan[name]["step_s"] is None else round(plan[name]["step_s"] * 1e3, 1),
                round(med([o["steady_step_s"] for o in os_]) * 1e3, 1),
                None
                if plan[name]["step_s"] is None
                else f"{med([o['steady_step_s'] for o in os_]) / plan[name]['step_s'] - 1:+.1%}",
                None if not auto.get(name) else round(auto[name]["time_to_target_s"], 1),
                None
                if (not auto.get(name) or t is None)
                else f"{t / auto[name]['time_to_target_s'] - 1:+.1%}",
            ]
        )
    pick = auto.get("_plan", {}).get("pick")
    runner = auto.get("_plan", {}).get("runner_up")
    write_markdown(
        out_name(args.rate),
        f"Time to {TARGET} accuracy on two hosts over a {args.rate:g} Mbit/s link",
        f"Two network-namespace hosts, one worker each, link limited to {args.rate:g} Mbit/s "
        f"per direction (measured {measured:.1f} Mbit/s); `synthetic` with a "
        f"~1M-parameter MLP, batch 64 per worker, lr 0.02, momentum 0.9, {args.epochs:g} "
        f"epochs; bmuf and easgd exchange every tau steps (the table's column). Medians of "
        f"{args.repeats} runs each (seeds 0 to {args.repeats - 1}), run round-robin; load average (1 min) during the runs "
        f"{min(load):.1f} to {max(load):.1f} on {os.cpu_count()} CPUs."
        + (
            f" `auto` is `alchemist plan --auto --target {TARGET}`'s pick for this link, made "
            f"before any run: {pick['label']} (runner-up: {runner and runner['label']})."
            if pick
            else ""
        ),
        [
            "variant",
            "final accuracy",
            "vs sync (points)",
            f"time to {TARGET} (s)",
            "spread (s)",
            "speed-up vs sync",
            "speed-up vs best sync",
            "rank 0 bytes sent/step",
            "rank 0 steps/s",
            "exposed comm/step (ms)",
            "link use",
            "snapshot cost (% of wall)",
            "tau",
            "plan ms/step",
            "measured ms/step",
            "measured vs plan",
            f"plan time to {TARGET} (s)",
            "measured vs plan time",
        ],
        rows,
        [
            f"time to {TARGET}: wall seconds from the workers' start, interpolated linearly "
            f"between rank 0's snapshots (every {EVERY} steps) around the first crossing, "
            "evaluated after the run; spread: min-max over the runs",
            "bytes: ring all-reduce accounting for collectives, bytes on the wire for the parameter server",
            "exposed comm: what the steps waited for; link use: bytes sent over the seconds "
            "communication was in flight (exposed + overlapped), over the measured capacity",
            "snapshot cost: rank 0's seconds copying and writing snapshots, the only part of "
            "the measurement on the training path",
            "plan ms/step: `alchemist plan --emulated --link-probe` before the runs (a fresh "
            "probe, profiles of two processes at once); measured: rank 0's steady-state step "
            f"time, median; tau of {PLAN_TAU}: the plan's --tau auto choice; sync with "
            "compression and auto: the auto plan's step time",
            "speed-up vs best sync: the fastest sync variant's median time to target (plain, "
            "fp16 or PowerSGD) over this one's",
            f"plan time to {TARGET}: `alchemist plan --auto`'s prediction (start + steps to "
            "target from its calibration runs x its step time for this link), for every variant "
            "its convergence model covers; measured vs plan: the median against it",
        ],
    )
    (RESULTS / f"{out_name(args.rate)}.json").write_text(
        json.dumps(
            dict(
                link_mbit=measured,
                rate_mbit=args.rate,
                epochs=args.epochs,
                target=TARGET,
                plan=plan,
                auto_plan=auto,
                algorithms={n: ALGOS[n] for n in runs},
                runs={
                    n: [
                        dict(
                            tta=o["tta"],
                            accuracy=o["result"]["test_accuracy"],
                            wall_s=o["result"]["wall_s"],
                            steady_step_s=o["steady_step_s"],
                            link_use=o["link_use"],
                            communication=o["result"]["communication"],
                            steps=o["result"]["steps"],
                            curve=o["curve"],
                            run=o["run_dir"],
                        )
                        for o in os_
                    ]
                    for n, os_ in runs.items()
                },
            ),
            indent=1,
        )
        + "\n"
    )

    plot(
        {n: [dict(curve=o["curve"], tta=o["tta"]) for o in os_] for n, os_ in runs.items()},
        args.rate,
        out_name(args.rate),
    )


def plot(runs: dict[str, list[dict]], rate: float, out: str = "two_host_tta") -> None:
    """The figure: every run's curve (log time: sync's minutes next to seconds) and the
    median time to target with each run's; `runs` as the JSON keeps them."""
    fig, ax = figure(1, 2, (13, 4.5))
    for i, (name, os_) in enumerate(runs.items()):
        for j, o in enumerate(os_):
            ax[0][0].plot(
                [p["wall_s"] for p in o["curve"]],
                [p["accuracy"] for p in o["curve"]],
                color=f"C{i}",
                lw=1,
                alpha=0.8,
                label=name if j == 0 else None,
            )
    ax[0][0].axhline(TARGET, color="grey", ls=":", lw=1)
    ax[0][0].set_xscale("log")
    ax[0][0].set(
        xlabel="wall time (s, log scale)",
        ylabel="test accuracy",
        title=f"accuracy against time, {rate:g} Mbit/s link (every run)",
    )
    ax[0][0].legend(fontsize=8)
    names = list(runs)
    meds = [med([o["tta"] for o in runs[n]]) or 0 for n in names]
    ax[0][1].bar(names, meds)
    for k, n in enumerate(names):
        ax[0][1].scatter([k] * len(runs[n]), [o["tta"] or 0 for o in runs[n]], color="k", s=8)
    ax[0][1].set(ylabel="seconds", title=f"time to {TARGET}: median and each run (0 = not reached)")
    ax[0][1].tick_params(axis="x", rotation=30)
    save_figure(fig, out)


if __name__ == "__main__":
    main()
