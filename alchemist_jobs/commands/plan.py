"""`alchemist plan`: predict a job's step time, throughput and speed-up at N nodes, per algorithm.

    alchemist plan examples/digits.yaml --nodes 1,2,4,8 --algorithms sync,bmuf --link 25gbit

Profiles the job briefly on this machine (or takes `--step-ms`/`--model-mb`), takes the target's
shape and links from flags, a link probe, the stack output or past runs
(alchemist_jobs/planner/facts.py), and prints one row per (algorithm, nodes) with the
assumptions underneath; `--json` prints the same as one object, `--plot FILE.png` draws
throughput and efficiency against nodes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
from pathlib import Path

from alchemist_jobs.commands import command, complete_files
from alchemist_jobs.commands.stack import complete_stack
from alchemist_jobs.errors import UserError
from alchemist_jobs.rundir import default_root, runs_root
from alchemist_jobs.stack_kinds import kind_of
from alchemist_jobs.worker_env import threads_per_worker

EMULATED_MAX_WORKERS = 64  # --emulated runs this many profile processes at once, at most


def _number(accepted: str, low: float, high: float, *, integer: bool = False, low_open: bool = False):
    """An argparse type: a finite number in [low, high] ((low, high] with low_open)."""

    def parse(text: str) -> float | int:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            value = None
        if (
            value is None
            or not math.isfinite(value)
            or value > high
            or value < low
            or (low_open and value == low)
        ):
            raise argparse.ArgumentTypeError(f"{text!r}; accepted: {accepted}")
        return value

    return parse


_MS = _number("milliseconds > 0, at most a day", 0.0, 86_400_000.0, low_open=True)
_MB = _number("megabytes > 0, at most 10^9 (a petabyte)", 0.0, 1e9, low_open=True)
_US = _number("microseconds >= 0, at most 10^9", 0.0, 1e9)
_COUNT = _number("a whole number >= 1", 1, 10**6, integer=True)


def _tau(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return _COUNT(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r}; accepted: a whole number >= 1, or auto") from None


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "plan",
        "predict speed-up and efficiency at N nodes before paying for them",
        [
            "alchemist plan examples/digits.yaml --nodes 1,2,4,8 --algorithms sync,bmuf --link 25gbit",
            "alchemist plan examples/digits.yaml --stack prod-us --json",
        ],
        description=__doc__,
    )
    p.add_argument("spec", help="job spec (YAML)").completer = complete_files("yaml", "yml")  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec field, as for `alchemist run`",
    )
    p.add_argument(
        "--stack",
        default=None,
        help="take GPUs per node and its network fabric's links from this stack's output",
    ).completer = complete_stack  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument(
        "--outputs",
        type=Path,
        default=None,
        help="the stack's outputs as a JSON file (instead of asking Pulumi)",
    ).completer = complete_files("json")  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument("--nodes", default="1,2,4,8,16", help="node counts (default 1,2,4,8,16)")
    p.add_argument(
        "--algorithms",
        default=None,
        help="comma-separated, from sync,bmuf,easgd (default: the spec's, or all three)",
    )
    p.add_argument("--link", default=None, help="what one node sends at, e.g. 100mbit, 25gbit")
    p.add_argument(
        "--link-probe",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="the link as measured between nodes of the target by "
        "`python -m alchemist_jobs.planner.probe` (bandwidth and latency); "
        "repeat for probes of several node counts (emulated nodes)",
    )
    p.add_argument(
        "--latency-us", type=_US, default=50.0, help="one message between nodes, microseconds (default 50)"
    )
    p.add_argument(
        "--workers-per-node",
        type=_COUNT,
        default=None,
        help="workers per node (default: the stack's GPUs per node when the spec "
        "asks for GPUs, else the spec's procs_per_node)",
    )
    p.add_argument(
        "--tau",
        type=_tau,
        default=None,
        help="bmuf/easgd steps per exchange "
        "(default: the spec's, else 8); auto: the smallest at which a step waits "
        "for communication at most 10%% of its compute at the largest node count",
    )
    p.add_argument(
        "--step-ms",
        type=_MS,
        default=None,
        help="a measured step time instead of profiling (needs --model-mb)",
    )
    p.add_argument("--model-mb", type=_MB, default=None, help="MB one exchange moves")
    p.add_argument("--profile-steps", type=_COUNT, default=200, help="steps to time (default 200)")
    p.add_argument(
        "--emulated",
        action="store_true",
        help="the nodes are emulated on this machine and share its processors (the "
        "local stack, network namespaces): profile each node count with that "
        "many workers computing at once",
    )
    p.add_argument(
        "--auto",
        action="store_true",
        help="pick the configuration (algorithm, tau, exchange dtype, overlap, sync "
        "compression) with the shortest predicted time to --target at the spec's node count; "
        "costs one short local calibration run per point of the convergence model, on the "
        "first plan for a job (cached in the run home); `alchemist run --set algorithm=auto` "
        "applies the pick (docs/plan.md)",
    )
    p.add_argument(
        "--target",
        type=_number("an accuracy in (0, 1]", 0.0, 1.0, low_open=True),
        default=None,
        help="--auto: the test accuracy to reach",
    )
    p.add_argument(
        "--calibration-seeds",
        type=_COUNT,
        default=None,
        help="--auto: seeds per calibration point, the fit taking their mean (default 3; "
        "each seed is one more run per point, cached like the first)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--plot", type=Path, default=None, help="write a PNG of the plan")
    p.set_defaults(func=cmd_plan)


def planned() -> tuple[str, ...]:
    """The algorithms whose exchange the scaling model knows (async's pace is its servers')."""
    from alchemist_jobs.planner.model import PATTERNS
    from alchemist_jobs.spec import ALGORITHMS

    return tuple(name for name, cls in ALGORITHMS.items() if cls(name=name).exchange in PATTERNS)


def _algorithms(args: argparse.Namespace, spec) -> list:
    from alchemist_jobs.planner.model import Algorithm
    from alchemist_jobs.spec import ALGORITHMS, MODEL

    known = planned()
    names = (
        args.algorithms.split(",")
        if args.algorithms
        else [spec.algorithm.name]
        if spec.algorithm.name in known
        else list(known)
    )
    # The spec's own block length and overlap, where it has them, for every block algorithm.
    own = spec.algorithm if spec.algorithm.exchange == MODEL else None
    out = []
    for name in (n.strip() for n in names):
        if name not in known:
            raise UserError(
                f"--algorithms: {name!r} is not planned; expected some of "
                f"{','.join(known)} (async's pace depends on the server, not a ring)"
            )
        exchange = ALGORITHMS[name](name=name).exchange
        tau = (None if args.tau == "auto" else args.tau) or (own.steps_per_exchange if own else None) or 8
        if tau < 1:
            raise UserError(f"--tau {tau}: expected a whole number of at least 1")
        blocks = exchange == MODEL
        out.append(
            Algorithm(
                name=name,
                tau=tau if blocks else 1,
                exchange=exchange,
                overlap=blocks and own is not None and own.overlapped,
            )
        )
    return out


def build_plan(args: argparse.Namespace) -> dict:
    """Everything the plan prints, as one JSON-ready dict."""
    from alchemist_jobs.planner import facts, model, profile
    from alchemist_jobs.spec import MODEL, load_spec

    spec = load_spec(args.spec, args.overrides)
    nodes = facts.parse_nodes(args.nodes)
    algos = _algorithms(args, spec)
    stack = None
    if kind_of(args.stack).has_outputs:
        from alchemist_jobs.stacks import resolve

        stack = resolve(args.stack, args.outputs)
    workers = args.workers_per_node
    if workers is None:
        workers = (
            stack.gpu.per_node
            if stack is not None and spec.resources.gpu and stack.gpu.per_node
            else spec.procs_per_node
        )
    if workers < 1:
        raise UserError(f"--workers-per-node {workers}: expected a whole number of at least 1")
    home = default_root()
    known = dict(
        workers_per_node=workers,
        link=args.link,
        latency_us=args.latency_us,
        stack=stack,
        runs_root=runs_root(home) if stack is None else None,
        job_name=spec.name,
    )
    cluster: dict[int, model.Cluster] | model.Cluster
    if len(args.link_probe) > 1:
        cluster, assumptions = facts.probed_clusters(args.link_probe, **known)
    else:
        one = facts.cluster_facts(probe=(args.link_probe or [None])[0], **known)
        cluster, assumptions = one, list(one.assumptions)
    if args.step_ms is not None or args.model_mb is not None:
        if args.step_ms is None or args.model_mb is None:
            raise UserError("--step-ms and --model-mb go together: give both or neither")
        if args.emulated:
            raise UserError(
                "--emulated profiles the job under the emulated nodes' contention; "
                "with --step-ms there is nothing to profile: drop one"
            )
        prof: dict[int, model.Profile] | model.Profile = profile.given_profile(
            spec, args.step_ms, args.model_mb
        )
    elif args.emulated:
        too_many = [n for n in nodes if n * workers > EMULATED_MAX_WORKERS]
        if too_many:
            raise UserError(
                f"--emulated --nodes {args.nodes}: {too_many[0]} node(s) of {workers} "
                f"worker(s) would profile {too_many[0] * workers} processes at once "
                f"on this machine; at most {EMULATED_MAX_WORKERS}"
            )
        prof = {
            n: profile.profile_spec(
                spec,
                home,
                steps=args.profile_steps,
                concurrent=n * workers,
                code_dir=Path(args.spec).resolve().parent,
            )
            for n in sorted({1, *nodes})
        }
    else:
        prof = profile.profile_spec(
            spec, home, steps=args.profile_steps, code_dir=Path(args.spec).resolve().parent
        )
    if args.tau == "auto":
        n = max(nodes)
        algos = [
            a
            if a.exchange != MODEL
            else dataclasses.replace(a, tau=model.choose_tau(at_nodes(prof, n), a, n, at_nodes(cluster, n)))
            for a in algos
        ]
        assumptions.append(
            "tau auto: "
            + ", ".join(f"{a.name} {a.tau}" for a in algos if a.exchange == MODEL)
            + f", the smallest at which a step waits at most {model.AUTO_TAU_EXPOSED:.0%} of its "
            f"compute at {n} node(s)"
            + (" with the exchange overlapped" if any(a.overlap for a in algos) else "")
        )
    points = model.predict(prof, algos, nodes, cluster)
    plan = dict(
        job=spec.name,
        profile=profile_summary(prof if isinstance(prof, model.Profile) else prof[1]),
        assumptions=assumptions,
        points=[p.as_dict() for p in points],
        best=model.best_by_nodes(points),
        tau={a.name: a.tau for a in algos if a.name != "sync"},
    )
    if isinstance(prof, dict):  # --emulated: the profile of each node count
        plan["profiles"] = {str(n): profile_summary(p) for n, p in prof.items()}
    return plan


def at_nodes(facts, n: int):
    from alchemist_jobs.planner.model import nearest

    return nearest(facts, n) if isinstance(facts, dict) else facts


def profile_summary(prof) -> dict:
    return dict(
        forward_s=prof.forward_s,
        backward_s=prof.backward_s,
        optimizer_s=prof.optimizer_s,
        exchange_local_s=prof.exchange_local_s,
        exchange_bytes=prof.exchange_bytes,
        buckets=[list(b) for b in prof.buckets],
        batch_per_worker=prof.batch_per_worker,
        source=prof.source,
    )


def render_table(plan: dict) -> str:
    prof = plan["profile"]
    lines = [
        f"plan for {plan['job']}: {prof['source']}; compute "
        f"{(prof['forward_s'] + prof['backward_s'] + prof['optimizer_s']) * 1e3:.2f} ms/step, "
        f"{prof['exchange_bytes'] / 1e6:.2f} MB per exchange"
        + (f" in {len(prof['buckets'])} DDP bucket(s)" if prof["buckets"] else "")
    ]
    for n, p in (plan.get("profiles") or {}).items():
        if n != "1":
            lines.append(
                f"  with {n} node(s) computing at once: "
                f"{(p['forward_s'] + p['backward_s'] + p['optimizer_s']) * 1e3:.2f} ms/step"
            )
    lines.append(
        f"{'algorithm':<10}{'nodes':>6}{'workers':>8}{'step ms':>10}{'comm ms':>10}"
        f"{'waited ms':>10}{'samples/s':>12}{'speed-up':>10}{'efficiency':>11}"
    )
    for p in plan["points"]:
        lines.append(
            f"{p['algorithm']:<10}{p['nodes']:>6}{p['workers']:>8}"
            f"{p['step_s'] * 1e3:>10.2f}{p['communication_s'] * 1e3:>10.2f}"
            f"{p.get('exposed_s', 0.0) * 1e3:>10.2f}"
            f"{p['samples_per_s']:>12,.0f}{p['speedup']:>9.2f}x{p['efficiency']:>10.0%}"
        )
    lines.append("best: " + ", ".join(f"{n} node(s) {a}" for n, a in plan["best"].items()))
    lines += ["assumptions:"] + [f"  - {a}" for a in plan["assumptions"]]
    return "\n".join(lines)


def write_plot(plan: dict, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        raise UserError("--plot: matplotlib is not installed; `pip install matplotlib`") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for algo in dict.fromkeys(p["algorithm"] for p in plan["points"]):
        pts = [p for p in plan["points"] if p["algorithm"] == algo]
        ax1.plot([p["nodes"] for p in pts], [p["samples_per_s"] for p in pts], "o-", label=algo)
        ax2.plot([p["nodes"] for p in pts], [p["efficiency"] for p in pts], "o-", label=algo)
    ax1.set(xlabel="nodes", ylabel="samples/s", title=f"{plan['job']}: predicted throughput")
    ax2.set(xlabel="nodes", ylabel="scaling efficiency", ylim=(0, 1.05), title="efficiency")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise UserError(f"--plot {str(path)!r}: cannot write it ({e.strerror})") from None
    finally:
        plt.close(fig)


def _raw_spec(path: Path, overrides: list[str]) -> dict:
    """The spec as YAML gives it, with the --set overrides applied (what load_spec validates)."""
    from alchemist_jobs.input_files import load_yaml, read_text
    from alchemist_jobs.spec import apply_override, shown_source

    raw = load_yaml(read_text(path, "job spec"), shown_source(str(path))) or {}
    if not isinstance(raw, dict):
        raise UserError(f"{shown_source(str(path))}: the spec must be a YAML mapping")
    for assignment in overrides:
        apply_override(raw, assignment)
    return raw


def auto_plan(args: argparse.Namespace, log=None, extra: list[dict] | None = None) -> dict:
    """`--auto`: every candidate's predicted time to the target at the spec's node count, the
    pick and the runner-up (planner/auto.py), recorded for `run --set algorithm=auto`."""
    from alchemist_jobs.planner import auto, convergence, facts, profile
    from alchemist_jobs.runtime.tasks import load_task
    from alchemist_jobs.spec import load_spec, parse_spec

    if args.target is None:
        raise UserError(
            "--auto: --target is required; accepted: a test accuracy in (0, 1], e.g. --target 0.82"
        )
    if args.step_ms is not None or args.model_mb is not None:
        raise UserError("--auto profiles the job's model itself; drop --step-ms/--model-mb")
    spec = load_spec(args.spec, args.overrides)
    if not spec.task.trained_by_alchemist or spec.task.framework != "torch":
        raise UserError(
            f"--auto: task {spec.task.kind} runs its own loop; accepted: a built-in task or a "
            "task.entry (the calibration runs and the profile run the job's model)"
        )
    spec_dir = Path(args.spec).resolve().parent
    raw = _raw_spec(Path(args.spec), args.overrides)
    home = default_root()
    say = log or (lambda m: print(m, file=sys.stderr, flush=True))
    nodes = spec.nodes
    workers = args.workers_per_node or spec.procs_per_node
    probe = args.link_probe[0] if args.link_probe else None
    cluster = facts.cluster_facts(
        workers_per_node=workers,
        link=args.link,
        latency_us=args.latency_us,
        stack=None,
        runs_root=runs_root(home),
        job_name=spec.name,
        probe=probe,
    )
    concurrent = nodes * workers if args.emulated else 1
    profiles = {}
    for name in auto.profile_algorithms():
        body = dict(raw, algorithm={"name": name})
        say(f"profiling {name} ({args.profile_steps} steps, {concurrent} process(es) at once)")
        profiles[name] = profile.profile_spec(
            parse_spec(body, f"--auto {name}", spec_dir),
            home,
            steps=args.profile_steps,
            concurrent=concurrent,
            code_dir=spec_dir,
        )
    task = load_task(spec, home, code_dir=spec_dir)
    params = list(task.model.parameters())
    shape_list = tuple(tuple(p.shape) for p in params)
    shapes = auto.Shapes(
        shape_list,
        params[0].element_size(),
        auto.measure_powersgd_local(
            shape_list,
            auto.POWERSGD_RANKS,
            threads=threads_per_worker(spec.resources.cpu, spec.procs_per_node),
        ),
    )
    seeds = args.calibration_seeds or auto.CALIBRATION_SEEDS
    runs = auto.calibrate(raw, spec, spec_dir, home, args.target, log=say, seeds=seeds)
    conv = convergence.fit(auto.observations(runs, args.target))
    # Before the first step: the calibration runs' start (auto.start_estimate), plus the
    # model's first broadcast over the link (DDP and the block algorithms start every worker
    # from rank 0's).
    model_bytes = profiles["sync"].exchange_bytes
    start_s = (
        auto.start_estimate([r["start_s"] for r in runs.values()]) + model_bytes / cluster.link_bytes_per_s
    )
    cands = auto.candidates(spec)
    per_seed = [convergence.fit(auto.observations(r, args.target)) for r in auto.by_seed(runs)]
    ranked, left_out = auto.rank_choices(
        cands,
        conv,
        lambda c: auto.step_time(c, profiles, nodes, cluster, shapes),
        start_s,
        per_seed=per_seed if len(per_seed) > 1 else None,
    )
    if not ranked:
        raise UserError(
            f"--auto --target {args.target:g}: no calibration run reached it in "
            f"{spec.hyper.epochs:g} epochs; accepted: a lower --target, or more hyper.epochs"
        )
    out = dict(
        job=spec.name,
        target=args.target,
        nodes=nodes,
        workers_per_node=workers,
        link_bytes_per_s=cluster.link_bytes_per_s,
        pick=ranked[0].as_dict(),
        runner_up=ranked[1].as_dict() if len(ranked) > 1 else None,
        candidates=[c.as_dict() for c in ranked],
        left_out=left_out,
        start_s=round(start_s, 3),
        convergence=dict(steps=conv.steps, accuracy=conv.accuracy, rms_log=conv.rms_log, runs=conv.runs),
        calibration={
            k: dict(run_id=v["run_id"], final_accuracy=v["final_accuracy"]) for k, v in runs.items()
        },
        assumptions=list(cluster.assumptions)
        + [
            "steps to target and final accuracy: "
            + "log(steps) = base[family](tau) + half[family] + overlap[family], each family by "
            + "least squares over its own calibration runs, piecewise linear in log2(tau) between "
            + f"the taus they measured ({len(runs)} runs on this machine, {seeds} seed(s) a point, "
            + f"rms {conv.rms_log:.2f} "
            + "in log); a candidate outside them is not predicted",
            "step time: the scaling model over profiles of sync, bmuf and easgd; PowerSGD: its "
            "three all-reduces per bucket and its local arithmetic, all waited for",
        ],
    )
    auto.record_pick(home, spec, out)
    for algorithm in extra or ():  # what a caller asks beside the grid (bench/paradigms)
        c = auto.Candidate(algorithm)
        if conv.predictable(c.features):
            steps, step = (
                conv.steps_to_target(c.features),
                auto.step_time(c, profiles, nodes, cluster, shapes),
            )
            out.setdefault("extra", []).append(
                auto.Choice(c, steps, step, start_s + steps * step, conv.final_accuracy(c.features)).as_dict()
            )
    return out


def render_auto(plan: dict) -> str:
    def line(tag: str, c: dict) -> str:
        return (
            f"{tag}: {c['label']}: {c['time_to_target_s']:.1f} s to {plan['target']:g} "
            f"({c['steps_to_target']:.0f} steps x {c['step_s'] * 1e3:.1f} ms, plus "
            f"{plan['start_s']:.1f} s to start), final accuracy {c['final_accuracy']:.4f}\n"
            f"  " + " ".join(f"--set {shlex.quote(a)}" for a in c["set"])
        )

    lines = [
        f"auto plan for {plan['job']}: {plan['nodes']} node(s) x {plan['workers_per_node']} "
        f"worker(s), link {plan['link_bytes_per_s'] * 8 / 1e6:,.0f} Mbit/s",
        line("pick", plan["pick"]),
    ]
    if plan["runner_up"]:
        lines.append(line("runner-up", plan["runner_up"]))
    lines.append("apply it: alchemist run SPEC --set algorithm=auto; candidates, fit and assumptions: --json")
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    if args.auto or args.target is not None or args.calibration_seeds is not None:
        if not args.auto:
            if args.target is not None:
                raise UserError("--target goes with --auto; accepted: --auto --target ACCURACY")
            raise UserError(
                "--calibration-seeds goes with --auto; accepted: --auto --target ACCURACY --calibration-seeds N"
            )
        picked = auto_plan(args)
        print(json.dumps(picked, indent=2) if args.json else render_auto(picked))
        return 0
    plan = build_plan(args)
    if args.plot is not None:
        write_plot(plan, args.plot)
    print(json.dumps(plan, indent=2) if args.json else render_table(plan))
    if args.plot is not None and not args.json:
        print(f"plot: {args.plot}", file=sys.stderr)
    return 0
