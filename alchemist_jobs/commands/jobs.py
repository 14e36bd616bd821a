"""`alchemist run|list|status|logs|cancel|rm`: launch a job on a stack and follow it."""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from alchemist_jobs import defaults, warm_agent
from alchemist_jobs import environment as E
from alchemist_jobs.commands import complete_files
from alchemist_jobs.commands.stack import complete_stack
from alchemist_jobs.errors import JobFailed, UserError
from alchemist_jobs.failures import failure_lines
from alchemist_jobs.processes import popen_group
from alchemist_jobs.rundir import RunDir, check_home, default_root, run_dirs, runs_root
from alchemist_jobs.stack_kinds import kind_of

if TYPE_CHECKING:  # the scheduler (pydantic) is imported by the commands that use it, so
    from alchemist_jobs.scheduler import RunStatus  # building the parser stays fast


def _stack_args(p: argparse.ArgumentParser) -> None:
    from alchemist_jobs import defaults  # ~/.config/alchemist/defaults.yaml (docs/cli.md)

    p.add_argument(
        "--stack",
        default=defaults.get("stack", "local"),
        help="where to run (default: local, or the defaults file's)",
    ).completer = complete_stack  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument(
        "--outputs",
        type=Path,
        default=defaults.get("outputs"),
        help="a JSON file with the stack's `alchemist` output (instead of Pulumi)",
    ).completer = complete_files("json")  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument(
        "--home",
        type=Path,
        default=defaults.get("home"),
        help=f"local stack's shared-file-system root (default: ${E.HOME.name} or ~/.alchemist)",
    )
    p.add_argument(
        "--team",
        default=None,
        metavar="NAME",
        help=f"cluster stacks: the team to act for (default: ${E.TEAM.name}, else the stack's default team)",
    )


EXAMPLES = {
    "run": "examples:\n  alchemist run examples/digits.yaml\n"
    "  alchemist run examples/digits.yaml --set hyper.lr=0.1 --env OMP_NUM_THREADS=2\n"
    "  alchemist run examples/plain_ddp.py -- --epochs 3\n"
    "  alchemist run examples/digits.yaml --detach\n"
    "  alchemist run examples/digits.yaml --stack dev --outputs "
    "examples/stack-outputs.json --dry-run",
    "submit": "examples:\n  alchemist submit examples/digits.yaml --stack local\n"
    "  alchemist submit examples/digits.yaml --stack dev --follow",
    "list": "examples:\n  alchemist list\n  alchemist list --state failed --limit 5 --json\n"
    "  alchemist list --columns run,state,algorithm,accuracy,duration,reason",
    "status": "examples:\n  alchemist status digits-20261201\n  alchemist status 0e2c --json",
    "logs": "examples:\n  alchemist logs 0e2c\n  alchemist logs 0e2c --rank 1 --follow",
    "cancel": "examples:\n  alchemist cancel 0e2c",
    "rm": "examples:\n  alchemist rm 0e2c\n  alchemist rm --state failed\n"
    "  alchemist rm --older-than 7d --dry-run\n  alchemist rm 0e2c --force",
}


