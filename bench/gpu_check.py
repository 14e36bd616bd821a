"""The GPU check: every training path on the GPUs this machine has, one table, under 7 minutes.

    bench/gpu_check.sh [--out FILE]       (PYTHON=... names the interpreter; docs/gpu.md)
    python bench/gpu_check.py --self-test  the same rows on CPU: gloo, two processes stand in
                                           for two GPUs, small sizes (tests/unit/test_gpu_check.py)

Rows, and the GPUs each needs (a row this machine cannot run is printed SKIP with the reason):
  algorithm/<name>   1   a local run of the algorithm on one GPU (world size 1: each
                         algorithm's single-worker path, CUDA tensors, async through its
                         parameter server): trains on cuda and learns
  resume             1   a local run whose worker is killed (SIGKILL) after a checkpoint:
                         torchrun restarts it and it resumes from that step on the GPU
  precision          1   the defaults (TF32, bf16 autocast on GPUs that compute bf16) and
                         `precision: {tf32: false, autocast: none}` turning both off
  throughput/<prec>  1   samples/s and peak memory of the built-in loop against a raw PyTorch
                         loop of the same model, data and optimizer, both world size 1 on one
                         GPU; goal >= 0.97x (not judged in the CPU self-test)
  ps/pinned          1   parameter-server answers land in pinned host memory
  metrics/gpu        1   the worker's NVML readings of its own GPU on its /metrics
  multi/<name>       2   every algorithm under torchrun on min(GPUs, 8) GPUs: sync's digests
                         equal on every rank, communication seconds above zero and within the
                         steps' time
  local-nodes/2      2   nodes=2 on one machine, each agent with its own CUDA_VISIBLE_DEVICES

Never on one GPU: two ranks on one GPU (NCCL refuses a duplicate GPU, init.cc), and a timed
one-rank all-reduce (it moves nothing). Without a GPU (outside --self-test), or with torch
older than 2.4, it stops with one line and exit 1; a FAIL row makes the exit status 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import traceback
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TORCH_FLOOR = (2, 4)  # the oldest torch the GPU path is run with (CI tests the lock's 2.13)
ALGOS = [{"name": "sync"}, {"name": "async"}, {"name": "bmuf", "tau": 4},
         {"name": "easgd", "tau": 4}, {"name": "easgd", "tau": 4, "variant": "async"}]
THROUGHPUT_GOAL = 0.97


@dataclass
class Row:
    name: str
    status: str  # PASS, FAIL or SKIP
    detail: str
    seconds: float = 0.0


@dataclass
class Mode:
    """Where the rows run: GPUs, or (self-test) the CPU with gloo and small sizes."""

    gpu: bool
    devices: int  # GPUs visible; in the self-test, processes standing in for GPUs
    name: str = "gpu"
    # the job every launched row trains: a small synthetic task (no scikit-learn needed)
    task: dict = field(default_factory=lambda: {"builtin": "synthetic", "synthetic": {
        "params": 200_000, "samples": 8192, "features": 64, "classes": 10, "layers": 2}})
    steps: int = 300
    # Big enough that a step is the GPU's work (1.6 TFLOP: about 2.5 ms in bf16 on an
    # H200, 30 ms in fp32), not the host's (about 1 ms of Python and launches per step): a
    # smaller model would compare Python overheads, not training loops.
    tput_task: dict = field(default_factory=lambda: {"builtin": "synthetic", "synthetic": {
        "params": 32_000_000, "samples": 65536, "features": 1024, "classes": 32, "layers": 3}})
    tput_batch: int = 8192
    # (short, long) steps per precision, timed as the difference: fixed costs cancel; fp32
    # steps are ten times dearer, so fewer of them give as many seconds to compare
    tput_steps: dict = field(default_factory=lambda: {"fp32": (50, 350), "default": (100, 1000)})

    @property
    def resources(self) -> dict[str, int]:
        return {"gpu": 1 if self.gpu else 0, "cpu": 1}


def self_test_mode() -> Mode:
    small = {"builtin": "synthetic", "synthetic": {"params": 20_000, "samples": 2048,
                                                   "features": 32, "classes": 10, "layers": 1}}
    return Mode(gpu=False, devices=2, name="cpu self-test", task=small, steps=120,
                tput_task=small, tput_batch=64,
                tput_steps={"fp32": (20, 60), "default": (20, 60)})


def _label(a: dict[str, Any]) -> str:
    return a["name"] + ("-async" if a.get("variant") == "async" else "")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


# --- launching local runs -------------------------------------------------------------------


def _job(mode: Mode, name: str, **over: Any) -> dict[str, Any]:
    job = dict(name=name, task=mode.task, nodes=1, procs_per_node=1, resources=mode.resources,
               algorithm={"name": "sync"}, hyper={"steps": mode.steps, "lr": 0.05,
                                                   "batch_size": 64},
               checkpoint={"every_steps": 10**6}, metrics=False)
    job.update(over)
    return job


def _launch(root: Path, job: dict[str, Any]) -> tuple[Any, Any]:
    from alchemist_jobs.local_backend import LocalScheduler
    from alchemist_jobs.spec import parse_spec

    sched = LocalScheduler(root)
    request = sched.dryrun(parse_spec(job, f"<{job['name']}>", REPO), REPO)
    return sched, request


def run_job(root: Path, job: dict[str, Any], timeout: float = 240,
            during: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """One job through the local launcher (torchrun agents, real workers): result.json, every
    worker's record and the request (its per-node environment)."""
    from alchemist_jobs.rundir import read_json

    sched, request = _launch(root, job)
    handle = sched.schedule(request)
    deadline = time.monotonic() + timeout

    def tick() -> None:
        if during is not None:
            during(handle)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{handle.run.run_id} still running after {timeout:.0f} s")

    try:
        status = sched.wait(handle, tick=tick)
    except BaseException:
        sched.interrupt(handle)
        raise
    run = handle.run
    if status.state != "succeeded":
        log = run.agent_log(0)
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        raise RuntimeError(f"{run.run_id} {status.state}: {' '.join(tail)[:200]}")
    workers = [read_json(run.worker_file(r)) or {} for r in range(request.spec.world_size)]
    return dict(result=run.result(), workers=workers, request=request)


