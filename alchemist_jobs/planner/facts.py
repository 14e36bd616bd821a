"""Where `alchemist plan` takes the target's facts from: flags, a link probe, the stack output,
past runs.

Precedence, each choice said in the plan's assumptions: a `--link` flag (a nominal rate, of
which TCP/IP headers leave 94% for data); else a `--link-probe` result (timed gloo
all-reduces between nodes of the target, planner/probe.py: bandwidth and per-message
latency as the collective gets them, used as measured); else the stack's network fabric
(its devices per node at the nominal rate its provider gives, `gpu.fabric`); else the communication bandwidth
measured by past runs of the same job on this stack (bytes and seconds that every worker
records in result.json, the same figures the metric contract exports; a local run's loopback
is no link between nodes and is refused as one); else the plan refuses, naming the flag,
rather than guess a link.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from alchemist_jobs.errors import UserError
from alchemist_jobs.planner import probe
from alchemist_jobs.planner import probe as probe_mod
from alchemist_jobs.planner.model import Cluster
from alchemist_jobs.rundir import read_json
from alchemist_jobs.stack_kinds import kind_of

_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(k|m|g)bit\s*$", re.IGNORECASE)
_UNIT = {"k": 1e3, "m": 1e6, "g": 1e9}
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
            raise UserError(
                f"--nodes {text!r}: {part!r} is not a node count; expected whole "
                "numbers from 1 to 4096 separated by commas, e.g. 1,2,4,8"
            )
        counts.append(int(part))
    return sorted(set(counts))


def measured_bandwidth(runs_root: Path, job_name: str, loopback: bool = False) -> tuple[float, str] | None:
    """Bytes/s that past multi-worker runs of this job achieved while communicating (over
    all the time communication was in flight, exposed or overlapped). A run of the local
    stack measured loopback within this machine, no link between nodes: such runs count
    only with `loopback` (to say that they are all there is)."""
    best: tuple[float, str] | None = None
    if not runs_root.is_dir():
        return None
    for result_file in sorted(runs_root.glob(f"{job_name}-*/result.json")):
        try:
            result: dict[str, Any] = json.loads(result_file.read_text())
            comm = result["communication"]
            # in flight = waited for + hidden behind backward (the link was busy for both)
            sent = float(comm["sent_bytes"])
            seconds = float(comm["seconds"]) + float(comm.get("overlapped_seconds", 0.0))
            world = int(result["world_size"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # an unreadable or older record is not evidence
        stack = (read_json(result_file.parent / "run.json") or {}).get("stack")
        local = isinstance(stack, str) and kind_of(stack).runs_here
        if world > 1 and seconds > 0 and sent > 0 and result.get("algorithm") == "sync" and local == loopback:
            best = (sent / seconds, result_file.parent.name)
    return best


def link_probe(path: Path) -> tuple[float, float, str]:
    """(bytes/s, seconds per message, a description) from a link probe's result file."""
    try:
        data = probe.load(path)
    except ValueError as e:
        raise UserError(f"--link-probe {str(path)!r}: {e}") from None
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(data.get("time", 0))))
    sizes = [int(p["bytes"]) for p in data.get("points", []) if "bytes" in p] or [0]
    return (
        data["link_bytes_per_s"],
        data["latency_s"],
        f"measured by the link probe {Path(path).name} ({data.get('world', '?')} processes on "
        f"{data.get('where', 'the target')}, {when}: gloo all-reduces of "
        f"{min(sizes) / 1e3:.0f} kB to {max(sizes) / 1e6:.1f} MB)",
    )


