"""A worker that cannot run as its pod is configured (no GPU, no NCCL net plugin): one line,
and an exit code that fails a cluster run at once instead of restarting it.

Restarting cannot fix a configuration: the same pod template gets the same node type and
image again. So the worker exits CONFIG_ERROR_EXIT_CODE and appends its line to the file
named by ALCHEMIST_CONFIG_ERROR_FILE, on a cluster the container's termination message
(`/dev/termination-log`, which the kubelet creates world-writable and reports as the
container's `state.terminated.message`). torchrun exits 1 whatever its worker's exit code
was (torch/distributed/run.py `main` re-raises the agent's ChildFailedError), so the pod
script turns "torchrun failed and a worker wrote this file" back into CONFIG_ERROR_EXIT_CODE,
which the worker Job's podFailurePolicy maps to FailJob and JobSet's failurePolicy to
FailJobSet (kubernetes/manifests.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from alchemist_jobs import environment as E

# sysexits.h EX_CONFIG: "something was found in an unconfigured or misconfigured state".
CONFIG_ERROR_EXIT_CODE = 78
# The kubelet keeps at most this much of a termination message (its tail): keep each line
# short enough that eight ranks' lines fit.
MAX_LINE = 500


def fail(message: str, environ: Mapping[str, str] | None = None) -> int:
    """Say `message` on stderr and in the pod's termination message; the exit code to use."""
    env = os.environ if environ is None else environ
    print(f"alchemist: {message}", file=sys.stderr, flush=True)
    path = E.CONFIG_ERROR_FILE.get(env)
    if path:
        line = f"rank {env.get('RANK', '0')}: {message}"[:MAX_LINE]
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as e:  # the exit code still says it; the pod log has the line
            print(f"alchemist: could not write {path}: {e.strerror}", file=sys.stderr, flush=True)
    return CONFIG_ERROR_EXIT_CODE
