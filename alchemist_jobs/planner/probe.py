"""Measure the link between nodes with the traffic training puts on it: timed gloo all-reduces.

    torchrun --nnodes 2 --nproc-per-node 1 ... -m alchemist_jobs.planner.probe --out link.json
    alchemist plan job.yaml --nodes 1,2,4 --link-probe link.json

Each process all-reduces float32 tensors of a few sizes, and the times are fitted to the
plan's ring model, `t(S) = 2 (W-1)/W x S / B + 2 (W-1) x latency`, by least squares: B is the
bandwidth of the very collective training runs, latency every per-message overhead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

from alchemist_jobs import environment as E
from alchemist_jobs.errors import UserError

KIND = "alchemist-link-probe"
DEFAULT_SIZES = (4_096, 65_536, 1_048_576, 4_194_304)  # bytes: latency-bound to link-bound


def ring_volume(nbytes: float, world: int) -> float:
    """Bytes each worker sends in one ring all-reduce of `nbytes`."""
    return 2.0 * (world - 1) / world * nbytes


def fit(world: int, points: list[dict]) -> tuple[float, float]:
    """(bytes per second, seconds per message) from [{bytes, seconds}, ...] by least squares
    on t = volume / B + messages * latency; the latency is not allowed below zero."""
    messages = 2 * (world - 1)
    xs = [ring_volume(p["bytes"], world) for p in points]
    ys = [p["seconds"] for p in points]
    if len(points) < 2 or max(xs) == min(xs):
        raise ValueError("a link probe needs at least two tensor sizes")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    if intercept < 0:  # through the origin: no measurable fixed cost
        slope, intercept = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs), 0.0
    if slope <= 0:
        raise ValueError("the probe's times do not grow with the bytes sent")
    return 1.0 / slope, intercept / messages


def measure(sizes: tuple[int, ...] = DEFAULT_SIZES, repeats: int = 5) -> list[dict]:
    """Median seconds of one all-reduce per size, in this process group (every rank calls)."""
    import torch
    import torch.distributed as dist

    points = []
    for nbytes in sizes:
        t = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
        dist.all_reduce(t)  # untimed: connections and buffers of this size
        times = []
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
        # The slowest rank's view is the collective's: every rank's times, the max per repeat.
        worst = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        points.append(
            dict(bytes=t.numel() * 4, seconds=statistics.median(worst.tolist()), all_s=worst.tolist())
        )
    return points


def result(world: int, points: list[dict], where: str) -> dict:
    rate, latency = fit(world, points)
    return dict(
        kind=KIND,
        world=world,
        where=where,
        time=time.time(),
        points=points,
        link_bytes_per_s=rate,
        latency_s=latency,
    )


def load(path: Path) -> dict:
    """A probe result file, checked; raises ValueError naming what is wrong."""
    from alchemist_jobs.input_files import read_text

    try:  # a regular file of bounded size: never /dev/zero or a FIFO read to the end
        data = json.loads(read_text(Path(path), "link probe result", "it"))
    except UserError as e:
        raise ValueError(str(e).removeprefix("it: ")) from None
    except ValueError as e:
        raise ValueError(f"cannot read it ({e})") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise ValueError(f'not a link probe result (no "kind": "{KIND}")')
    try:
        rate, latency = float(data["link_bytes_per_s"]), float(data["latency_s"])
    except (KeyError, TypeError, ValueError):
        raise ValueError("link_bytes_per_s and latency_s must be numbers") from None
    if rate <= 0 or latency < 0:
        raise ValueError(f"link_bytes_per_s={rate} / latency_s={latency} out of range")
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m alchemist_jobs.planner.probe", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--out", type=Path, required=True, help="rank 0 writes the result here")
    ap.add_argument("--rank", type=int, default=None, help="(outside torchrun) this rank")
    ap.add_argument("--world", type=int, default=None, help="(outside torchrun) processes")
    ap.add_argument("--master", default=None, help="(outside torchrun) HOST:PORT of rank 0's store")
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="bytes")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--where", default=None, help="a label for the result (the target's name)")
    args = ap.parse_args(argv)
    import torch.distributed as dist

    if args.rank is None:  # torchrun's environment
        dist.init_process_group("gloo")
    else:
        host, port = args.master.rsplit(":", 1)
        import torch.distributed as tdist

        store = tdist.TCPStore(
            host, int(port), args.world, is_master=args.rank == 0, timeout=timedelta(seconds=120)
        )
        dist.init_process_group("gloo", store=store, rank=args.rank, world_size=args.world)
    try:
        world, rank = dist.get_world_size(), dist.get_rank()
        if world < 2:
            raise SystemExit("a link probe needs at least two processes, one per node")
        points = measure(tuple(int(s) for s in args.sizes.split(",")), args.repeats)
        if rank == 0:
            where = args.where or E.NODE.get() or "this target"
            out = result(world, points, where)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=2) + "\n")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
