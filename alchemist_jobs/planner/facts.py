"""Where `alchemist plan` takes the target's facts from: flags, the stack output, past runs.

Precedence, each choice said in the plan's assumptions: a `--link` flag; else the stack's EFA
devices (100 Gbit/s each, AWS's figure for p4d/p5 EFA interfaces); else the communication
bandwidth measured by past runs of the same job on this stack (bytes and seconds that every
worker records in result.json, the same figures the metric contract exports); else the plan
refuses, naming the flag, rather than guess a link.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from alchemist_jobs.errors import UserError
from alchemist_jobs.planner.model import Cluster

_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(k|m|g)bit\s*$", re.IGNORECASE)
_UNIT = {"k": 1e3, "m": 1e6, "g": 1e9}
EFA_GBIT_PER_DEVICE = 100.0  # AWS: p4d.24xlarge 4 x 100 Gbit/s, p5.48xlarge 32 x 100 Gbit/s
# Payload per wire byte of TCP/IPv4 over Ethernet at MTU 1500: 1448 bytes of data in a frame of
# 1538 (header 66 + preamble/gap 24). A nominal link rate delivers this share as data.
LINK_EFFICIENCY = 1448 / 1538


def parse_rate(text: str, flag: str = "--link") -> float:
    """'100mbit' / '25gbit' -> bytes per second."""
    m = _RATE.match(text or "")
    if not m or float(m.group(1)) <= 0:
        raise UserError(f"{flag} {text!r}: expected a positive rate like 100mbit, 400mbit or 25gbit")
    return float(m.group(1)) * _UNIT[m.group(2).lower()] / 8.0


def parse_nodes(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]; every count a whole number from 1 to 4096."""
    counts: list[int] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part.isdigit() or not 1 <= int(part) <= 4096:
            raise UserError(f"--nodes {text!r}: {part!r} is not a node count; expected whole "
                            "numbers from 1 to 4096 separated by commas, e.g. 1,2,4,8")
        counts.append(int(part))
    return sorted(set(counts))


def measured_bandwidth(runs_root: Path, job_name: str) -> tuple[float, str] | None:
    """Bytes/s that past multi-worker runs of this job achieved while communicating."""
    best: tuple[float, str] | None = None
    if not runs_root.is_dir():
        return None
    for result_file in sorted(runs_root.glob(f"{job_name}-*/result.json")):
        try:
            result: dict[str, Any] = json.loads(result_file.read_text())
            comm = result["communication"]
            sent, seconds = float(comm["sent_bytes"]), float(comm["seconds"])
            world = int(result["world_size"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # an unreadable or older record is not evidence
        if world > 1 and seconds > 0 and sent > 0 and result.get("algorithm") == "sync":
            best = (sent / seconds, result_file.parent.name)
    return best


def cluster_facts(*, workers_per_node: int, link: str | None, latency_us: float,
                  stack: Any | None, runs_root: Path | None, job_name: str,
                  compute_scale: float = 1.0) -> Cluster:
    """The Cluster for the model, with every assumption it rests on spelled out."""
    notes = [f"{workers_per_node} worker(s) per node",
             "ring all-reduce: 2(W-1)/W of the model per worker per exchange, 2(W-1) messages",
             f"{latency_us:g} us per message between nodes",
             "sync overlaps communication with backward except the last DDP bucket (25%)"]
    if compute_scale != 1.0:
        notes.append(f"compute {compute_scale:g}x slower than profiled (emulated nodes share "
                     "this machine's processors)")
    nominal = (f"; {LINK_EFFICIENCY:.0%} of a nominal rate carries data (TCP/IP headers at "
               "MTU 1500)")
    if link is not None:
        rate = parse_rate(link) * LINK_EFFICIENCY
        notes.append(f"each node sends at {link} (--link){nominal}")
    elif stack is not None and getattr(stack.gpu, "efa", None) is not None:
        gbit = stack.gpu.efa.per_node * EFA_GBIT_PER_DEVICE
        rate = gbit * 1e9 / 8 * LINK_EFFICIENCY
        notes.append(f"each node sends at {gbit:g} Gbit/s: {stack.gpu.efa.per_node} EFA "
                     f"device(s) of {EFA_GBIT_PER_DEVICE:g} Gbit/s (stack {stack.stack}){nominal}")
    else:
        measured = measured_bandwidth(runs_root, job_name) if runs_root else None
        if measured is None:
            where = (f"stack {stack.stack} exports no EFA devices" if stack
                     else f"no past multi-worker sync run of {job_name!r} measured one")
            raise UserError(f"--link: the link between nodes is unknown ({where}); give it, "
                            "e.g. --link 25gbit")
        rate, run_id = measured
        notes.append(f"each node sends at {rate * 8 / 1e6:,.0f} Mbit/s, measured by past run "
                     f"{run_id} (communication bytes / communication seconds)")
    return Cluster(workers_per_node=workers_per_node, link_bytes_per_s=rate,
                   latency_s=latency_us * 1e-6, compute_scale=compute_scale,
                   assumptions=tuple(notes))
