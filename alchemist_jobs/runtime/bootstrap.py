"""Every worker process starts here, under torchrun, before the task's own code.

    python -m alchemist_jobs.runtime.bootstrap trainer
    python -m alchemist_jobs.runtime.bootstrap script PATH [ARGS...]
    python -m alchemist_jobs.runtime.bootstrap module NAME [ARGS...]

It sends the worker's stdout and stderr to `logs/rank-<RANK>.log` in the run directory
(appending, one header per attempt), records the worker's pid, asks the kernel to kill the
worker if its launcher dies (no orphans, whatever happens to the launcher), then runs the
target: the built-in trainer (built-in and `task.entry` tasks), or a user script run
unmodified, as `python PATH ARGS` would run it. A script whose algorithm is not sync must
hand its loop to `alchemist_jobs.prepare` (own_loop.py): one that never does fails with one
line instead of training as plain independent processes.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import runpy
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from alchemist_jobs import environment as E
from alchemist_jobs import job_env, own_loop, store_bind
from alchemist_jobs.processes import die_with_parent
from alchemist_jobs.rundir import read_json, write_json_atomic
from alchemist_jobs.runtime import config_error, framework_env, nccl_net
from alchemist_jobs.runtime.devices import DeviceError
from alchemist_jobs.runtime.script_report import install
from alchemist_jobs.task import TaskError
from alchemist_jobs.worker_env import restarts


def _die_with_parent() -> None:
    """The kernel sends SIGKILL to this worker if torchrun dies."""
    launcher = os.getppid()
    die_with_parent(signal.SIGKILL)
    # Re-parented: the launcher died before prctl took effect. Compared with the parent seen
    # before, never with 1: in a container (a Kubernetes pod) torchrun itself is PID 1.
    if os.getppid() != launcher:
        os._exit(1)


def _redirect_output(log: Path, rank: int) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    os.write(
        fd,
        (
            f"=== rank {rank} attempt {restarts() + 1} pid {os.getpid()} "
            f"at {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n"
        ).encode(),
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _record(run_dir: Path, rank: int, kind: str) -> None:
    """Builtin workers write a fuller record (with the metrics port) themselves. The step each
    earlier attempt reached is kept (`earlier_steps`, by restart count): the launcher may read
    an attempt's failure only after this one has started (local_backend.GroupRestarts)."""
    workers = run_dir / "workers"
    workers.mkdir(parents=True, exist_ok=True)
    path = workers / f"rank-{rank}.json"
    old = read_json(path) or {}
    earlier = dict(old.get("earlier_steps") or {})
    if isinstance(old.get("restart"), int) and isinstance(old.get("step"), int):
        earlier[str(old["restart"])] = old["step"]
    write_json_atomic(
        path,
        dict(
            earlier_steps=earlier,
            rank=rank,
            local_rank=int(os.environ.get("LOCAL_RANK", 0)),
            pid=os.getpid(),
            node=E.NODE.get(default=""),
            role="worker",
            task=kind,
            restart=restarts(),
            started=time.time(),
        ),
    )


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("trainer", "builtin", "script", "module"):
        print(
            "usage: python -m alchemist_jobs.runtime.bootstrap trainer|script PATH|module NAME",
            file=sys.stderr,
        )
        return 2
    kind, rest = argv[0], argv[1:]
    rank = int(os.environ.get("RANK", 0))
    run_dir = E.RUN_DIR.require()
    _die_with_parent()
    if not E.LOG_TO_CONSOLE.get():
        _redirect_output(run_dir / "logs" / f"rank-{rank}.log", rank)
    _record(run_dir, rank, kind)
    job_env.activate()  # the job's own packages, after the platform's (requirements:)

    framework = E.FRAMEWORK.get(default="torch")
    # Rank 0's worker store stays where the run allows (local: a private file). Patching it
    # imports torch (about 210 MB a worker): a TensorFlow or JAX worker swaps its addresses
    # through files instead (framework_env.swap_through_files) and opens no torch store.
    if framework == "torch":
        store_bind.apply()

    try:  # a network-fabric pod without NCCL's net plugin would train over TCP without a word
        plugin = nccl_net.require()
    except nccl_net.NetPluginError as e:  # a restart gets the same image: fail the run
        return config_error.fail(str(e))
    if plugin is not None and os.environ.get("LOCAL_RANK", "0") == "0":
        print(
            f"alchemist: NCCL net plugin '{plugin.name}' (ncclNetPlugin_v{plugin.version}, {plugin.library})",
            flush=True,
        )

    if kind in ("trainer", "builtin"):  # "builtin": the word before entry tasks existed
        from alchemist_jobs.runtime import trainer

        try:
            code = trainer.main()
        except (DeviceError, TaskError) as e:  # what a restart cannot fix: one line, no restart
            code = config_error.fail(str(e))
        except BaseException:
            traceback.print_exc()
            code = 1
        # A prompt exit without interpreter teardown: gloo's destructors can abort after a
        # finished job; everything worth keeping is flushed already.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    # A TensorFlow or JAX program: its place in the job told as TF_CONFIG or JAX_*
    # (runtime/framework_env.py) before the framework is imported, since it reads some of them
    # only then; the framework importable (or one line naming the extra); a SIGTERM that ends
    # the worker even after the framework took the signal for itself.
    if framework != "torch":
        gpus = _spec_gpus(run_dir)
        framework_env.prepare(framework, gpus)
        try:
            framework_env.require(framework)
        except framework_env.FrameworkMissing as e:  # the image lacks it: no restart helps
            return config_error.fail(str(e))
        framework_env.after_import(framework, gpus)

    # A user program: exactly what `python PATH ARGS` / `python -m NAME ARGS` would do,
    # with this worker's metrics served and `alchemist_jobs.report.report()` wired up.
    reporter = _serve_script_metrics(run_dir, rank, kind)
    try:
        code = _run_program(kind, rest[0], rest[1:])
        if code == 0:
            code = _finish_own_loop()
    finally:
        if reporter is not None:
            reporter.close()
    # TensorFlow's gRPC server and JAX's gloo pairs hold threads of their own, like torch's
    # process groups: the same prompt exit (JAX's atexit shutdown barrier still runs).
    if "torch.distributed" in sys.modules or framework != "torch":
        _exit_before_teardown(code)
    return code


