"""Fault injection for drills and tests: documented knobs that make a healthy run misbehave.

    ALCHEMIST_FAULT_STALL_AT_STEP=N     after optimizer step N, one rank stops making progress
    ALCHEMIST_FAULT_STALL_SECONDS=S     ... for S seconds (default: until the run is stopped)
    ALCHEMIST_FAULT_STALL_RANK=R        ... on rank R (default 0); the others then wait for it
                                        in their next collective, as behind a hung worker
    ALCHEMIST_FAULT_HOLD_FILE=PATH      after step 1, every rank waits until PATH exists (a
                                        test lets the job go once monitoring has seen it)

The stalled rank keeps serving its metrics, so monitoring sees a live worker that no longer
steps: what the `AlchemistJobStalled` alert is for (docs/monitoring.md). Set them in a spec's
`env:` (or `--set env.ALCHEMIST_FAULT_STALL_AT_STEP=200`).
"""

from __future__ import annotations

import os
import time


class Faults:
    def __init__(self, rank: int, environ: dict[str, str] | None = None):
        env = os.environ if environ is None else environ
        at = env.get("ALCHEMIST_FAULT_STALL_AT_STEP")
        self.stall_at = int(at) if at else None
        secs = env.get("ALCHEMIST_FAULT_STALL_SECONDS")
        self.stall_s = float(secs) if secs else None
        self.active = self.stall_at is not None and rank == int(env.get("ALCHEMIST_FAULT_STALL_RANK", 0))
        self.hold_file = env.get("ALCHEMIST_FAULT_HOLD_FILE")

    def after_step(self, step: int) -> None:
        if self.hold_file and step == 1:
            print(f"alchemist: fault injection: holding until {self.hold_file} exists", flush=True)
            while not os.path.exists(self.hold_file):
                time.sleep(0.2)
        if not self.active or step != self.stall_at:
            return
        print(f"alchemist: fault injection: stalling after step {step} "
              f"for {'ever' if self.stall_s is None else f'{self.stall_s:g} s'}", flush=True)
        deadline = None if self.stall_s is None else time.monotonic() + self.stall_s
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2 if deadline is None else min(0.2, max(0.0, deadline - time.monotonic())))
