"""The torchrun agent as the local stack starts it: `python -m torch.distributed.run`, with
its rendezvous and its workers' stores kept where the run allows (alchemist_jobs/store_bind.py).

    python -m alchemist_jobs.agent TORCHRUN-ARGS...
"""

from __future__ import annotations

import sys

from alchemist_jobs import store_bind


def main(args: list[str]) -> None:
    store_bind.apply()
    import torch.distributed.run as torchrun

    sys.argv = ["torch.distributed.run", *args]
    torchrun.main()


if __name__ == "__main__":
    main(sys.argv[1:])