def _add(sub: argparse._SubParsersAction, command: str, text: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        command,
        help=text,
        description=text,
        epilog=EXAMPLES[command],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    for command, text in (
        ("run", "run a job spec on a stack and follow it to the end"),
        ("submit", "submit a job spec and return (local: run it detached)"),
    ):
        p = _add(sub, command, text)
        p.add_argument(
            "spec", type=Path, help="job spec (YAML), or a Python script to run as a script task"
        ).completer = complete_files("yaml", "yml", "py")  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
        p.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override a spec field, e.g. --set hyper.lr=0.05 (repeatable)",
        )
        p.add_argument(
            "--env",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="an environment variable for the workers (repeatable; a string)",
        )
        p.add_argument(
            "--dry-run",
            action="store_true",
            help="print what would be started (processes or manifests) and exit",
        )
        p.add_argument(
            "--json",
            action="store_true",
            help="machine-readable: the dry run, the started run's id (--detach, "
            "a cluster stack) or the finished run's status as one JSON document",
        )
        if command == "run":  # submit always returns
            p.add_argument(
                "--detach",
                action="store_true",
                help="local stack: run in the background (survives SIGHUP and a closed terminal) and return",
            )
        p.add_argument(
            "--quiet",
            action="store_true",
            default=defaults.get("quiet", False),
            help="no progress display and no worker output, only the summary",
        )
        p.add_argument(
            "--rank", type=int, default=0, help="whose output to show while the job runs (default 0)"
        )
        p.add_argument(
            "--follow",
            "-f",
            action="store_true",
            help="stream the rank's log and progress until the end (submit, "
            "--detach and cluster stacks; `run` shows it anyway)",
        )
        p.add_argument("--run-id", default=None, help=argparse.SUPPRESS)
        p.add_argument("--launcher", action="store_true", help=argparse.SUPPRESS)
        _stack_args(p)
        # `alchemist run train.py -- ARGS`: cli.main hands everything after `--` over as
        # args.args (argparse would take the script's own flags for ours).
        p.set_defaults(func=cmd_run, args=[], detach=False)

    _add_list(sub)

    p = _add(sub, "status", "state and progress of one run")
    p.add_argument("run", help="run id (any part of it that only one run has)").completer = complete_run  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument("--json", action="store_true", help="as JSON")
    _stack_args(p)
    p.set_defaults(func=cmd_status)

    p = _add(sub, "logs", "a worker's log")
    p.add_argument("run", help="run id (any part of it that only one run has)").completer = complete_run  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument("--rank", type=int, default=0, help="which worker (default 0)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")
    _stack_args(p)
    p.set_defaults(func=cmd_logs)

    p = _add(sub, "cancel", "stop a run and all its processes")
    p.add_argument("run", help="run id (any part of it that only one run has)").completer = complete_run  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    _stack_args(p)
    p.set_defaults(func=cmd_cancel)

    p = _add(sub, "rm", "remove runs and their files (logs, checkpoints, metrics)")
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="run ids (any part of one that only one run has); without any, the runs the filters select",
    ).completer = complete_run  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument(
        "--state",
        default=None,
        choices=["succeeded", "failed", "cancelled", "lost"],
        help="only runs that ended in this state",
    )
    p.add_argument(
        "--older-than",
        default=None,
        metavar="AGE",
        help="only runs created longer ago than AGE: 90s, 30m, 12h, 7d or 2w",
    )
    p.add_argument("--force", action="store_true", help="also a run that has not ended: cancel it first")
    p.add_argument("--dry-run", action="store_true", help="print what would be removed")
    _stack_args(p)
    p.set_defaults(func=cmd_rm)


def _add_list(sub: argparse._SubParsersAction) -> None:
    p = _add(sub, "list", "runs on a stack, newest first, with their state")
    p.add_argument(
        "--state",
        default=None,
        choices=["pending", "running", "succeeded", "failed", "cancelled", "lost", "restarting"],
        help="only runs in this state",
    )
    p.add_argument("--limit", type=int, default=None, help="at most this many runs")
    p.add_argument(
        "--columns",
        default=None,
        metavar="A,B,...",
        help="the table's columns, in order: "
        + ", ".join(LIST_COLUMNS)
        + ", or any metric the runs reported (default: "
        + ",".join(DEFAULT_COLUMNS)
        + ")",
    )
    p.add_argument("--json", action="store_true", help="as JSON (a list of runs)")
    _stack_args(p)
    p.set_defaults(func=cmd_list)


def complete_run(prefix: str, parsed_args: argparse.Namespace, **_) -> list[str]:
    """Shell completion of a RUN: the ids of the local stack's runs (their directory names,
    no run's state is read); none for a cluster stack, which only its API server could list."""
    if not kind_of(getattr(parsed_args, "stack", None)).runs_here:
        return []
    given = set(getattr(parsed_args, "runs", None) or ())  # `rm A B`: A is not offered again
    home = getattr(parsed_args, "home", None) or default_root()
    try:
        runs = run_dirs(home)
    except UserError:  # a home the commands refuse offers nothing (the command says why)
        return []
    return sorted(r.run_id for r in runs if r.run_id.startswith(prefix) and r.run_id not in given)