def _finish_own_loop() -> int:
    """After a script that returned normally: the algorithm's last exchange where the
    script's loop went through `prepare` and did not finish it itself; a non-sync algorithm
    that the script never applied fails the run with one line (no restart can fix it)."""
    try:
        own_loop.finish_at_exit()
    except own_loop.NotApplied as e:
        return config_error.fail(str(e))
    return 0


def _spec_gpus(run_dir: Path) -> int:
    """resources.gpu of the run's spec: a TensorFlow or JAX worker takes one of the node's."""
    import yaml

    raw = yaml.safe_load((run_dir / "spec.yaml").read_text()) or {}
    return int((raw.get("resources") or {}).get("gpu") or 0)


def _run_program(kind: str, target: str, args: list[str]) -> int:
    """Run the user's program as `__main__`; its exit code as the interpreter would give it."""
    sys.argv = [target, *args]
    try:
        if kind == "script":
            sys.path[0] = str(Path(target).resolve().parent)
            runpy.run_path(target, run_name="__main__")
        else:
            sys.path[0] = os.getcwd()
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _exit_before_teardown(code: int) -> None:
    """End a worker that used torch.distributed the way the interpreter's exit would, less
    its teardown, which can abort a finished job.

    A process group's C++ threads (gloo's `pt_gloo_runloop`) drop their last reference to
    a finished collective after the Python code that waited for it has moved on; that drop
    releases Python objects, so it takes the GIL. If the main thread has begun finalizing
    the interpreter by then, CPython ends the taking thread with pthread_exit, whose forced
    unwind through a noexcept C++ destructor calls std::terminate ("terminate called without
    an active exception", or "FATAL: exception not rethrown"): SIGABRT, a failed rank and a
    group restart after the job's work was done. `destroy_process_group()` narrows that
    window but does not close it, under plain torchrun too. So: wait for the program's
    non-daemon threads, run its atexit handlers and flush every open file, as the exit would;
    then leave without finalizing."""
    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for obj in gc.get_objects():  # files the program left open hold unwritten buffers
        # type(), not isinstance(): isinstance falls back to reading obj.__class__, which
        # some objects answer with a warning (torch.distributed.reduce_op's FutureWarning
        # ended every script worker's log).
        if issubclass(type(obj), io.IOBase):
            try:
                if not obj.closed:
                    obj.flush()
            except Exception:
                pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _serve_script_metrics(run_dir: Path, rank: int, kind: str):
    """Process metrics for every script worker, and the report() API (script_report.py)."""
    try:
        import yaml

        raw = yaml.safe_load((run_dir / "spec.yaml").read_text()) or {}
        algorithm = (raw.get("algorithm") or {}).get("name", "sync")
        node = E.NODE.get() or socket.gethostname()
        labels = dict(
            job=str(raw.get("name", "")),
            run=run_dir.name,
            rank=str(rank),
            node=node,
            algorithm=str(algorithm),
        )
        reporter, port = install(
            run_dir,
            rank,
            int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)),
            restarts(),
            labels,
            enabled=bool(raw.get("metrics", True)),
        )
    except Exception as e:  # metrics are an aid: never stop the user's program for them
        print(
            f"alchemist: metrics for this {kind} worker are off ({type(e).__name__}: {e})",
            file=sys.stderr,
            flush=True,
        )
        return None
    record = run_dir / "workers" / f"rank-{rank}.json"
    write_json_atomic(record, dict(read_json(record) or {}, metrics_port=port, node=node))
    return reporter


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
