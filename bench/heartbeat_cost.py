"""What a worker's heartbeat (runtime/liveness.py) costs: the CPU time of one heartbeat write,
timed over many, as a share of the HEARTBEAT_S between two; and what one reading of every
rank's heartbeat costs the watchdog (only past its limit) for a world of --world ranks.

    python bench/heartbeat_cost.py [--writes 2000] [--world 64] [--dir DIR]

--dir: where the files go (default a temporary directory; point it at a shared file system
to measure there).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alchemist_jobs.runtime.liveness import HEARTBEAT_S, Liveness  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--world", type=int, default=64)
    ap.add_argument("--dir", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        ranks = [Liveness(Path(d), r, a.world) for r in range(a.world)]
        for r in ranks:
            r.write()
        me = ranks[0]
        cpu0 = time.process_time()
        for _ in range(a.writes):
            me.write()
        write_s = (time.process_time() - cpu0) / a.writes
        cpu0 = time.process_time()
        for _ in range(20):
            me.read()
        read_s = (time.process_time() - cpu0) / 20
    print(f"one heartbeat write: {write_s * 1e6:.0f} us of CPU; one every {HEARTBEAT_S:g} s "
          f"is {write_s / HEARTBEAT_S:.5%} of one CPU")
    print(f"one reading of {a.world} ranks' heartbeats: {read_s * 1e3:.2f} ms of CPU")


if __name__ == "__main__":
    main()