def _scheduler(args: argparse.Namespace):
    from alchemist_jobs.stacks import get_scheduler

    outputs = args.outputs
    if not kind_of(args.stack).has_outputs and outputs is not None and outputs == defaults.get("outputs"):
        outputs = None  # the defaults file's outputs belong to its cluster stack
    return get_scheduler(args.stack, home=args.home, outputs=outputs, team=args.team)


# --- run -------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    detach = args.detach or (args.command == "submit" and kind_of(args.stack).submit_detaches)
    warm = None if detach else _warm_agent(args)
    try:
        # Everything is validated before anything starts or is written.
        spec, spec_dir = _load(args)
        if not 0 <= args.rank < spec.world_size:
            raise UserError(
                f"--rank {args.rank}: the job has {spec.world_size} worker(s); "
                f"accepted: a rank of 0..{spec.world_size - 1}"
            )
        scheduler = _scheduler(args)
        if detach and scheduler.runs_on_its_own:
            detach = False  # a cluster job lives on its own anyway
        try:
            request = scheduler.dryrun(spec, spec_dir, run_id=args.run_id)
        except UserError as e:  # what this spec asks that the stack cannot give: name the file
            if type(e) is not UserError or str(e).startswith(str(args.spec)):
                raise
            raise UserError(f"{args.spec}: {e}") from None
        if args.dry_run:
            _print_request(request, args.json)
            return 0
        if args.json and args.follow:
            raise UserError("--json with --follow: --follow streams a log; accepted: one of them")
        if detach:
            code = _start_detached(args, request.run_id)
            if not args.follow:
                return code
            from alchemist_jobs.commands.follow import follow

            return follow(scheduler, request.run_id, spec, logs=True, quiet=args.quiet, rank=args.rank)
        t0 = time.time()
        handle = scheduler.schedule(request, warm=warm)
        warm = None  # the run's agent now (schedule discards it itself if it fails)
    finally:
        if warm is not None:
            warm.discard()
    if scheduler.runs_on_its_own:
        print(f"submitted {request.run_id} to stack {scheduler.stack}", file=sys.stderr)
        if args.json:  # the id to poll with `status --json`: a cluster run lives on its own
            print(json.dumps({"run_id": request.run_id, "stack": scheduler.stack}))
            return 0
        if args.command == "submit" and not args.follow:
            return 0
        from alchemist_jobs.commands.follow import follow

        return follow(
            scheduler, scheduler.run_id(handle), spec, logs=args.follow, quiet=args.quiet, rank=args.rank
        )
    return _follow_local(args, scheduler, request, handle, spec, t0)


def _load(args: argparse.Namespace):
    """The job spec: a YAML file, or `alchemist run train.py -- ARGS` (a script task)."""
    from alchemist_jobs.spec import load_spec, script_spec

    overrides = list(args.overrides) + [f"env.{kv}" for kv in args.env]
    if any(o.replace(" ", "") == "algorithm=auto" for o in overrides):  # the plan's recorded pick
        from alchemist_jobs.planner.auto import resolve_auto

        overrides = resolve_auto(args.spec, overrides, _home(args))
    for kv in args.env:
        if "=" not in kv:
            raise UserError(f"--env {kv!r}: accepted: KEY=VALUE")
    if args.spec.suffix == ".py":
        return script_spec(args.spec, list(args.args), overrides), args.spec.resolve().parent
    if args.args:
        raise UserError(
            f"{args.spec}: arguments after `--` go to a script; accepted: "
            "`alchemist run train.py -- ARGS`, or task.args in the spec"
        )
    return load_spec(args.spec, overrides), args.spec.resolve().parent


def _print_request(request, as_json: bool) -> None:
    if as_json:
        print(json.dumps(request.as_json(), indent=1))
    else:
        print(request.describe())


