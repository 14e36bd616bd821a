"""`alchemist plan --auto`: pick the training configuration with the shortest predicted time
to a target quality on the link at hand, and remember it for `alchemist run --set algorithm=auto`.

    time_to_target = start_s + steps_to_target(candidate) * step_s(candidate, link)

`step_s` is the scaling model's (planner/model.py) over the job's profile; PowerSGD's step
(which the model did not cover) is modelled here from the parameters' shapes and a timing of
its local arithmetic. `steps_to_target` and the final accuracy come from the convergence
model (planner/convergence.py) fitted to calibration runs: short real runs of the job on this
machine (the local stack), for every point of `CALIBRATION` one per seed (`CALIBRATION_SEEDS`),
whose steps to the target do not depend on the link (the same arithmetic runs at any link
speed). They are cached in the run home per job (the spec without its algorithm), so a second
plan costs no runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from alchemist_jobs.errors import UserError
from alchemist_jobs.planner import model
from alchemist_jobs.planner.convergence import Features, Fit, Observation
from alchemist_jobs.rundir import RunDir, read_json, write_json_atomic
from alchemist_jobs.spec import ALGORITHMS, JobSpec, parse_spec

# The grid searched: each algorithm class's own options (spec.py) at the values a user would try.
SYNC_COMPRESSION = ("none", "fp16", "powersgd")
POWERSGD_RANKS = (2, 4)
TAUS = (4, 8, 16, 32, 64)
EXCHANGE_DTYPES = ("fp32", "fp16")
OVERLAP = (False, True)
# easgd's moving rate: the paper's beta = 0.9 spread over the workers (Zhang et al. 2015, sec. 3:
# alpha = beta / p), the setting its experiments use.
EASGD_BETA = 0.9
# A pick may lose at most this much final accuracy against plain sync's (the calibration runs').
ACCURACY_TOLERANCE = 0.01
CURVE_EVERY = 8  # calibration runs: steps between snapshots (the resolution of steps to target)
# Each calibration point runs with this many seeds (the job's, then the next ones), and the fit
# takes their mean. One seed's run decides too much by luck: where a job's accuracy wanders on
# a plateau near the target, its first crossing and its final accuracy move by a point or more
# from one seed to the next (bench/paradigms/two_host_tta.py: easgd with overlap at tau 64
# ended 0.843, 0.838 and 0.816 at seeds 0, 1 and 2, against sync's 0.852, 0.857 and 0.835).
CALIBRATION_SEEDS = 3

# The calibration runs. Each block family at every tau of the grid but 4 with a 16-bit wire,
# without overlap and with it (the knots each group's steps and accuracy are interpolated
# between), and at tau 16 in fp32 (its half term); sync plain and fp16, PowerSGD at each rank:
# 22 points for 22 terms (planner/convergence.py), each run with CALIBRATION_SEEDS seeds. Left
# uncalibrated, and so unpredicted: tau 4 (an exchange every 4 steps is the slow end of the grid
# on any link the block algorithms are for) and overlap with an fp32 wire (overlap is for links
# too slow for fp32 to pay).
_BLOCK_CALIBRATION: tuple[dict[str, Any], ...] = (
    *({"tau": tau, "exchange_dtype": "fp16"} for tau in (8, 16, 32, 64)),
    {"tau": 16},
    *({"tau": tau, "exchange_dtype": "fp16", "overlap": True} for tau in (8, 16, 32, 64)),
)
CALIBRATION: tuple[dict[str, Any], ...] = (
    {"name": "sync"},
    {"name": "sync", "compression": "fp16"},
    {"name": "sync", "compression": "powersgd", "powersgd_rank": 2},
    {"name": "sync", "compression": "powersgd", "powersgd_rank": 4},
    *({"name": name, **a} for name in ("bmuf", "easgd") for a in _BLOCK_CALIBRATION),
)


@dataclass(frozen=True)
class Candidate:
    """One configuration: the spec's `algorithm` section it would run with."""

    algorithm: dict[str, Any]

    @property
    def label(self) -> str:
        a = self.algorithm
        parts = [a["name"]]
        if a.get("compression", "none") != "none":
            parts.append(a["compression"])
            if a["compression"] == "powersgd":
                parts[-1] += f"-r{a.get('powersgd_rank', 2)}"
        if "tau" in a:
            parts.append(f"tau{a['tau']}")
        if a.get("exchange_dtype", "fp32") != "fp32":
            parts.append(a["exchange_dtype"])
        if a.get("overlap"):
            parts.append("overlap")
        return "+".join(parts)

    @property
    def features(self) -> Features:
        algo = ALGORITHMS[self.algorithm["name"]](**self.algorithm)
        family = algo.name
        if algo.wire_format == "powersgd":
            family = f"powersgd-r{self.algorithm.get('powersgd_rank', 2)}"
        return Features(
            family=family,
            tau=algo.steps_per_exchange,
            half=algo.wire_format in ("fp16", "bf16"),
            overlap=algo.overlapped,
        )

    def set_args(self) -> list[str]:
        """The choice as `--set` arguments: the whole algorithm section, so no field of the
        spec's own algorithm is left over that the new one does not have."""
        body = ", ".join(f"{k}: {_yaml_scalar(v)}" for k, v in self.algorithm.items())
        return [f"algorithm={{{body}}}"]