def _learned(result: dict[str, Any], classes: int) -> bool:
    return result["test_accuracy"] >= 2.0 / classes  # twice chance: the model learned


def _on_device(worker: dict[str, Any], mode: Mode) -> bool:
    return worker.get("device", "").startswith("cuda" if mode.gpu else "cpu")


# --- one GPU ------------------------------------------------------------------------------


def check_algorithm(root: Path, mode: Mode, algo: dict[str, Any]) -> Row:
    out = run_job(root, _job(mode, f"gc-{_label(algo)}", algorithm=algo))
    res, w = out["result"], out["workers"][0]
    classes = mode.task["synthetic"]["classes"]
    ok = _learned(res, classes) and _on_device(w, mode)
    return Row(f"algorithm/{_label(algo)}", "PASS" if ok else "FAIL",
               f"accuracy {res['test_accuracy']:.3f} (chance {1 / classes:.2f}) on "
               f"{w.get('device', '?')}, {res['samples_per_s']:,.0f} samples/s")


def check_resume(root: Path, mode: Mode) -> Row:
    """Kill the worker once checkpoint `at` is written; torchrun's restart resumes there."""
    from alchemist_jobs.rundir import read_json
    from alchemist_jobs.runtime.checkpoint import Checkpointer

    at = mode.steps // 3
    # After step at+1 the worker pauses 3 s (every attempt): the window to kill it in, after
    # checkpoint `at` and before the next one.
    env = {"ALCHEMIST_FAULT_STALL_AT_STEP": str(at + 1), "ALCHEMIST_FAULT_STALL_SECONDS": "3"}
    killed: list[int] = []

    def kill_after_checkpoint(handle: Any) -> None:
        if killed or not Checkpointer(handle.run.checkpoints).complete():
            return
        pid = (read_json(handle.run.worker_file(0)) or {}).get("pid")
        if pid:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    out = run_job(root, _job(mode, "gc-resume", checkpoint={"every_steps": at}, env=env,
                             max_restarts=1), during=kill_after_checkpoint)
    res, w = out["result"], out["workers"][0]
    ok = (bool(killed) and res["restarts"] >= 1 and res["resumed_from_step"] == at
          and _on_device(w, mode) and res["steps"] == mode.steps)
    return Row("resume", "PASS" if ok else "FAIL",
               f"killed pid {killed[0] if killed else '-'} after checkpoint {at}; restart "
               f"{res['restarts']} resumed from step {res['resumed_from_step']} on "
               f"{w.get('device', '?')}, finished {res['steps']} steps")