def _start_detached(args: argparse.Namespace, run_id: str) -> int:
    """`run --detach` / `submit --stack local`: a launcher in its own session (no terminal:
    closing it, or SIGHUP, does not stop the run) runs the job; this command returns once
    the run has started. Follow it with status, logs and cancel."""
    argv = [
        sys.executable,
        "-m",
        "alchemist_jobs",
        "run",
        str(args.spec),
        "--quiet",
        "--run-id",
        run_id,
        "--launcher",
        "--home",
        str(_home(args)),
    ]
    argv += [a for kv in args.overrides for a in ("--set", kv)]
    argv += [a for kv in args.env for a in ("--env", kv)]
    argv += ["--", *args.args] if args.args else []
    launcher = popen_group(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        die_with_parent=False,
    )
    run = RunDir(runs_root(_home(args)) / run_id)
    while not run.state().get("agents") and launcher.poll() is None:
        time.sleep(0.05)  # until the launcher has recorded its agents (or failed)
    assert launcher.stderr is not None  # started with stderr=PIPE
    if launcher.poll() is not None and launcher.returncode != 0:
        err = launcher.stderr.read().decode(errors="replace").strip().splitlines()
        raise JobFailed(
            err[-1].removeprefix("error: ")
            if err
            else f"run {run_id}: the launcher exited with {launcher.returncode}"
        )
    launcher.stderr.close()
    print(json.dumps({"run_id": run_id, "stack": "local"}) if args.json else run_id)
    print(
        f"run {run_id} started in the background on stack local; follow it with "
        f"`alchemist status {run_id}`, `alchemist logs {run_id} -f`, "
        f"`alchemist cancel {run_id}`",
        file=sys.stderr,
    )
    return 0


def _home(args: argparse.Namespace) -> Path:
    home = args.home or default_root()
    check_home(home)  # before it is resolved: a symlink loop is one line too
    return home.resolve()


def _follow_local(args, scheduler, request, handle, spec, t0: float) -> int:
    """Follow a local run to its end; Ctrl-C, SIGTERM and (unless detached) SIGHUP stop it."""
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.getsignal(sig) for sig in signals}
    try:
        return _follow_local_run(args, scheduler, request, handle, spec, t0)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _follow_local_run(args, scheduler, request, handle, spec, t0: float) -> int:
    if not args.launcher:
        print(
            f"run {request.run_id}: {spec.world_size} worker(s) on stack {scheduler.stack}", file=sys.stderr
        )
    # Ctrl-C, SIGTERM and SIGHUP only note the request; the wait loop acts on it between
    # polls. An exception raised inside Popen.wait/poll can leave the Popen's internal lock
    # held, and stopping the agents then blocks on it forever.
    stop = _StopRequest()
    signal.signal(signal.SIGINT, stop.note)
    signal.signal(signal.SIGTERM, stop.note)
    # A detached launcher has no terminal to lose: SIGHUP must not end its run.
    signal.signal(signal.SIGHUP, signal.SIG_IGN if args.launcher else stop.note)
    display = None
    try:
        display = _Display(handle, spec, quiet=args.quiet or args.json, rank=args.rank)

        def tick() -> None:
            stop.check()
            display.tick()

        status = scheduler.wait(handle, tick=tick)
    except Exception:
        # A fault in the CLI itself (the display, a full disk) must not orphan the run.
        if display is not None:
            display.close()
        removed = _removed_outcome(handle)
        if removed is None:
            scheduler.interrupt(handle)
            raise
        return _removed_end(args, request.run_id, removed)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup short
        if display is not None:
            display.close()
        print(f"\ninterrupted: stopping {request.run_id} ...", file=sys.stderr)
        scheduler.interrupt(handle)
        print(f"run {request.run_id} cancelled; no process left running", file=sys.stderr)
        return 130
    display.close()
    from alchemist_jobs.scheduler import CANCELLED, SUCCEEDED

    if args.json:  # the run's status, as `status RUN --json` gives it, and the wall time
        print(json.dumps(dict(status.as_json(), wall_s=round(time.time() - t0, 3)), indent=1))
    else:
        _summary(status, time.time() - t0, handle)
    if status.state == SUCCEEDED:
        return 0
    if status.state == CANCELLED:
        raise JobFailed(f"run {status.run_id} was cancelled")
    why = f": {status.message}" if status.message else ""
    raise JobFailed(
        f"run {status.run_id} {status.state}{why}; see `alchemist logs {status.run_id} "
        f"--rank N` (logs in {status.run_dir}/logs)"
    )