def _yaml_scalar(v: Any) -> str:
    return "true" if v is True else "false" if v is False else str(v)


def candidates(spec: JobSpec) -> list[Candidate]:
    """Every configuration searched, each validated by its algorithm class."""
    out: list[Candidate] = []
    for compression in SYNC_COMPRESSION:
        ranks = POWERSGD_RANKS if compression == "powersgd" else (None,)
        for rank in ranks:
            a: dict[str, Any] = {"name": "sync"}
            if compression != "none":
                a["compression"] = compression
            if rank is not None:
                a["powersgd_rank"] = rank
            out.append(Candidate(a))
    for name in ("bmuf", "easgd"):
        for tau in TAUS:
            for dtype in EXCHANGE_DTYPES:
                for overlap in OVERLAP:
                    out.append(Candidate(_block(name, tau, dtype, overlap, spec.world_size)))
    for c in out:  # the classes decide what is valid, not this grid
        ALGORITHMS[c.algorithm["name"]](**c.algorithm)
    return out


def _block(name: str, tau: int, dtype: str, overlap: bool, workers: int) -> dict[str, Any]:
    a: dict[str, Any] = {"name": name, "tau": tau}
    if dtype != "fp32":
        a["exchange_dtype"] = dtype
    if overlap:
        a["overlap"] = True
    if name == "easgd":
        a["alpha"] = round(EASGD_BETA / max(workers, 2), 4)
    return a


def calibration_candidates(spec: JobSpec) -> list[Candidate]:
    return [
        Candidate(
            dict(a, alpha=round(EASGD_BETA / max(spec.world_size, 2), 4)) if a["name"] == "easgd" else a
        )
        for a in CALIBRATION
    ]


# --- step time -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shapes:
    """The parameters' shapes (PowerSGD compresses each matrix) and its local arithmetic's time
    per rank."""

    shapes: tuple[tuple[int, ...], ...]
    element_bytes: int
    powersgd_local_s: dict[int, float]


def powersgd_bytes(shapes: Shapes, rank: int) -> tuple[int, int, int]:
    """(uncompressed vectors, P factors, Q factors) bytes one step all-reduces, as torch's
    PowerSGD hook sends them: a matrix n x m (its first dimension against the rest) as P (n x r)
    and Q (m x r) where that is smaller, else whole (runtime/strategies/sync.py counts the same)."""
    vectors = p = q = 0
    e = shapes.element_bytes
    for shape in shapes.shapes:
        numel = math.prod(shape)
        if len(shape) <= 1:
            vectors += numel * e
            continue
        n, m = shape[0], numel // shape[0]
        r = min(n, m, rank)
        if (n + m) * r < n * m:
            p, q = p + n * r * e, q + m * r * e
        else:
            vectors += numel * e
    return vectors, p, q


