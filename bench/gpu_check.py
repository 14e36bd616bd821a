"""The GPU check: every training path on a real GPU, in one table (under 6 minutes on one GPU).

    bench/gpu_check.sh            (or: python bench/gpu_check.py [--out FILE])

Rows:
  algorithm/<name>     a local run with resources.gpu=1 for every algorithm: state, accuracy,
                       the device the worker trained on
  shared-gpu/<name>    two ranks on one GPU over NCCL (sockets: P2P and SHM off) through the
                       collective strategies' own hooks (sync, bmuf, easgd)
  throughput/<prec>    samples/s of the built-in loop against a raw PyTorch DDP loop on the
                       same model, data and optimizer (fp32; bf16 autocast + TF32); target
                       >= 0.97x
  comm-time            communication seconds recorded by CUDA events against the same
                       all-reduce timed with device synchronisation
  metrics/gpu          the GPU series on a live worker's /metrics

Without a usable GPU it fails at once with one line (exit 1): nothing is skipped silently.
Every row that fails makes the exit status 1.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

Row = tuple[str, bool, str]
ALGOS = [{"name": "sync"}, {"name": "async"}, {"name": "bmuf", "tau": 4},
         {"name": "easgd", "tau": 4}, {"name": "easgd", "tau": 4, "variant": "async"}]
SYNTH = {"builtin": "synthetic",
         "synthetic": {"params": 8_000_000, "samples": 32768, "features": 512, "classes": 32,
                       "layers": 3}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _algo_label(a: dict[str, Any]) -> str:
    return a["name"] + ("-async" if a.get("variant") == "async" else "")


# --- every algorithm on resources.gpu=1 ---------------------------------------------------


def check_algorithms(root: Path) -> list[Row]:
    from bench.paradigms.common import run_job

    rows = []
    for algo in ALGOS:
        job = dict(name=f"gpu-{_algo_label(algo)}", task={"builtin": "digits"}, nodes=1,
                   procs_per_node=1, resources={"gpu": 1, "cpu": 1}, algorithm=algo,
                   hyper={"steps": 300, "lr": 0.05, "batch_size": 32},
                   checkpoint={"every_steps": 100}, metrics=False)
        try:
            out = run_job(root, job, timeout=240)
            acc, device = out["result"]["test_accuracy"], out["workers"][0].get("device", "?")
            ok = acc >= 0.85 and device.startswith("cuda")
            rows.append((f"algorithm/{_algo_label(algo)}", ok, f"accuracy {acc:.3f} on {device}"))
        except Exception as e:
            rows.append((f"algorithm/{_algo_label(algo)}", False, _first_line(e)))
    return rows


# --- two ranks sharing one GPU over NCCL ---------------------------------------------------


def _shared_gpu_rank(rank: int, port: int, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from alchemist_jobs.runtime.metrics import WorkerMetrics
    from alchemist_jobs.runtime.strategies import build_strategy
    from alchemist_jobs.runtime.strategies.base import WorkerContext
    from alchemist_jobs.runtime.train_state import param_digest
    from alchemist_jobs.spec import JobSpec

    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    result = {}
    try:
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=2, device_id=device)
        for algo in ({"name": "sync"}, {"name": "bmuf", "tau": 2}, {"name": "easgd", "tau": 2}):
            try:
                spec = JobSpec(name="shared", task={"builtin": "digits"}, algorithm=algo,
                               procs_per_node=2, metrics=False)
                ctx = WorkerContext(spec=spec, rank=rank, world_size=2, local_rank=0,
                                    device=device, metrics=WorkerMetrics({}, enabled=False))
                torch.manual_seed(0)
                model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                            torch.nn.Linear(64, 10)).to(device)
                strategy = build_strategy(ctx)
                train_model = strategy.setup(model)
                opt = torch.optim.SGD(model.parameters(), lr=0.05)
                strategy.bind_optimizer(opt)
                g = torch.Generator(device=device).manual_seed(100 + rank)
                for step in range(4):
                    opt.zero_grad(set_to_none=True)
                    x = torch.randn(32, 64, device=device, generator=g)
                    y = torch.randint(0, 10, (32,), device=device, generator=g)
                    torch.nn.functional.cross_entropy(train_model(x), y).backward()
                    strategy.after_backward(step)
                    opt.step()
                    strategy.after_step(step + 1)
                strategy.finish()
                secs = ctx.comm.close_window()
                result[algo["name"]] = f"ok digest={param_digest(model)[:12]} comm={secs * 1e3:.2f}ms"
            except Exception as e:
                result[algo["name"]] = f"error: {_first_line(e)}"
    except Exception as e:
        result["init"] = f"error: {_first_line(e)}"
    Path(out_dir, f"rank{rank}.txt").write_text(repr(result))
    os._exit(0)  # no NCCL teardown races at exit


def check_shared_gpu() -> list[Row]:
    import torch.multiprocessing as mp

    os.environ.update(NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1")  # sockets only
    with tempfile.TemporaryDirectory() as d:
        ctx = mp.get_context("spawn")
        port = _free_port()
        procs = [ctx.Process(target=_shared_gpu_rank, args=(r, port, d)) for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            if p.is_alive():
                p.kill()
        got = [_read_result(Path(d, f"rank{r}.txt")) for r in range(2)]
    rows = []
    for name in ("sync", "bmuf", "easgd"):
        a, b = (g.get(name) or g.get("init") or "no result" for g in got)
        ok = a.startswith("ok") and b.startswith("ok")
        if ok:  # replicas must agree after finish()
            ok = a.split()[1] == b.split()[1]
        rows.append((f"shared-gpu/{name}", ok, f"rank0: {a} | rank1: {b}"))
    return rows


def _read_result(path: Path) -> dict[str, str]:
    import ast

    try:
        return ast.literal_eval(path.read_text())
    except (OSError, ValueError, SyntaxError):
        return {}


# --- samples/s: built-in loop vs raw DDP -----------------------------------------------------


def _spec(precision: dict[str, Any], steps: int) -> Any:
    from alchemist_jobs.spec import JobSpec

    return JobSpec(name="tput", task=SYNTH, resources={"gpu": 1}, metrics=False,
                   hyper={"steps": steps, "batch_size": 1024, "lr": 0.01},
                   checkpoint={"every_steps": 10**9}, precision=precision)


def builtin_rate(root: Path, precision: dict[str, Any], steps: int) -> float:
    import torch

    from alchemist_jobs.rundir import RunDir, read_json
    from alchemist_jobs.runtime.trainer import Trainer, WorkerPlace

    run = RunDir(root / "runs" / f"tput-{time.time_ns()}")
    run.create()
    spec = _spec(precision, steps)
    Trainer(spec, run, root, WorkerPlace()).train()
    torch.cuda.synchronize()
    # The loop's own pace up to its last step (the final evaluation and records excluded).
    rec = read_json(run.worker_file(0))
    return rec["train_steps"] * spec.hyper.batch_size / rec["train_s"]


def raw_ddp_rate(root: Path, precision: dict[str, Any], steps: int) -> float:
    """The textbook loop: DDP (world 1), data on the GPU, one optimizer step per batch."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from alchemist_jobs.runtime.optim import build_optimizer
    from alchemist_jobs.runtime.tasks import build_model, load_task_data

    spec = _spec(precision, steps)
    torch.manual_seed(0)
    data = load_task_data(spec, root)
    device = torch.device("cuda:0")
    model = DDP(build_model(spec, data).to(device), device_ids=[0], gradient_as_bucket_view=True)
    opt = build_optimizer(spec.hyper, model.parameters())
    x, y = data.x_train.to(device), data.y_train.to(device)
    bs, n = spec.hyper.batch_size, len(x)
    use_bf16 = precision.get("autocast") == "bf16"
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    done = 0
    for step in range(steps):
        if step % (n // bs) == 0:
            perm = torch.randperm(n, device=device)
        sel = perm[(step % (n // bs)) * bs:((step % (n // bs)) + 1) * bs]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
            loss = F.cross_entropy(model(x[sel]), y[sel])
        loss.backward()
        opt.step()
        done += bs
    torch.cuda.synchronize()
    return done / (time.perf_counter() - t0)


def check_throughput(root: Path, steps: int = 2000) -> list[Row]:
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        store = dist.FileStore(str(root / "pg-store"), 1)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    rows = []
    for label, prec in (("fp32", {"autocast": "none", "tf32": False}),
                        ("bf16+tf32", {"autocast": "bf16", "tf32": True})):
        try:
            torch.backends.cuda.matmul.allow_tf32 = prec["tf32"]
            torch.backends.cudnn.allow_tf32 = prec["tf32"]
            builtin_rate(root, prec, 50)  # warm-up: data preparation, kernels, allocator
            raw_ddp_rate(root, prec, 50)
            ours = max(builtin_rate(root, prec, steps) for _ in range(2))
            raw = max(raw_ddp_rate(root, prec, steps) for _ in range(2))
            ratio = ours / raw
            rows.append((f"throughput/{label}", ratio >= 0.97,
                         f"built-in {ours:,.0f} samples/s, raw DDP {raw:,.0f}: {ratio:.3f}x "
                         f"(target >= 0.97x)"))
        except Exception as e:
            rows.append((f"throughput/{label}", False, _first_line(e)))
    return rows


# --- recorded communication time ------------------------------------------------------------


def check_comm_time() -> list[Row]:
    import torch
    import torch.distributed as dist

    from alchemist_jobs.runtime.strategies.base import CommStats

    device = torch.device("cuda:0")
    t = torch.ones(64 * 2**20, device=device)  # 256 MiB
    work = torch.randn(4096, 4096, device=device)
    for _ in range(3):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    comm = CommStats()
    host_seen = []
    for _ in range(5):
        _ = work @ work  # queued compute ahead of the collective, as in a real step
        h0 = time.perf_counter()
        with comm.timed(device):
            dist.all_reduce(t)
        host_seen.append(time.perf_counter() - h0)
    recorded = comm.close_window() / 5
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    timed = (time.perf_counter() - t0) / 5
    ratio = recorded / timed if timed else float("nan")
    ok = 0.5 <= ratio <= 1.5
    return [("comm-time", ok, f"CUDA events {recorded * 1e3:.3f} ms vs synchronised "
                              f"{timed * 1e3:.3f} ms per all-reduce ({ratio:.2f}x); the host "
                              f"clock alone saw {sum(host_seen) / 5 * 1e3:.3f} ms")]


# --- the GPU series on a live worker ---------------------------------------------------------


def check_live_metrics(root: Path) -> list[Row]:
    from alchemist_jobs.local_backend import LocalScheduler
    from alchemist_jobs.rundir import read_json
    from alchemist_jobs.spec import parse_spec

    job = dict(name="gpu-metrics", task=SYNTH, nodes=1, procs_per_node=1,
               resources={"gpu": 1, "cpu": 1}, hyper={"steps": 3000, "batch_size": 512},
               checkpoint={"every_steps": 10**9})
    sched = LocalScheduler(root)
    handle = sched.schedule(sched.dryrun(parse_spec(job, "<gpu-metrics>", REPO), REPO))
    text = ""
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            rec = read_json(handle.run.worker_file(0)) or {}
            port = rec.get("metrics_port")
            if port and (handle.run.progress() or {}).get("step", 0) > 20:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                if "alchemist_gpu_utilization_ratio{" in text:
                    break
            time.sleep(1)
    except Exception as e:
        return [("metrics/gpu", False, _first_line(e))]
    finally:
        sched.interrupt(handle)
    lines = [ln for ln in text.splitlines() if ln.startswith("alchemist_gpu_")]
    return [("metrics/gpu", bool(lines), lines[0][:150] if lines else "no alchemist_gpu_* series")]


# --- the table -------------------------------------------------------------------------------


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def _guarded(name: str, fn: Callable[[], list[Row]]) -> list[Row]:
    t0 = time.time()
    try:
        rows = fn()
    except Exception as e:
        traceback.print_exc()
        rows = [(name, False, _first_line(e))]
    print(f"  {name}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return rows


def table(rows: list[Row]) -> str:
    out = ["| check | result | detail |", "|---|---|---|"]
    out += [f"| {n} | {'PASS' if ok else 'FAIL'} | {d.replace('|', '/')} |" for n, ok, d in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the table (markdown) here")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"gpu_check: no usable GPU (torch {torch.__version__}, CUDA build "
              f"{torch.version.cuda or 'none'}); this check needs one", file=sys.stderr)
        return 1
    print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s)", flush=True)
    root = Path(tempfile.mkdtemp(prefix="alchemist-gpu-check-"))
    os.environ["ALCHEMIST_HOME"] = str(root)
    rows: list[Row] = []
    rows += _guarded("algorithms", lambda: check_algorithms(root))
    rows += _guarded("shared-gpu", check_shared_gpu)
    rows += _guarded("throughput", lambda: check_throughput(root))
    rows += _guarded("comm-time", check_comm_time)
    rows += _guarded("metrics", lambda: check_live_metrics(root))
    text = table(rows)
    print(text, flush=True)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if all(ok for _, ok, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