def _removed_outcome(handle) -> str | None:
    """The run's true end when `alchemist rm` removed its directory under this CLI (None while
    the directory is there): what the launcher recorded, if it did; else cancelled, since
    only `rm --force` removes a run whose outcome is not recorded, and it cancels it first."""
    from alchemist_jobs.scheduler import CANCELLED, FAILED, SUCCEEDED

    if handle.run.path.exists() or any(p.poll() is None for p in handle.procs):
        return None
    recorded = handle.run.written.get("state")
    return recorded if recorded in (SUCCEEDED, FAILED) else CANCELLED


def _removed_end(args: argparse.Namespace, run_id: str, state: str) -> int:
    """One line (and, with --json, the run's end as one document), the exit status of the
    run's own outcome."""
    from alchemist_jobs.scheduler import SUCCEEDED

    line = f"run {run_id} {state}; its directory was removed by `alchemist rm` meanwhile"
    if args.json:
        print(json.dumps({"run_id": run_id, "stack": "local", "state": state, "removed": True}))
    if state != SUCCEEDED:
        raise JobFailed(line)
    print(line, file=sys.stderr)
    return 0


def _warm_agent(args: argparse.Namespace):
    """On the local stack, start the torchrun agent's interpreter before validating, so its
    import of torch overlaps ours of pydantic (alchemist_jobs/warm_agent.py). It starts
    nothing until the job is valid and is killed otherwise. ALCHEMIST_WARM_AGENT=0 turns
    this off."""
    early = warm_agent.take_early()  # cli.main starts one as soon as the command is `run`
    if (
        args.command != "run"
        or not kind_of(args.stack).runs_here
        or args.dry_run
        or not E.WARM_AGENT.get(default=True)
    ):
        if early is not None:
            early.discard()
        return None
    return early or warm_agent.WarmAgent([str(args.spec), *args.overrides])  # its guess: may_need_torch