def step_time(
    cand: Candidate,
    profiles: dict[str, model.Profile],
    nodes: int,
    cluster: model.Cluster,
    shapes: Shapes | None,
) -> float:
    """Seconds per step of `cand` at `nodes` nodes: the scaling model over the profile of its
    algorithm, with the exchanged bytes at its wire precision; PowerSGD: compute, then per
    bucket its three all-reduces (vectors, P, Q) and its local arithmetic, all waited for (on
    gloo the hook completes each bucket before backward goes on: sync.py)."""
    a = cand.algorithm
    prof = profiles[a["name"]]
    f = cand.features
    if f.family.startswith("powersgd"):
        if shapes is None:
            raise ValueError("PowerSGD's step needs the parameters' shapes")
        rank = int(a.get("powersgd_rank", 2))
        buckets = max(1, len(prof.buckets))
        comm = sum(
            buckets * model.allreduce_s(b / buckets, nodes, cluster) for b in powersgd_bytes(shapes, rank)
        )
        return prof.compute_s * cluster.compute_scale + comm + shapes.powersgd_local_s[rank]
    if f.half:
        prof = replace(
            prof,
            exchange_bytes=prof.exchange_bytes // 2,
            buckets=tuple((b // 2, r) for b, r in prof.buckets),
        )
    algo = model.Algorithm(a["name"], tau=f.tau, overlap=f.overlap)
    return model.step_s(prof, algo, nodes, cluster)[2]


def measure_powersgd_local(
    shapes: tuple[tuple[int, ...], ...], ranks: Iterable[int], reps: int = 20, threads: int = 1
) -> dict[int, float]:
    """Seconds of PowerSGD's local arithmetic per step at each rank: per compressed matrix M
    (with error feedback), P = M Q, orthonormalise P, Q = M^T P, M' = P Q^T, error = M - M'
    (torch's powerSGD_hook does these between its all-reduces). Timed with `threads`, the
    threads a worker gets (worker_env.threads_per_worker): the planning process's own default
    contends for every core."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _time_powersgd(shapes, ranks, reps)
    finally:
        torch.set_num_threads(before)


def _time_powersgd(shapes: tuple[tuple[int, ...], ...], ranks: Iterable[int], reps: int) -> dict[int, float]:
    import torch

    out = {}
    for rank in ranks:
        mats = []
        for shape in shapes:
            if len(shape) <= 1:
                continue
            n, m = shape[0], math.prod(shape) // shape[0]
            r = min(n, m, rank)
            if (n + m) * r < n * m:
                mats.append((torch.randn(n, m), torch.zeros(n, m), torch.randn(m, r)))
        t = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for grad, err, q in mats:
                mat = grad + err
                p = mat @ q
                p, _ = torch.linalg.qr(p)
                q = mat.t() @ p
                approx = p @ q.t()
                err.copy_(mat - approx)
            t.append(time.perf_counter() - t0)
        out[rank] = statistics.median(t)
    return out


# --- the pick --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    candidate: Candidate
    steps_to_target: float
    step_s: float
    time_to_target_s: float
    final_accuracy: float

    def as_dict(self) -> dict[str, Any]:
        return dict(
            label=self.candidate.label,
            algorithm=self.candidate.algorithm,
            set=self.candidate.set_args(),
            steps_to_target=round(self.steps_to_target, 1),
            step_s=self.step_s,
            time_to_target_s=round(self.time_to_target_s, 3),
            final_accuracy=round(self.final_accuracy, 4),
        )


def _accuracy(conv: Fit, f: Features) -> float | None:
    return conv.final_accuracy(f) if conv.predicts_accuracy(f) else None


def accuracy_margin(f: Features, per_seed: list[Fit]) -> float:
    """One standard error of the candidate's accuracy less sync's, over the seeds: each
    seed's runs fitted alone, the difference taken seed by seed (what makes a seed good or bad
    for one algorithm mostly does for sync too, and cancels). 0 with fewer than two seeds."""
    sync = Features("sync")
    diffs = []
    for conv in per_seed:
        a, s = _accuracy(conv, f), _accuracy(conv, sync)
        if a is None or s is None:
            return 0.0
        diffs.append(a - s)
    return statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) >= 2 else 0.0


def rank_choices(
    cands: list[Candidate],
    conv: Fit,
    step_of: Callable[[Candidate], float],
    start_s: float,
    tolerance: float = ACCURACY_TOLERANCE,
    per_seed: list[Fit] | None = None,
) -> tuple[list[Choice], list[str]]:
    """The predictable candidates whose predicted final accuracy is within `tolerance` of
    plain sync's, fastest to the target first; and why others were left out. With the fits of
    each calibration seed (`per_seed`), within it by one standard error over the seeds too
    (`accuracy_margin`): a candidate the mean puts just inside the floor is as likely to end
    a run outside it."""
    left_out: list[str] = []
    sync = Features("sync")
    floor = conv.final_accuracy(sync) - tolerance if conv.predictable(sync) else None
    out = []
    for c in cands:
        f = c.features
        if not conv.predictable(f):
            left_out.append(f"{c.label}: not predicted: {conv.why_not(f)}")
            continue
        acc = conv.final_accuracy(f)
        if floor is not None and acc < floor:
            left_out.append(f"{c.label}: predicted final accuracy {acc:.4f}, below sync's less {tolerance:g}")
            continue
        margin = accuracy_margin(f, per_seed or [])
        if floor is not None and acc - margin < floor:
            left_out.append(
                f"{c.label}: predicted final accuracy {acc:.4f}, less one standard error over the "
                f"seeds ({margin:.4f}), below sync's less {tolerance:g}"
            )
            continue
        steps, step = conv.steps_to_target(f), step_of(c)
        out.append(Choice(c, steps, step, start_s + steps * step, acc))
    out.sort(key=lambda ch: ch.time_to_target_s)
    return out, left_out


# --- calibration runs ------------------------------------------------------------------------


def job_key(spec: JobSpec) -> str:
    """The job without its algorithm (nor its curve or name): what the calibration depends on."""
    body = spec.model_dump(mode="json")
    for k in ("algorithm", "curve", "name"):
        body.pop(k, None)
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def cache_dir(home: Path) -> Path:
    d = home / "plan-auto"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


def steps_to(points: list[dict[str, Any]], target: float) -> float | None:
    """The step at which the curve first reaches `target`, linear between the snapshots
    around the crossing (None: never)."""
    from alchemist_jobs.runtime.curve import time_to_target

    return time_to_target([dict(p, wall_s=float(p["step"])) for p in points], target)


def start_offset(points: list[dict[str, Any]]) -> float:
    """Seconds before the first step, from a run's snapshots: the intercept of wall time
    against step (least squares)."""
    if len(points) < 2:
        return 0.0
    xs, ys = [float(p["step"]) for p in points], [float(p["wall_s"]) for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return max(0.0, my - slope * mx)


def start_estimate(starts: list[float]) -> float:
    """Seconds before the first step, from the calibration runs' starts: their lower quartile.
    The runs share this machine with whatever else runs on it, and load only ever adds to a
    start (22 runs of one job started in 0.8 to 3.9 s as other work came and went); the job's
    own start, on the machines it will run on, is what the quicker runs saw. A median moved
    with however many runs the load happened to slow."""
    if len(starts) < 2:
        return starts[0] if starts else 0.0
    return statistics.quantiles(starts, n=4, method="inclusive")[0]


def run_label(cand: Candidate, seed_index: int) -> str:
    """A calibration run's name: the candidate's label, and past the job's own seed which."""
    return cand.label if seed_index == 0 else f"{cand.label} seed+{seed_index}"


def calibration_body(raw: dict[str, Any], spec: JobSpec, cand: Candidate, seed_index: int) -> dict[str, Any]:
    """The spec of one calibration run: the job with the candidate's algorithm, a curve, and
    the job's seed plus `seed_index`. A generated data set keeps the job's own data: another
    seed varies the initialisation and the data order, not the problem."""
    body = json.loads(json.dumps(raw))
    body["algorithm"] = dict(cand.algorithm)
    body["curve"] = {"every_steps": CURVE_EVERY}
    if seed_index:
        body["hyper"] = dict(body.get("hyper") or {}, seed=spec.hyper.seed + seed_index)
        if spec.task.builtin == "synthetic":
            synthetic = dict((body.get("task") or {}).get("synthetic") or {})
            own = spec.task.synthetic.data_seed
            synthetic["data_seed"] = spec.hyper.seed if own is None else own
            body["task"] = dict(body["task"], synthetic=synthetic)
    return body


def calibrate(
    raw: dict[str, Any],
    spec: JobSpec,
    spec_dir: Path,
    home: Path,
    target: float,
    log: Callable[[str], None] = lambda _: None,
    seeds: int = CALIBRATION_SEEDS,
) -> dict[str, Any]:
    """Run each calibration point with `seeds` seeds on the local stack (cached per job in the
    run home) and return {run label: {algorithm, curve, final_accuracy, start_s}} for the
    calibration set: a run's curve is kept, so a later plan for another target needs no run,
    and a plan with more seeds runs only the seeds it lacks."""
    from alchemist_jobs.runtime.curve import evaluate_snapshots
    from alchemist_jobs.stacks import local_scheduler

    path = cache_dir(home) / f"{job_key(spec)}.json"
    cached = read_json(path) or {}
    runs: dict[str, Any] = dict(cached.get("runs", {}))
    sched = local_scheduler(home)
    wanted = [(c, k) for k in range(seeds) for c in calibration_candidates(spec)]
    for c, k in wanted:
        label = run_label(c, k)
        if label in runs:
            continue
        run_spec = parse_spec(calibration_body(raw, spec, c, k), f"calibration {label}", spec_dir)
        done = sum(1 for w, i in wanted if run_label(w, i) in runs)
        log(f"calibration run {done + 1}/{len(wanted)}: {label}")
        handle = sched.schedule(sched.dryrun(run_spec, spec_dir))
        status = sched.wait(handle)
        if status.state != "succeeded":
            raise UserError(
                f"--auto: the calibration run {label} {status.state}; its logs: {handle.run.logs}"
            )
        curve = evaluate_snapshots(RunDir(Path(handle.run.path)), home)
        result = handle.run.result() or {}
        runs[label] = dict(
            algorithm=c.algorithm,
            seed=run_spec.hyper.seed,
            curve=[dict(step=p["step"], wall_s=p["wall_s"], accuracy=p["accuracy"]) for p in curve],
            final_accuracy=result.get("test_accuracy", curve[-1]["accuracy"] if curve else 0.0),
            start_s=start_offset(curve),
            run_id=handle.run.run_id,
        )
        write_json_atomic(path, dict(job_key=job_key(spec), runs=runs))
    # The fit is over this calibration set: runs an older set cached stay cached, unused.
    return {run_label(c, k): runs[run_label(c, k)] for c, k in wanted}


def by_seed(runs: dict[str, Any]) -> list[dict[str, Any]]:
    """The calibration runs split by seed (run_label's suffix), the job's own seed first."""
    out: dict[int, dict[str, Any]] = {}
    for label, r in runs.items():
        base, _, k = label.partition(" seed+")
        out.setdefault(int(k or 0), {})[base] = r
    return [out[k] for k in sorted(out)]


def observations(runs: dict[str, Any], target: float) -> list[Observation]:
    return [
        Observation(
            Candidate(r["algorithm"]).features, steps_to(r["curve"], target), float(r["final_accuracy"])
        )
        for r in runs.values()
    ]


# --- the pick, remembered for `run --set algorithm=auto` ----------------------------------------


def record_pick(home: Path, spec: JobSpec, pick: dict[str, Any]) -> Path:
    path = cache_dir(home) / f"{job_key(spec)}-pick.json"
    write_json_atomic(path, pick)
    return path


def recorded_pick(home: Path, spec: JobSpec) -> dict[str, Any] | None:
    return read_json(cache_dir(home) / f"{job_key(spec)}-pick.json")


def profile_algorithms() -> tuple[str, ...]:
    """The algorithms the candidates use, each profiled once."""
    return tuple(n for n in ("sync", "bmuf", "easgd") if model.Algorithm(n).exchange in model.PATTERNS)


AUTO = "algorithm=auto"


def resolve_auto(spec_path: Path, overrides: list[str], home: Path) -> list[str]:
    """`--set algorithm=auto`: the overrides with it replaced by the pick `alchemist plan
    --auto` recorded for this job (the spec with the other overrides); a job never planned
    gets one line saying how to plan it (the calibration runs are the plan's to pay, once)."""
    if AUTO not in (o.replace(" ", "") for o in overrides):
        return overrides
    from alchemist_jobs.spec import load_spec

    rest = [o for o in overrides if o.replace(" ", "") != AUTO]
    spec = load_spec(spec_path, rest)
    pick = recorded_pick(home, spec)
    if pick is None or not isinstance(pick.get("pick"), dict):
        raise UserError(
            f"--set algorithm=auto: no pick for {spec.name} with these settings yet; accepted: "
            f"after `alchemist plan {spec_path} --auto --target ACCURACY` (with the same --set "
            "options), which runs the calibration once and records its pick"
        )
    return rest + [str(a) for a in pick["pick"]["set"]]
