"""A JAX job through Alchemist against the same script launched by hand: wall time and each
worker's peak memory (issue 41.5: within 1.15x the wall time and 1.2x the memory of a hand
launch).

Two scripts, each on 2 processes:

* `minimal`: jax.distributed.initialize(), one cross-process sum, exit. A pure start-up
  measurement: everything Alchemist adds is in its wall time, and nothing else is.
* `training`: what a user runs: a data-parallel MLP (784-512-512-10, SGD with momentum) on
  synthetic data for TRAIN_STEPS steps of a 64-example batch per process, the gradient
  all-reduced by XLA across the processes (gloo on CPU), the loss printed every 50 steps.

Each script records its own peak RSS (getrusage ru_maxrss). The hand launch starts the 2
processes itself, passing jax.distributed.initialize() the coordinator, process count and id
as a user would; the Alchemist run goes through the real CLI (`alchemist run`: the spec's
validation, the light agent for a one-node JAX job, the bootstrap, the rank logs and the run
record). Hand and Alchemist take turns in every repeat, so each pair saw the same load.
Reported per script: medians, `wall_ratio` and `rss_ratio` (Alchemist / hand) of the medians,
each pair's ratio, and `overhead_s`: the median over pairs of Alchemist's wall minus the
hand launch's (the fixed cost of a launch). The machine's load average is recorded with them.

Usage: python bench/framework_start.py [--repeats 5] [--out bench/results/framework_start.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# By hand (BENCH_HAND="coordinator process_id") the user passes jax.distributed its place;
# under Alchemist it finds it in the environment.
INIT = """
import json, os, resource, sys, time
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
hand = os.environ.get("BENCH_HAND")
if hand:
    coordinator, pid = hand.split()
    jax.distributed.initialize(coordinator, num_processes=2, process_id=int(pid))
else:
    jax.distributed.initialize()
me = jax.process_index()
mesh = jax.make_mesh((jax.device_count(),), ("w",))
"""

DONE = """
out = os.environ["BENCH_OUT"]
with open(os.path.join(out, f"worker-{me}.json"), "w") as f:
    json.dump({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}, f)
"""

MINIMAL = (
    INIT
    + """
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("w")), np.array([me + 1.0], np.float32))
total = float(jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x))
assert total == 3.0, total
"""
    + DONE
)

TRAIN_STEPS = 200

TRAINING = (
    INIT
    + f"""
batch, replicated = NamedSharding(mesh, P("w")), NamedSharding(mesh, P())
rng = np.random.default_rng(me)
teacher = np.random.default_rng(0).normal(size=(784, 10)).astype(np.float32)
def data(n):  # synthetic: labels from a fixed random linear teacher
    x = rng.normal(size=(n, 784)).astype(np.float32)
    return x, np.argmax(x @ teacher, axis=1).astype(np.int32)
def init(key):
    ks = jax.random.split(key, 3)
    g = jax.nn.initializers.glorot_uniform()
    return [g(ks[0], (784, 512)), jnp.zeros(512), g(ks[1], (512, 512)), jnp.zeros(512),
            g(ks[2], (512, 10)), jnp.zeros(10)]
def loss_fn(w, x, y):
    h = jax.nn.relu(x @ w[0] + w[1])
    h = jax.nn.relu(h @ w[2] + w[3])
    logp = jax.nn.log_softmax(h @ w[4] + w[5])
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))
@jax.jit
def step(w, v, x, y):
    loss, g = jax.value_and_grad(loss_fn)(w, x, y)  # the global batch's mean: all-reduced
    v = [0.9 * vi + gi for vi, gi in zip(v, g)]
    return [wi - 0.05 * vi for wi, vi in zip(w, v)], v, loss
w = init(jax.random.key(0))
w, v = jax.device_put((w, [jnp.zeros_like(p) for p in w]), replicated)
for s in range(1, {TRAIN_STEPS} + 1):
    xs, ys = data(64)
    w, v, loss = step(w, v, jax.make_array_from_process_local_data(batch, xs),
                      jax.make_array_from_process_local_data(batch, ys))
    if s % 50 == 0:
        print(f"step {{s}} loss {{float(loss):.4f}}", flush=True)
