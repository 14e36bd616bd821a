"""The torchrun agent as the local stack starts it: `python -m torch.distributed.run`, with
its rendezvous and its workers' stores kept where the run allows (alchemist_jobs/store_bind.py).

    python -m alchemist_jobs.agent TORCHRUN-ARGS...
"""

from __future__ import annotations

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

    def close_and_continue(self, death_sig=None):
        close(self, death_sig)
        try:
            os.killpg(self.proc.pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass

    close_and_continue._alchemist = True  # type: ignore[attr-defined]
    sh.SubprocessHandler.close = close_and_continue


def main(args: list[str]) -> None:
    store_bind.apply()
    continue_stopped_workers()
    import torch.distributed.run as torchrun

    sys.argv = ["torch.distributed.run", *args]
    torchrun.main()


if __name__ == "__main__":
    main(sys.argv[1:])