class _StopRequest:
    """A stop signal, turned into KeyboardInterrupt at a safe point (`check`)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def note(self, signum, frame) -> None:
        self.signum = signum

    def check(self) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt


class _Display:
    """A progress bar on a terminal (a line every few seconds elsewhere, as in CI logs), with
    one rank's own output (its log, as torchrun shows a worker's) printed above it."""

    def __init__(self, handle, spec, quiet: bool, rank: int = 0):
        self.handle, self.spec, self.quiet = handle, spec, quiet
        self.tty = sys.stderr.isatty() and not quiet
        self.last_line = 0.0
        self.progress = None
        self.log = None if quiet else LogTail(handle.run.rank_log(rank))
        self.events = 0  # the group's restarts told so far (run.json's restart_events)
        if self.tty:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                # The total is unknown (None) until rank 0 reports its first step.
                TextColumn("{task.fields[steps]}"),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                transient=True,
            )
            self.task = self.progress.add_task(spec.name, total=None, info="starting workers", steps="")
            self.progress.start()

    def tick(self) -> None:
        if self.quiet:
            return
        from alchemist_jobs.run_files import Progress

        assert self.log is not None  # quiet has none
        self._print(self.log.lines())
        events = self.handle.run.state().get("restart_events") or []
        for line in events[self.events :]:  # a rank failed and the group restarts: say so now
            self._say(str(line))
        self.events = len(events)
        raw = self.handle.run.progress()
        p = Progress.lenient(raw) if raw is not None else None
        if p is None or p.step is None:
            # A worker's record is written as it starts: from then on the workers run.
            p = None
            info = "running" if self.handle.run.worker_records() else "starting workers"
        else:
            info = _progress_text(p)
        if self.progress is not None:
            if p is not None:
                self.progress.update(
                    self.task,
                    total=p.total_steps,
                    completed=p.step,
                    info=info,
                    steps=f"step {p.step}/{p.total_steps}",
                )
            else:
                self.progress.update(self.task, info=info)
            return
        now = time.time()
        if p is not None and now - self.last_line >= 5.0:
            self.last_line = now
            print(f"  step {p.step}/{p.total_steps}  {info}", file=sys.stderr, flush=True)

    def _print(self, lines: list[str]) -> None:
        if not lines:
            return
        if self.progress is not None:  # above the bar, which rich redraws below them
            from rich.text import Text

            for line in lines:
                self.progress.console.print(Text.from_ansi(line), soft_wrap=True)
        else:
            sys.stdout.write("".join(line + "\n" for line in lines))
            sys.stdout.flush()

    def _say(self, line: str) -> None:
        """A line of ours (not the script's): above the bar, else on stderr."""
        if self.progress is not None:
            from rich.text import Text

            self.progress.console.print(Text(line, style="bold yellow"), soft_wrap=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.log is not None:  # the rank's last lines, before the summary
            self._print(self.log.lines(final=True))
            self.log.close()
            self.log = None
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class LogTail:
    """The lines a worker's log gains, read as they come (the log may not exist yet). The
    header of a first attempt is left out; a later attempt's says the group restarted."""

    FIRST_ATTEMPT = re.compile(r"=== rank \d+ attempt 1 pid \d+ at .* ===")

    def __init__(self, path: Path):
        self.path, self.rest = path, b""
        self.file: BinaryIO | None = None

    def lines(self, final: bool = False) -> list[str]:
        if self.file is None:
            try:
                self.file = open(self.path, "rb")
            except OSError:
                return []
        head, newline, self.rest = (self.rest + self.file.read()).rpartition(b"\n")
        parts = head.split(b"\n") if newline else []
        if final and self.rest:  # the end of a last line that has no newline
            parts, self.rest = parts + [self.rest], b""
        out = []
        for raw in parts:
            # A line redrawn in place (a tqdm bar) shows its last state.
            line = raw.decode(errors="replace").rsplit("\r", 1)[-1]
            if not self.FIRST_ATTEMPT.fullmatch(line):
                out.append(line)
        return out

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _progress_text(p) -> str:
    epochs = max(1, math.ceil(p.epochs))  # the last report comes after the last epoch
    text = (
        f"epoch {min(int(p.epoch) + 1, epochs)}/{epochs}  loss {_num(p.loss)}  "
        f"{p.samples_per_s:,.0f} samples/s"
    )
    return text + (f"  restarts {p.restarts}" if p.restarts else "")


def _own_metrics(res) -> list[tuple[str, float]]:
    """A task's own test metrics (task.entry's `metrics`), beside loss and accuracy."""
    return [(k, v) for k, v in sorted(res.test_metrics.items()) if k not in ("loss", "accuracy")]


def _num(x: float | None, fmt: str = ".4f") -> str:
    return "-" if x is None else format(x, fmt)


def _summary(status: RunStatus, wall: float, handle) -> None:
    res = status.result
    restarts = max(
        [status.restarts]
        + [r.get("restart", 0) for r in handle.run.worker_records() if isinstance(r.get("restart", 0), int)]
    )
    lines = [f"run {status.run_id}: {status.state}"]
    if res is not None:
        lines.append(f"  final loss      {_num(res.final_loss)}")
        lines.append(f"  test accuracy   {_num(res.test_accuracy)}")
        lines += [f"  test {k:<11} {_num(v)}" for k, v in _own_metrics(res)]
        lines.append(
            f"  throughput      {_num(res.samples_per_s, ',.0f')} samples/s "
            f"({res.steps} steps, global batch {res.global_batch})"
        )
    shown = {"accuracy", "test_loss", *res.test_metrics} if res is not None else set()
    # What the script reported last (report(accuracy=...)), beside the result's own.
    lines += [f"  {k:<15} {_num(v)}" for k, v in sorted(status.metrics.items()) if k not in shown]
    lines.append(f"  wall time       {wall:.1f} s")
    lines.append(f"  restarts        {restarts}")
    lines.append(f"  run directory   {status.run_dir}")
    if status.message:
        lines.append(f"  message         {status.message}")
    from alchemist_jobs.scheduler import CANCELLED, SUCCEEDED

    if status.state not in (SUCCEEDED, CANCELLED):
        tail = failure_lines(handle.run.logs)
        if tail:
            lines.append("  why it failed:")
            lines += ["    " + t for t in tail]
    print("\n".join(lines))


# --- list / status / logs / cancel ----------------------------------------------------------------


def _when(ts: float | None) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"
    except (OverflowError, OSError, ValueError):
        return "?"


def cmd_list(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit {args.limit}: accepted: a number >= 1")
    # Each run's document as the scheduler has it encoded: a local listing of 10,000 ended
    # runs prints the index's text, and decodes only the runs it shows.
    listed = sorted(_scheduler(args).list_json(), key=lambda r: r.created or 0, reverse=True)
    if args.state:
        listed = [r for r in listed if r.state == args.state]
    listed = listed[: args.limit] if args.limit else listed
    if args.json:
        print("[" + ", ".join(r.json_text for r in listed) + "]")
        return 0
    if not listed:
        print(f"no runs on stack {args.stack}" + (f" in state {args.state}" if args.state else ""))
        return 0
    from alchemist_jobs.scheduler import decode_all

    docs = decode_all(r.json_text for r in listed)
    columns = _columns(args.columns, docs)
    rows = [[_cell(c, doc) for c in columns] for doc in docs]
    widths = [max([len(c)] + [len(row[i]) for row in rows]) for i, c in enumerate(columns)]
    for row in [[c.upper() for c in columns]] + rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    return 0


# `list`'s columns: the run's own fields; any other name is a metric the run reported.
LIST_COLUMNS = (
    "run",
    "name",
    "state",
    "algorithm",
    "workers",
    "restarts",
    "step",
    "loss",
    "accuracy",
    "duration",
    "created",
    "ended",
    "reason",
)
DEFAULT_COLUMNS = (
    "run",
    "state",
    "algorithm",
    "workers",
    "step",
    "accuracy",
    "duration",
    "created",
    "reason",
)


def _doc_metrics(doc: dict) -> dict:
    """A run document's metrics (an index entry written before they were kept: from its
    progress and result)."""
    if isinstance(doc.get("metrics"), dict):
        return doc["metrics"]
    from alchemist_jobs.run_files import Progress, Result
    from alchemist_jobs.scheduler import run_metrics

    prog, res = doc.get("progress"), doc.get("result")
    return run_metrics(
        None if prog is None else Progress.lenient(prog), None if res is None else Result.lenient(res)
    )


def _columns(text: str | None, docs: list[dict]) -> list[str]:
    """--columns A,B,...: each a column of LIST_COLUMNS or a metric some listed run has."""
    if text is None:
        return list(DEFAULT_COLUMNS)
    metrics = sorted({k for doc in docs for k in _doc_metrics(doc)} - set(LIST_COLUMNS))
    out = []
    for name in (c.strip().lower() for c in text.split(",")):
        if name not in LIST_COLUMNS and name not in metrics:
            close = difflib.get_close_matches(name, [*LIST_COLUMNS, *metrics], n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            reported = (
                f" or a metric the runs reported ({', '.join(metrics)})"
                if metrics
                else " or a metric the runs reported (none has)"
            )
            raise UserError(
                f"--columns: {name!r} is no column; accepted: {', '.join(LIST_COLUMNS)},{reported}{hint}"
            )
        out.append(name)
    return out


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def _cell(column: str, doc: dict) -> str:
    prog, res = doc.get("progress") or {}, doc.get("result") or {}
    if column == "run":
        return doc["run_id"]
    if column in ("name", "state", "algorithm"):
        return str(doc.get(column) or "-")
    if column in ("workers", "restarts"):
        return str(doc.get(column, 0))
    if column == "step":
        return f"{doc['step']}/{doc['total_steps']}" if doc.get("step") is not None else "-"
    if column == "loss":
        loss = res.get("final_loss", prog.get("loss"))
        return _num(loss) if isinstance(loss, (int, float)) else "-"
    if column == "duration":
        created, ended = doc.get("created"), doc.get("ended")
        return _duration(
            doc.get("duration_s") if ended is None or created is None else max(0.0, ended - created)
        )
    if column in ("created", "ended"):
        return _when(doc.get(column))
    if column == "reason":  # why it failed (or restarts), one line
        text = " ".join(str(doc.get("message") or "").split())
        return text if len(text) <= 80 else text[:79] + "…"
    value = _doc_metrics(doc).get(column)
    return _num(value) if isinstance(value, (int, float)) else "-"


def cmd_status(args: argparse.Namespace) -> int:
    s = _scheduler(args).status(args.run)
    if args.json:
        print(json.dumps(s.as_json(), indent=1))
        return 0
    print(f"run        {s.run_id}\nstack      {s.stack}\nstate      {s.state}")
    if s.algorithm:
        print(f"algorithm  {s.algorithm}")
    counted = (
        ""
        if s.restarts_counted is None or s.restarts_counted == s.restarts
        else f" ({s.restarts_counted} counted towards max_restarts)"
    )
    print(f"workers    {s.workers}\nrestarts   {s.restarts}{counted}")
    if s.step is not None:
        print(f"step       {s.step}/{s.total_steps}")
    if s.progress is not None and s.progress.loss is not None:
        print(f"loss       {_num(s.progress.loss)}\nthroughput {s.progress.samples_per_s:,.0f} samples/s")
    metrics = s.metrics  # the final evaluation's, and what a script reported last
    if "accuracy" in metrics:
        print(f"accuracy   {_num(metrics['accuracy'])}")
    for k, v in sorted(metrics.items()):
        if k not in ("accuracy", "test_loss"):
            print(f"{k:<10} {_num(v)}")
    print(f"created    {_when(s.created)}\nended      {_when(s.ended)}")
    if s.message:
        print(f"message    {s.message}")
    if s.failure and s.failure.get("lines"):
        print("why it failed:")
        print("\n".join("  " + line for line in s.failure["lines"]))
    for p in s.stuck_pods:
        print(
            f"stuck      pod {p['pod']} on node {p['node'] or '?'}: "
            f"{p['overdue_s'] // 60} min past its deletion deadline"
        )
    if s.run_dir:
        print(f"directory  {s.run_dir}")
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


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """`--older-than`: a number with a unit (90s, 30m, 12h, 7d, 2w), in seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text or "")
    if not m:
        raise UserError(
            f"--older-than {text!r}: accepted: a number and a unit, s m h d or w (90s, 30m, 12h, 7d, 2w)"
        )
    return float(m.group(1)) * _AGE_UNITS[m.group(2)]


def cmd_rm(args: argparse.Namespace) -> int:
    age = parse_age(args.older_than) if args.older_than is not None else None
    if not args.runs and args.state is None and age is None:
        raise UserError("rm: nothing named; accepted: run ids, --state STATE or --older-than AGE")
    sched = _scheduler(args)
    if args.runs:
        chosen = [sched.status(ref) for ref in args.runs]  # a bad id fails before any removal
        named = True
    else:
        chosen, named = sched.list(), False
    now = time.time()
    chosen = [
        r
        for r in chosen
        if (args.state is None or r.state == args.state) and (age is None or (r.created or now) < now - age)
    ]
    live = [r for r in chosen if not r.finished]
    if live and not args.force:
        if named:
            raise UserError(
                f"rm {live[0].run_id}: the run is {live[0].state}; accepted: an "
                "ended run, or --force to cancel it first"
            )
        print(
            f"skipping {len(live)} run(s) that have not ended (--force cancels and removes them)",
            file=sys.stderr,
        )
        chosen = [r for r in chosen if r.finished]
    seen: set[str] = set()
    for r in chosen:
        if r.run_id in seen:
            continue
        seen.add(r.run_id)
        if args.dry_run:
            print(f"would remove {r.run_id} ({r.state})")
            continue
        st = sched.remove(r.run_id, force=args.force)
        print(f"removed {r.run_id} ({st.state})")
    if not seen:
        print("no run matched; nothing removed", file=sys.stderr)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    s = _scheduler(args).cancel(args.run)
    print(f"run {s.run_id}: {s.state}")
    return 0