def _device(mode: Mode) -> Any:
    import torch

    return torch.device("cuda:0" if mode.gpu else "cpu")


def check_precision(mode: Mode) -> Row:
    import torch

    from alchemist_jobs.runtime.precision import Precision, resolve
    from alchemist_jobs.spec import JobSpec

    dev = _device(mode)
    base = dict(name="gc-precision", task=mode.task)
    default = resolve(JobSpec(**base), dev)
    off = resolve(JobSpec(**base, precision={"tf32": False, "autocast": "none"}), dev)
    if mode.gpu:
        native = torch.cuda.get_device_capability(dev) >= (8, 0)
        want = ("bf16" if native else "none", True)
        Precision(JobSpec(**base), dev)  # sets the process's matmul flags as a worker would
        flags = torch.backends.cuda.matmul.allow_tf32
        x = torch.randn(64, 64, device=dev)
        with Precision(JobSpec(**base), dev).autocast():
            dtype = (x @ x).dtype
        Precision(JobSpec(**base, precision={"tf32": False, "autocast": "none"}), dev)
        flags_off = torch.backends.cuda.matmul.allow_tf32
        ok = default == want and off == ("none", False) and flags and not flags_off
        ok = ok and dtype == (torch.bfloat16 if native else torch.float32)
        detail = (f"default {default} (matmul in {dtype}, allow_tf32={flags}); off {off} "
                  f"(allow_tf32={flags_off})")
    else:
        ok = default == ("none", False) and off == ("none", False)
        detail = f"CPU default {default}, off {off}: float32 either way"
    return Row("precision", "PASS" if ok else "FAIL", detail)


def _sync(mode: Mode) -> None:
    import torch

    if mode.gpu:
        torch.cuda.synchronize()


def builtin_seconds(root: Path, mode: Mode, precision: dict[str, Any], steps: int) -> float:
    """Wall seconds of the built-in loop (Trainer, world size 1, no process group) for
    `steps` steps, set-up and final evaluation included (they cancel in the difference)."""
    from alchemist_jobs.rundir import RunDir
    from alchemist_jobs.runtime.trainer import Trainer, WorkerPlace
    from alchemist_jobs.spec import JobSpec

    spec = JobSpec(name="gc-tput", task=mode.tput_task, resources=mode.resources, metrics=False,
                   hyper={"steps": steps, "batch_size": mode.tput_batch, "lr": 0.01},
                   checkpoint={"every_steps": 10**9}, precision=precision)
    run = RunDir(root / "runs" / f"gc-tput-{time.time_ns()}")
    run.create()
    _sync(mode)
    t0 = time.perf_counter()
    Trainer(spec, run, root, WorkerPlace(), device=_device(mode)).train()
    _sync(mode)
    return time.perf_counter() - t0


def raw_seconds(root: Path, mode: Mode, precision: dict[str, Any], steps: int) -> float:
    """The textbook loop on the same model, data, optimizer and precision: data on the device,
    a fresh permutation per epoch, one optimizer step per batch, the test set evaluated at
    each epoch's end (the built-in loop's learning curve), world size 1, no DDP."""
    import torch
    import torch.nn.functional as F

    from alchemist_jobs.runtime.optim import build_optimizer
    from alchemist_jobs.runtime.precision import Precision
    from alchemist_jobs.runtime.tasks import build_model, load_task_data
    from alchemist_jobs.spec import JobSpec

    spec = JobSpec(name="gc-tput", task=mode.tput_task, resources=mode.resources, metrics=False,
                   hyper={"steps": steps, "batch_size": mode.tput_batch, "lr": 0.01},
                   precision=precision)
    device = _device(mode)
    _sync(mode)
    t0 = time.perf_counter()
    prec = Precision(spec, device)  # the same resolved TF32 and autocast
    torch.manual_seed(0)
    data = load_task_data(spec, root)
    model = build_model(spec, data).to(device)
    opt = build_optimizer(spec.hyper, model.parameters())
    x, y = data.x_train.to(device), data.y_train.to(device)
    x_test, y_test = data.x_test.to(device), data.y_test.to(device)
    bs, n = spec.hyper.batch_size, len(x)
    per_epoch = n // bs
    for step in range(steps):
        if step and step % per_epoch == 0:
            with torch.no_grad():
                model.eval()
                float((model(x_test).argmax(1) == y_test).float().mean())
                model.train()
        if step % per_epoch == 0:
            perm = torch.randperm(n, device=device)
        sel = perm[(step % per_epoch) * bs:(step % per_epoch + 1) * bs]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=prec.dtype is not None):
            loss = F.cross_entropy(model(x[sel]), y[sel])
        loss.backward()
        opt.step()
    float(loss.detach())  # the built-in loop reads its last loss too
    _sync(mode)
    return time.perf_counter() - t0