"""
    + DONE
)

SCRIPTS = {"minimal": MINIMAL, "training": TRAINING}
# Both launches, the same: CPU only, and one BLAS thread a worker (Alchemist would otherwise
# give its own count, threads_per_worker, and the comparison would measure threads).
SAME_ENV = {"JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _workers(out: Path) -> list[float]:
    return [json.loads(p.read_text())["rss_mb"] for p in sorted(out.glob("worker-*.json"))]


def _cpu() -> float:
    """CPU seconds of this process's ended children (user + system): unlike the wall time,
    what a launch costs whatever else the machine runs."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def hand(work: Path, script: str) -> tuple[float, float, float]:
    out = Path(tempfile.mkdtemp(dir=work))
    coord = f"127.0.0.1:{_free_port()}"
    cpu, t = _cpu(), time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, str(work / f"{script}.py")],
            cwd=work,
            stdout=subprocess.DEVNULL,
            env=dict(os.environ, BENCH_OUT=str(out), BENCH_HAND=f"{coord} {i}", **SAME_ENV),
        )
        for i in range(2)
    ]
    codes = [p.wait() for p in procs]
    wall = time.monotonic() - t
    assert codes == [0, 0], codes
    return wall, max(_workers(out)), _cpu() - cpu


def alchemist(work: Path, home: Path, script: str) -> tuple[float, float, float]:
    out = Path(tempfile.mkdtemp(dir=work))
    cpu, t = _cpu(), time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "alchemist_jobs",
            "run",
            str(work / f"{script}.yaml"),
            "--quiet",
            "--set",
            f"env.BENCH_OUT={out}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=dict(os.environ, ALCHEMIST_HOME=str(home), PYTHONPATH=str(REPO)),
    )
    wall = time.monotonic() - t
    assert r.returncode == 0, r.stdout + r.stderr
    return wall, max(_workers(out)), _cpu() - cpu


def summary(pairs: list[dict]) -> dict:
    med = {k: statistics.median(p[k] for p in pairs) for k in pairs[0]}
    return {
        **{f"median_{k}": v for k, v in med.items()},
        "wall_ratio": round(med["alchemist_s"] / med["hand_s"], 3),
        "rss_ratio": round(med["alchemist_rss_mb"] / med["hand_rss_mb"], 3),
        "overhead_s": round(statistics.median(p["alchemist_s"] - p["hand_s"] for p in pairs), 2),
        "cpu_ratio": round(med["alchemist_cpu_s"] / med["hand_cpu_s"], 3),
        "cpu_overhead_s": round(statistics.median(p["alchemist_cpu_s"] - p["hand_cpu_s"] for p in pairs), 2),
        "pair_wall_ratios": [round(p["alchemist_s"] / p["hand_s"], 3) for p in pairs],
        "median_pair_wall_ratio": round(statistics.median(p["alchemist_s"] / p["hand_s"] for p in pairs), 3),
        "pairs": pairs,
    }


def table(result: dict) -> str:
    """The results as a short Markdown table (beside the JSON)."""
    lines = [
        f"# bench/framework_start.py: {result['repeats']} pairs per script, {result['cpus']} CPUs, "
        f"load average {result['load_before']:.1f} before and {result['load_after']:.1f} after",
        "",
        "| script | hand s | alchemist s | wall ratio | median pair ratio | overhead s | RSS ratio "
        "| CPU s hand / alchemist |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in SCRIPTS:
        if name in result:
            r = result[name]
            lines.append(
                f"| {name} | {r['median_hand_s']} | {r['median_alchemist_s']} | {r['wall_ratio']} | "
                f"{r.get('median_pair_wall_ratio')} | "
                f"{r['overhead_s']} | {r['rss_ratio']} | {r['median_hand_cpu_s']} / {r['median_alchemist_cpu_s']} |"
            )
    lines += [
        "",
        "Medians of the pairs; overhead: the median over pairs of Alchemist's wall time minus the "
        "hand launch's. Each pair's wall ratio is in the JSON.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--scripts", default="minimal,training")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "framework_start.json")
    args = ap.parse_args()
    result: dict = {"repeats": args.repeats, "cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        work, home = Path(tmp), Path(tmp) / "home"
        for name in args.scripts.split(","):
            (work / f"{name}.py").write_text(SCRIPTS[name])
            (work / f"{name}.yaml").write_text(
                f"name: bench-{name}\ntask: {{script: {name}.py, framework: jax}}\nprocs_per_node: 2\n"
                f"max_restarts: 0\nenv: {json.dumps(SAME_ENV)}\n"
            )
            alchemist(work, home, name)  # one unmeasured run each way: files in the page cache
            hand(work, name)
            pairs = []
            for _ in range(args.repeats):
                h, a = hand(work, name), alchemist(work, home, name)
                pairs.append(
                    {
                        "hand_s": round(h[0], 2),
                        "alchemist_s": round(a[0], 2),
                        "hand_rss_mb": round(h[1]),
                        "alchemist_rss_mb": round(a[1]),
                        "hand_cpu_s": round(h[2], 2),
                        "alchemist_cpu_s": round(a[2], 2),
                    }
                )
                print(name, json.dumps(pairs[-1]), flush=True)
            result[name] = summary(pairs)
    result["load_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(table(result))
    print(
        json.dumps(
            {
                k: v if not isinstance(v, dict) else {x: y for x, y in v.items() if x != "pairs"}
                for k, v in result.items()
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