def cluster_facts(
    *,
    workers_per_node: int,
    link: str | None,
    latency_us: float,
    stack: Any | None,
    runs_root: Path | None,
    job_name: str,
    compute_scale: float = 1.0,
    probe: Path | None = None,
) -> Cluster:
    """The Cluster for the model, with every assumption it rests on spelled out."""
    notes = [
        f"{workers_per_node} worker(s) per node",
        "ring all-reduce: 2(W-1)/W of the model per worker per exchange, in 2(W-1) steps",
        "sync: DDP all-reduces each bucket once backward has made all its gradients, "
        "one bucket after another; the optimizer waits for the last",
    ]
    if compute_scale != 1.0:
        notes.append(f"compute {compute_scale:g}x slower than profiled")
    nominal = f"; {LINK_EFFICIENCY:.0%} of a nominal rate carries data (TCP/IP headers at MTU 1500)"
    if link is not None and probe is not None:
        raise UserError("--link and --link-probe both give the link: keep one")
    latency = latency_us * 1e-6
    if probe is not None:
        rate, latency, said = link_probe(probe)
        notes.append(
            f"each node sends at {rate * 8 / 1e6:,.1f} Mbit/s with {latency * 1e6:,.0f} us "
            f"per message, {said}"
        )
    elif link is not None:
        rate = parse_rate(link) * LINK_EFFICIENCY
        notes.append(f"each node sends at {link} (--link){nominal}")
    elif stack is not None and (fabric := getattr(stack.gpu, "fabric", None)) is not None:
        gbit = fabric.per_node * fabric.gbit_per_device
        rate = gbit * 1e9 / 8 * LINK_EFFICIENCY
        notes.append(
            f"each node sends at {gbit:g} Gbit/s: {fabric.per_node} {fabric.name} "
            f"device(s) of {fabric.gbit_per_device:g} Gbit/s (stack {stack.stack}){nominal}"
        )
    else:
        measured = measured_bandwidth(runs_root, job_name) if runs_root else None
        if measured is None and runs_root:
            local = measured_bandwidth(runs_root, job_name, loopback=True)
            if local is not None:
                raise UserError(
                    f"--link: the only measured link is past run {local[1]} of the local stack, "
                    f"{local[0] * 8 / 1e6:,.0f} Mbit/s over loopback within this machine, not "
                    "between nodes; give the link, e.g. --link 25gbit, or --link-probe FILE"
                )
        if measured is None:
            where = (
                f"stack {stack.stack} exports no network fabric"
                if stack
                else f"no past multi-worker sync run of {job_name!r} measured one"
            )
            raise UserError(
                f"--link: the link between nodes is unknown ({where}); give it, e.g. --link 25gbit"
            )
        rate, run_id = measured
        notes.append(
            f"each node sends at {rate * 8 / 1e6:,.0f} Mbit/s, measured by past run "
            f"{run_id} (communication bytes / communication seconds)"
        )
    if probe is None:
        notes.insert(2, f"{latency_us:g} us per message between nodes")
    return Cluster(
        workers_per_node=workers_per_node,
        link_bytes_per_s=rate,
        latency_s=latency,
        compute_scale=compute_scale,
        assumptions=tuple(notes),
    )


def probed_clusters(probes: list[Path], **facts: Any) -> tuple[dict[int, Cluster], list[str]]:
    """One Cluster per link probe, keyed by the probe's process count (one per node), and
    their assumptions merged. Each node count takes the probe of the nearest count: on emulated
    nodes the network stacks share this machine's processors, so the link depends on how many
    nodes send at once; on a real cluster one two-node probe serves every count."""
    clusters: dict[int, Cluster] = {}
    for path in probes:
        try:
            world = int(probe_mod.load(path).get("world", 2))
        except (ValueError, TypeError) as e:
            raise UserError(f"--link-probe {str(path)!r}: {e}") from None
        if world in clusters:
            raise UserError(
                f"--link-probe {str(path)!r}: a second probe of {world} processes; give one per process count"
            )
        clusters[world] = cluster_facts(probe=path, **facts)
    notes = list(dict.fromkeys(a for c in clusters.values() for a in c.assumptions))
    notes.append(
        f"each node count takes the link probe of the nearest process count "
        f"({', '.join(map(str, sorted(clusters)))})"
    )
    return clusters, notes
