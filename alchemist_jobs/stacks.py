"""Stack resolution: a stack name becomes the scheduler that runs jobs there.

`local` is built in and needs nothing but Python. Every other stack is a Pulumi stack whose
output `alchemist` (alchemist_jobs/contract.py) describes its cluster.
"""

from __future__ import annotations

from pathlib import Path

from alchemist_jobs.errors import UserError
from alchemist_jobs.rundir import default_root
from alchemist_jobs.scheduler import Scheduler

LOCAL = "local"


def get_scheduler(stack: str = LOCAL, home: Path | None = None,
                  outputs: Path | None = None) -> Scheduler:
    """The scheduler for `--stack`; `home` is the local shared-file-system root."""
    if stack == LOCAL:
        if outputs is not None:
            raise UserError("--outputs: the local stack has no stack outputs; drop --outputs "
                            "or name a cluster stack with --stack")
        from alchemist_jobs.local_backend import LocalScheduler

        return LocalScheduler(Path(home) if home else default_root())
    raise UserError(
        f"--stack {stack!r}: no such stack; accepted: local (cluster stacks need the "
        "Kubernetes backend, which this build does not include yet)"
    )