def check_throughput(root: Path, mode: Mode) -> list[Row]:
    import torch

    rows = []
    for label, prec in (("fp32", {"autocast": "none", "tf32": False}), ("default", {})):
        short, long_ = mode.tput_steps[label]
        samples = (long_ - short) * mode.tput_batch
        try:
            builtin_seconds(root, mode, prec, short)  # warm-up: data file, kernels, allocator
            rates, peaks = {}, {}
            for name, fn in (("built-in", builtin_seconds), ("raw", raw_seconds)):
                best = float("inf")
                for _ in range(2):  # the better of two: a stray stall elsewhere is not the loop's
                    if mode.gpu:
                        torch.cuda.reset_peak_memory_stats()
                    best = min(best, fn(root, mode, prec, long_) - fn(root, mode, prec, short))
                rates[name] = samples / best if best > 0 else float("nan")
                peaks[name] = torch.cuda.max_memory_allocated() / 2**20 if mode.gpu else 0.0
            ratio = rates["built-in"] / rates["raw"]
            ok = ratio >= THROUGHPUT_GOAL if mode.gpu else ratio == ratio and ratio > 0
            mem = (f"; peak memory {peaks['built-in']:,.0f} vs {peaks['raw']:,.0f} MiB"
                   if mode.gpu else "")
            rows.append(Row(f"throughput/{label}", "PASS" if ok else "FAIL",
                            f"built-in {rates['built-in']:,.0f} samples/s, raw loop "
                            f"{rates['raw']:,.0f}: {ratio:.3f}x (goal >= {THROUGHPUT_GOAL}x"
                            f"{'' if mode.gpu else ', judged on GPUs only'}){mem}"))
        except Exception as e:
            traceback.print_exc()
            rows.append(Row(f"throughput/{label}", "FAIL", _first_line(e)))
    return rows


def check_pinned(mode: Mode) -> Row:
    import socket

    import torch

    from alchemist_jobs.runtime import ps_wire
    from alchemist_jobs.runtime.strategies.async_ps import HostStaging

    if not mode.gpu:
        return Row("ps/pinned", "SKIP", "pinned host memory needs CUDA")
    dev = _device(mode)
    params = [torch.zeros(1000, device=dev), torch.zeros(24, device=dev)]
    staging = HostStaging([params], dev)
    a, b = socket.socketpair()
    try:
        answer = torch.arange(1024, dtype=torch.float32)
        ps_wire.send(a, {"version": 1}, ps_wire.as_bytes(answer))
        _, buf, _ = ps_wire.recv(b, into=staging.landing(0))
        vec = staging.answer(0, buf)
        on_dev = staging.to_device(vec, 0)
        ok = (vec.is_pinned() and vec.data_ptr() == staging.answers[0].data_ptr()
              and torch.equal(on_dev.cpu(), answer) and on_dev.device == dev)
    finally:
        a.close()
        b.close()
    return Row("ps/pinned", "PASS" if ok else "FAIL",
               f"answer in pinned memory: {vec.is_pinned()}; copied to {on_dev.device} intact")


