"""Following a run that lives on its own (a cluster job, a detached local run) from the CLI:
state changes and progress on stderr, a rank's log (rank 0's unless `--rank`) on stdout with
`--follow`. It asks the scheduler interface only (status, progress, logs), so every backend
is followed the same way."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from alchemist_jobs.errors import JobFailed, UserError
from alchemist_jobs.kubernetes.progress import describe
from alchemist_jobs.scheduler import RUNNING, SUCCEEDED, Scheduler

POLL_S = 2.0
PROGRESS_EVERY_S = 10.0  # progress may cost a log read on the cluster: not every poll
LOG_DRAIN_S = 30.0  # how long a finished run's log thread may take to print the rest


def follow(
    scheduler: Scheduler, run_id: str, spec: Any, logs: bool = False, quiet: bool = False, rank: int = 0
) -> int:
    """Watch a run to its end; the exit code of the CLI. Ctrl-C detaches; the run goes on."""
    stack = scheduler.stack
    say = (lambda m: None) if quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    log_thread, log_stop = None, threading.Event()
    if logs:
        log_thread = threading.Thread(
            target=_print_logs, args=(scheduler, run_id, log_stop, rank), daemon=True, name="alchemist-logs"
        )
        log_thread.start()
    last, last_progress, progress, t_progress = "", "", None, 0.0
    epochs = spec.hyper.epochs if not spec.hyper.steps else None
    try:
        while True:
            try:
                st = scheduler.status(run_id)
            except UserError as e:
                if "no such run" not in str(e):
                    raise
                raise JobFailed(f"run {run_id} is gone from stack {stack} (cancelled elsewhere?)") from None
            line = f"  {st.state}" + (f": {st.message}" if st.message else "")
            if line != last:
                say(line)
                last = line
            if st.finished:
                break
            if st.state == RUNNING and time.monotonic() - t_progress >= PROGRESS_EVERY_S:
                t_progress = time.monotonic()
                progress = scheduler.progress(st) or progress
                if progress and describe(progress, epochs) != last_progress:
                    last_progress = describe(progress, epochs)
                    say(f"  {last_progress}")
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        print(
            f"\ndetached: run {run_id} keeps running on stack {stack}; "
            f"`alchemist cancel {run_id} --stack {stack}` stops it",
            file=sys.stderr,
        )
        return 130
    finally:  # the run is over or we detach: the log thread reads what is left and ends
        log_stop.set()
    if log_thread is not None:  # its stream ends with the run: let it print the rest
        log_thread.join(timeout=LOG_DRAIN_S)
    print(f"run {run_id}: {st.state}" + (f" ({last_progress})" if last_progress else ""))
    if st.state == SUCCEEDED:
        return 0
    raise JobFailed(
        f"run {run_id} {st.state}: {st.message}; see `alchemist logs {run_id} --stack {stack} --rank N`"
    )


def _print_logs(scheduler: Scheduler, run_id: str, stop: threading.Event, rank: int) -> None:
    try:
        for line in scheduler.logs(run_id, rank=rank, follow=True, stop=stop):
            sys.stdout.write(line)
            sys.stdout.flush()
    except UserError as e:
        print(f"  logs: {e}", file=sys.stderr)
