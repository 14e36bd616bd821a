"""The torchrun agent as the local stack starts it: `python -m torch.distributed.run`, with
its rendezvous store listening only where the run allows (alchemist_jobs/store_bind.py).

    python -m alchemist_jobs.agent TORCHRUN-ARGS...
"""

from __future__ import annotations

import os
import sys


RDZV_PORT_WAIT_S = 300.0  # node 0's agent binds within seconds; it has to import torch first


def main(args: list[str]) -> None:
    from alchemist_jobs import store_bind

    wait_for = os.environ.pop(store_bind.RDZV_PORT_IN, None)
    if wait_for:  # a later node: node 0's agent publishes the port its store got
        port = store_bind.read_port(wait_for, RDZV_PORT_WAIT_S)
        if port is None:
            sys.exit(f"alchemist agent: node 0 published no rendezvous port in {wait_for} "
                     f"within {RDZV_PORT_WAIT_S:.0f} s")
        args = [f"{a.rsplit(':', 1)[0]}:{port}" if a.startswith("--rdzv-endpoint=") else a
                for a in args]
    store_bind.apply()
    import torch.distributed.run as torchrun

    sys.argv = ["torch.distributed.run", *args]
    torchrun.main()


if __name__ == "__main__":
    main(sys.argv[1:])