def check_metrics(root: Path, mode: Mode) -> Row:
    """A live worker's /metrics: on a GPU its NVML readings (the series the DCGM exporter's
    dashboards sit beside), on CPU its process series."""
    from alchemist_jobs.ui.series import metrics_url

    want = "alchemist_gpu_utilization_ratio{" if mode.gpu else "alchemist_process_cpu_seconds_total{"
    found: list[str] = []
    # After step 1 every rank holds until this file exists: the scrape is made while the
    # worker is held, however late a loaded machine lets it come (a fixed pause was missed).
    hold = root / "gc-metrics.go"
    hold.unlink(missing_ok=True)
    deadline = time.monotonic() + 180

    def scrape(handle: Any) -> None:
        if hold.exists():
            return
        url = metrics_url(handle.run.path)  # through the run's metrics bridge
        if url:
            try:
                text = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:  # the worker may not answer yet: next tick
                text = ""
            found.extend(ln for ln in text.splitlines() if ln.startswith(want))
        if found or time.monotonic() > deadline:
            hold.write_text("")

    env = {"ALCHEMIST_FAULT_HOLD_FILE": str(hold)}
    run_job(root, _job(mode, "gc-metrics", metrics=True, env=env), during=scrape)
    return Row("metrics/gpu" if mode.gpu else "metrics/cpu", "PASS" if found else "FAIL",
               found[0][:160] if found else f"no {want.rstrip('{')} series")


# --- two GPUs or more ---------------------------------------------------------------------


def check_multi(root: Path, mode: Mode, algo: dict[str, Any]) -> Row:
    world = min(mode.devices, 8)
    res_over = dict(mode.resources, gpu=world if mode.gpu else 0)
    out = run_job(root, _job(mode, f"gc-multi-{_label(algo)}", algorithm=algo,
                             procs_per_node=world, resources=res_over))
    res, workers = out["result"], out["workers"]
    digests = {w.get("final_param_sha256") for w in workers}
    comm = res["communication"]
    split = res["time_split_s"]
    steps_s = split["compute"] + split["communication"] + split["data"]
    ok = (len(workers) == world and all(_on_device(w, mode) for w in workers)
          and comm["seconds"] > 0 and comm["seconds"] <= steps_s
          and _learned(res, mode.task["synthetic"]["classes"]))
    if algo["name"] == "sync":
        ok = ok and len(digests) == 1
    return Row(f"multi/{_label(algo)}", "PASS" if ok else "FAIL",
               f"{world} ranks, {len(digests)} distinct final digest(s); waited "
               f"{comm['seconds']:.2f} s of {steps_s:.2f} s of steps, "
               f"{comm.get('overlapped_seconds', 0.0):.2f} s overlapped; accuracy "
               f"{res['test_accuracy']:.3f}")


def check_local_nodes(root: Path, mode: Mode) -> Row:
    out = run_job(root, _job(mode, "gc-nodes", nodes=2, procs_per_node=1))
    slices = [p.env.get("CUDA_VISIBLE_DEVICES") for p in out["request"].processes]
    digests = {w.get("final_param_sha256") for w in out["workers"]}
    ok = len(digests) == 1 and all(_on_device(w, mode) for w in out["workers"])
    if mode.gpu:
        ok = ok and None not in slices and len(set(slices)) == 2
    return Row("local-nodes/2", "PASS" if ok else "FAIL",
               f"node slices CUDA_VISIBLE_DEVICES={slices}; {len(digests)} distinct final "
               f"digest(s)")


# --- the plan and the table ---------------------------------------------------------------


def plan(root: Path, mode: Mode) -> list[tuple[str, int, Callable[[], Row | list[Row]]]]:
    """(row name, devices it needs, what runs it), in the order the table shows them."""
    rows: list[tuple[str, int, Callable[[], Row | list[Row]]]] = []
    for a in ALGOS:
        rows.append((f"algorithm/{_label(a)}", 1, lambda a=a: check_algorithm(root, mode, a)))
    rows += [("resume", 1, lambda: check_resume(root, mode)),
             ("precision", 1, lambda: check_precision(mode)),
             ("throughput", 1, lambda: check_throughput(root, mode)),
             ("ps/pinned", 1, lambda: check_pinned(mode)),
             ("metrics/gpu" if mode.gpu else "metrics/cpu", 1, lambda: check_metrics(root, mode))]
    for a in ALGOS:
        rows.append((f"multi/{_label(a)}", 2, lambda a=a: check_multi(root, mode, a)))
    rows.append(("local-nodes/2", 2, lambda: check_local_nodes(root, mode)))
    return rows


