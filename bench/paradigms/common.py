"""What the paradigm experiments share: running a job (through the real launcher, or in
this process for single-process sweep points), reading its curves, and writing a markdown
table and a PNG under bench/results/paradigms/."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from alchemist_jobs.local_backend import LocalScheduler  # noqa: E402
from alchemist_jobs.rundir import RunDir, read_json  # noqa: E402
from alchemist_jobs.spec import JobSpec, parse_spec  # noqa: E402

RESULTS = REPO / "bench" / "results" / "paradigms"


def home(experiment: str) -> Path:
    """A private shared-file-system root per experiment (ALCHEMIST_HOME stays untouched)."""
    h = Path(os.environ.get("ALCHEMIST_BENCH_HOME", f"/tmp/alchemist-bench-{os.getuid()}")) / experiment
    h.mkdir(parents=True, exist_ok=True)
    return h


def run_job(root: Path, job: dict[str, Any], scheduler: LocalScheduler | None = None,
            timeout: float = 1800) -> dict[str, Any]:
    """One job through the local stack's launcher (torchrun agents, real workers); returns
    result.json plus every worker's record and the wall time of the whole launch."""
    sched = scheduler or LocalScheduler(root)
    spec = parse_spec(job, f"<{job['name']}>", REPO)
    t0 = time.time()
    handle = sched.schedule(sched.dryrun(spec, REPO))
    deadline = time.monotonic() + timeout

    def tick() -> None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{handle.run.run_id} still running after {timeout} s")

    try:
        status = sched.wait(handle, tick=tick)
    except BaseException:
        sched.interrupt(handle)
        raise
    run = handle.run
    if status.state != "succeeded":
        raise RuntimeError(f"{run.run_id} {status.state}; logs in {run.logs}")
    workers = [read_json(run.worker_file(r)) for r in range(spec.world_size)]
    return dict(result=run.result(), workers=workers, launch_s=time.time() - t0,
                run_dir=str(run.path))


def run_inprocess(root: Path, job: dict[str, Any]) -> dict[str, Any]:
    """One single-worker job in this process (the same training loop, no launcher start-up):
    for sweeps where a point is a global batch, not a process layout."""
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    import torch

    from alchemist_jobs.runtime import trainer

    torch.set_num_threads(1)  # as a launched worker (OMP_NUM_THREADS=1): one core per worker

    spec = JobSpec.model_validate(dict(job, metrics=False))
    run = RunDir(root / "runs" / f"{spec.name}-{time.time_ns()}")
    run.create()
    run.spec.write_text(spec.to_yaml())
    t0 = time.time()
    result = trainer.train(spec, run, root)
    return dict(result=result, workers=[read_json(run.worker_file(0))], launch_s=time.time() - t0,
                run_dir=str(run.path))


def curve(outcome: dict[str, Any]) -> list[dict[str, float]]:
    """Rank 0's learning curve (accuracy per epoch with wall time), final point included."""
    res = outcome["result"]
    points = [dict(epoch=h["epoch"], wall_s=h["wall_s"], accuracy=h["accuracy"])
              for h in res["history"]]
    if not points or points[-1]["epoch"] < res["epochs"] - 1e-9:
        points.append(dict(epoch=res["epochs"], wall_s=res["wall_s"], accuracy=res["test_accuracy"]))
    return points


def time_to(points: list[dict[str, float]], target: float) -> float | None:
    """Wall seconds at the first evaluation at or above `target` (None: never)."""
    for p in points:
        if p["accuracy"] >= target:
            return p["wall_s"]
    return None


def write_markdown(name: str, title: str, intro: str, headers: list[str],
                   rows: list[list[Any]], notes: list[str] = ()) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.md"
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else ("—" if v is None else str(v))  # noqa: E731
    lines = [f"# {title}", "", intro, "", "| " + " | ".join(headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    lines += ["", f"_Written by `{Path(sys.argv[0]).as_posix()}` on {time.strftime('%Y-%m-%d %H:%M')}; "
              f"{os.cpu_count()} CPUs._", ""]
    path.write_text("\n".join(lines))
    return path


def figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (10, 4)):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=size, squeeze=False)


def save_figure(fig, name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
