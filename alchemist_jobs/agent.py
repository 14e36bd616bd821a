"""The torchrun agent as the local stack starts it: `python -m torch.distributed.run`, with
its rendezvous and its workers' stores kept where the run allows (alchemist_jobs/store_bind.py).

    python -m alchemist_jobs.agent TORCHRUN-ARGS...
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from alchemist_jobs import store_bind


def continue_stopped_workers() -> None:
    """torchrun stops a worker with SIGTERM to its process group and SIGKILLs it only after
    its close timeout (30 s): a SIGSTOPped worker (the rank a stall watchdog names) acts on
    the SIGTERM only once continued, so it lived out the whole timeout. SIGCONT follows."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler as sh

    close = sh.SubprocessHandler.close
    if getattr(close, "_alchemist", False):
        return

    def close_and_continue(self: sh.SubprocessHandler, death_sig: signal.Signals | None = None) -> None:
        close(self, death_sig)
        try:
            os.killpg(self.proc.pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass

    close_and_continue._alchemist = True  # type: ignore[attr-defined]
    # torch's class, patched in this agent process on purpose (setattr: not a method of ours).
    setattr(sh.SubprocessHandler, "close", close_and_continue)  # noqa: B010


def cheap_rendezvous_event_names() -> None:
    """torch's dynamic rendezvous names each event it records after the calling method,
    through `get_method_name()`: two `inspect.stack()` calls, each reading the source of every
    frame and searching sys.modules (thousands of torch modules) for it, evaluated even when
    no handler takes the event (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py,
    torch 2.13). About 9 of them before the first worker starts: 0.2-0.5 s of the agent's
    start on a loaded 2-core machine. The frame's own code name is the same name."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    def get_method_name(depth: int = 2) -> str:
        try:
            return sys._getframe(depth).f_code.co_name  # inspect.stack()[depth].function
        except ValueError:
            return "no_method_name"

    dynamic_rendezvous.get_method_name = get_method_name


def main(args: list[str]) -> None:
    store_bind.apply()
    continue_stopped_workers()
    cheap_rendezvous_event_names()
    import torch.distributed.run as torchrun

    sys.argv = ["torch.distributed.run", *args]
    torchrun.main()  # a failed group raises (ChildFailedError): exit 1 as torchrun's own
    # Done, every worker ended: skip the interpreter's teardown, which with torch loaded took
    # 0.7-0.9 s on a loaded 2-core machine, after the job itself was over.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