def run_rows(root: Path, mode: Mode, only: set[str] | None = None) -> list[Row]:
    out: list[Row] = []
    for name, needs, fn in plan(root, mode):
        if only and name not in only:
            continue
        if mode.devices < needs:
            out.append(Row(name, "SKIP", f"needs {needs} GPUs; this machine has {mode.devices}"))
            continue
        t0 = time.perf_counter()
        try:
            got = fn()
        except Exception as e:
            traceback.print_exc()
            got = Row(name, "FAIL", _first_line(e))
        got = got if isinstance(got, list) else [got]
        spent = time.perf_counter() - t0
        for r in got:
            r.seconds = spent / len(got)
        print(f"  {name}: {spent:.1f} s", file=sys.stderr, flush=True)
        out += got
    return out


def table(rows: list[Row]) -> str:
    out = ["| check | result | s | detail |", "|---|---|---:|---|"]
    out += [f"| {r.name} | {r.status} | {r.seconds:.1f} | {r.detail.replace('|', '/')} |"
            for r in rows]
    return "\n".join(out)


def refuse(msg: str) -> int:
    print(f"gpu_check: {msg}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the table (markdown) here")
    ap.add_argument("--self-test", action="store_true",
                    help="run the rows on CPU with small sizes (no GPU needed)")
    ap.add_argument("--only", action="append", help="run only this row (repeatable)")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError as e:
        return refuse(f"{sys.executable} cannot import torch ({e}); set PYTHON to the "
                      "interpreter that has the GPU build of torch")
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if version < TORCH_FLOOR:
        return refuse(f"torch {torch.__version__} is older than the {TORCH_FLOOR[0]}."
                      f"{TORCH_FLOOR[1]} this check and the GPU path need")
    if args.self_test:
        mode = self_test_mode()
        torch.set_num_threads(1)  # as a launched worker: spinning intra-op threads on a busy
        # machine make each small op wait for every core (hundreds of ms per step)
    elif not torch.cuda.is_available():
        return refuse(f"no usable GPU (torch {torch.__version__}, CUDA build "
                      f"{torch.version.cuda or 'none'}); this check needs one "
                      "(--self-test runs its rows on CPU)")
    else:
        mode = Mode(gpu=True, devices=torch.cuda.device_count())
    missing = _missing_modules()
    if missing:
        return refuse(f"{sys.executable} lacks {', '.join(missing)}: run scripts/stage-gpu-deps "
                      "where PyPI is reachable and bring .gpu-deps/ with the tree")
    from bench.gpu_deps import STAGE

    # what gpu_check.sh put on the path from the stage (bench/gpu_deps.py chose it)
    staged = [Path(p).name for p in sys.path if p.startswith(str(STAGE) + os.sep)]
    where = (f"{torch.cuda.get_device_name(0)} x{mode.devices}, CUDA {torch.version.cuda}"
             if mode.gpu else f"CPU, {mode.devices} gloo processes for the multi-GPU rows")
    print(f"gpu_check ({mode.name}): {where}; torch {torch.__version__}; Python "
          f"{sys.version.split()[0]} ({sys.executable}); staged: {', '.join(staged) or 'none'}",
          flush=True)
    root = Path(tempfile.mkdtemp(prefix="alchemist-gpu-check-"))
    os.environ["ALCHEMIST_HOME"] = str(root)
    t0 = time.perf_counter()
    rows = run_rows(root, mode, set(args.only) if args.only else None)
    text = table(rows)
    print(text, flush=True)
    print(f"gpu_check: {time.perf_counter() - t0:.0f} s; {sum(r.status == 'FAIL' for r in rows)} "
          f"failed, {sum(r.status == 'SKIP' for r in rows)} skipped", flush=True)
    if args.out:
        args.out.write_text(text + "\n")
    return 1 if any(r.status == "FAIL" for r in rows) else 0


def _missing_modules() -> list[str]:
    import importlib.util

    from bench.gpu_deps import STAGED

    need = ["numpy", *STAGED.values()]
    return [m for m in need if importlib.util.find_spec(m.split(".")[0]) is None]


if __name__ == "__main__":
    sys.exit(main())
