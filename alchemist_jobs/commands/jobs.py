"""`alchemist run|list|status|logs|cancel`: launch a job on a stack and follow it."""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from pathlib import Path

from alchemist_jobs.errors import JobFailed, UserError
from alchemist_jobs.scheduler import CANCELLED, SUCCEEDED, RunStatus


def _stack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", default="local", help="where to run (default: local)")
    p.add_argument("--outputs", type=Path, default=None,
                   help="a JSON file with the stack's `alchemist` output (instead of Pulumi)")
    p.add_argument("--home", type=Path, default=None,
                   help="local stack's shared-file-system root (default: $ALCHEMIST_HOME or "
                        "~/.alchemist)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    for command, text in (("run", "run a job spec on a stack and follow it to the end"),
                          ("submit", "submit a job spec to a cluster stack and return")):
        p = sub.add_parser(command, help=text)
        p.add_argument("spec", type=Path, help="job spec (YAML)")
        p.add_argument("--set", dest="overrides", action="append", default=[],
                       metavar="KEY=VALUE",
                       help="override a spec field, e.g. --set hyper.lr=0.05 (repeatable)")
        p.add_argument("--dry-run", action="store_true",
                       help="print what would be started (processes or manifests) and exit")
        p.add_argument("--quiet", action="store_true",
                       help="no progress display, only the summary")
        p.add_argument("--follow", "-f", action="store_true",
                       help="cluster stacks: stream rank 0's log and progress until the end")
        _stack_args(p)
        p.set_defaults(func=cmd_run)

    p = sub.add_parser("list", help="runs on a stack, with their state")
    _stack_args(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("status", help="state and progress of one run")
    p.add_argument("run", help="run id (a unique prefix is enough)")
    _stack_args(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", help="a worker's log")
    p.add_argument("run", help="run id (a unique prefix is enough)")
    p.add_argument("--rank", type=int, default=0, help="which worker (default 0)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")
    _stack_args(p)
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("cancel", help="stop a run and all its processes")
    p.add_argument("run", help="run id (a unique prefix is enough)")
    _stack_args(p)
    p.set_defaults(func=cmd_cancel)


def _scheduler(args: argparse.Namespace):
    from alchemist_jobs.stacks import get_scheduler

    return get_scheduler(args.stack, home=args.home, outputs=args.outputs)


# --- run -------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    warm = _warm_agent(args)
    try:
        from alchemist_jobs.spec import load_spec

        # Everything is validated before anything starts or is written.
        spec = load_spec(args.spec, args.overrides)
        scheduler = _scheduler(args)
        follow = getattr(scheduler, "follow", None)  # cluster stacks: the job runs on its own
        if args.command == "submit" and follow is None:
            raise UserError(f"submit --stack {args.stack}: jobs on this stack run as children "
                            "of the command; accepted: `alchemist run` here, or a cluster stack")
        request = scheduler.dryrun(spec, args.spec.resolve().parent)
        if args.dry_run:
            print(request.describe())
            return 0
        t0 = time.time()
        handle = scheduler.schedule(request, warm=warm) if warm else scheduler.schedule(request)
        warm = None  # the run's agent now (schedule discards it itself if it fails)
    finally:
        if warm is not None:
            warm.discard()
    if follow is not None:
        print(f"submitted {request.run_id} to stack {scheduler.stack}", file=sys.stderr)
        if args.command == "submit" and not args.follow:
            return 0
        return follow(handle, logs=args.follow, quiet=args.quiet)
    wait = getattr(scheduler, "wait", None)
    if wait is None:  # a backend that only submits (follow with `alchemist logs`)
        print(f"submitted {request.run_id} to stack {scheduler.stack}")
        return 0
    print(f"run {request.run_id}: {spec.world_size} worker(s) on stack {scheduler.stack}",
          file=sys.stderr)
    # SIGTERM/SIGHUP to the CLI stop the job like Ctrl-C does: nothing is left running.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)
    display = None
    try:
        display = _Display(handle, spec, quiet=args.quiet)
        status = wait(handle, tick=display.tick)
    except Exception:
        # A fault in the CLI itself (the display, a full disk) must not orphan the run.
        if display is not None:
            display.close()
        scheduler.interrupt(handle)
        raise
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup short
        display.close()
        print(f"\ninterrupted: stopping {request.run_id} ...", file=sys.stderr)
        scheduler.interrupt(handle)
        print(f"run {request.run_id} cancelled; no process left running", file=sys.stderr)
        return 130
    display.close()
    _summary(status, time.time() - t0, handle)
    if status.state == SUCCEEDED:
        return 0
    if status.state == CANCELLED:
        raise JobFailed(f"run {status.run_id} was cancelled")
    why = f": {status.message}" if status.message else ""
    raise JobFailed(f"run {status.run_id} {status.state}{why}; see `alchemist logs {status.run_id} "
                    f"--rank N` (logs in {status.extra.get('run_dir', '?')}/logs)")


def _warm_agent(args: argparse.Namespace):
    """On the local stack, start the torchrun agent's interpreter before validating, so its
    import of torch overlaps ours of pydantic (alchemist_jobs/warm_agent.py). It starts
    nothing until the job is valid and is killed otherwise. ALCHEMIST_WARM_AGENT=0 turns
    this off."""
    if args.command != "run" or args.stack != "local" or args.dry_run or \
            os.environ.get("ALCHEMIST_WARM_AGENT", "1") == "0":
        return None
    from alchemist_jobs.warm_agent import WarmAgent

    return WarmAgent()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


class _Display:
    """A progress bar on a terminal; a line every few seconds elsewhere (CI logs)."""

    def __init__(self, handle, spec, quiet: bool):
        self.handle, self.spec, self.quiet = handle, spec, quiet
        self.tty = sys.stderr.isatty() and not quiet
        self.last_line = 0.0
        self.progress = None
        if self.tty:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(),
                # The total is unknown (None) until rank 0 reports its first step.
                TextColumn("{task.fields[steps]}"),
                TextColumn("{task.fields[info]}"), TimeElapsedColumn(), transient=True)
            self.task = self.progress.add_task(spec.name, total=None, info="starting workers",
                                              steps="")
            self.progress.start()

    def tick(self) -> None:
        p = self.handle.run.progress()
        if self.quiet:
            return
        if p is None:
            info = "starting workers"
        else:
            epochs = math.ceil(p["epochs"])  # the last report comes after the last epoch
            info = (f"epoch {min(p['epoch'] + 1, epochs)}/{epochs}  loss {p['loss']:.4f}  "
                    f"{p['samples_per_s']:,.0f} samples/s")
            if p.get("restarts"):
                info += f"  restarts {p['restarts']}"
        if self.progress is not None:
            if p is not None:
                self.progress.update(self.task, total=p["total_steps"], completed=p["step"],
                                     info=info, steps=f"step {p['step']}/{p['total_steps']}")
            return
        now = time.time()
        if p is not None and now - self.last_line >= 5.0:
            self.last_line = now
            print(f"  step {p['step']}/{p['total_steps']}  {info}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _summary(status: RunStatus, wall: float, handle) -> None:
    res = status.extra.get("result") or {}
    restarts = max([status.restarts] + [r.get("restart", 0) for r in handle.run.worker_records()])
    lines = [f"run {status.run_id}: {status.state}"]
    if res:
        lines.append(f"  final loss      {res['final_loss']:.4f}")
        lines.append(f"  test accuracy   {res['test_accuracy']:.4f}")
        lines.append(f"  throughput      {res['samples_per_s']:,.0f} samples/s "
                     f"({res['steps']} steps, global batch {res['global_batch']})")
    lines.append(f"  wall time       {wall:.1f} s")
    lines.append(f"  restarts        {restarts}")
    lines.append(f"  run directory   {status.extra.get('run_dir')}")
    if status.message:
        lines.append(f"  message         {status.message}")
    if status.state not in (SUCCEEDED, CANCELLED):
        from alchemist_jobs.failures import failure_lines

        tail = failure_lines(handle.run.logs)
        if tail:
            lines.append("  why it failed:")
            lines += ["    " + t for t in tail]
    print("\n".join(lines))


# --- list / status / logs / cancel ----------------------------------------------------------------


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def cmd_list(args: argparse.Namespace) -> int:
    runs = _scheduler(args).list()
    if not runs:
        print(f"no runs on stack {args.stack}")
        return 0
    print(f"{'RUN':<44} {'STATE':<10} {'WORKERS':>7} {'STEP':>11} {'CREATED':<19}")
    for r in runs:
        step = f"{r.step}/{r.total_steps}" if r.step is not None else "-"
        print(f"{r.run_id:<44} {r.state:<10} {r.workers:>7} {step:>11} {_when(r.created):<19}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    s = _scheduler(args).status(args.run)
    print(f"run        {s.run_id}\nstack      {s.stack}\nstate      {s.state}")
    print(f"workers    {s.workers}\nrestarts   {s.restarts}")
    if s.step is not None:
        print(f"step       {s.step}/{s.total_steps}")
    prog = s.extra.get("progress") or {}
    if prog:
        print(f"loss       {prog.get('loss'):.4f}\nthroughput {prog.get('samples_per_s', 0):,.0f} samples/s")
    res = s.extra.get("result") or {}
    if res:
        print(f"accuracy   {res.get('test_accuracy'):.4f}")
    print(f"created    {_when(s.created)}\nended      {_when(s.ended)}")
    if s.message:
        print(f"message    {s.message}")
    if s.extra.get("run_dir"):
        print(f"directory  {s.extra['run_dir']}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    if args.rank < 0:
        raise UserError(f"--rank {args.rank}: accepted: a rank >= 0")
    try:
        for chunk in _scheduler(args).logs(args.run, rank=args.rank, follow=args.follow):
            sys.stdout.write(chunk)
            sys.stdout.flush()
    except KeyboardInterrupt:
        return 130
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    s = _scheduler(args).cancel(args.run)
    print(f"run {s.run_id}: {s.state}")
    return 0
