"""The scaling model behind `alchemist plan`: step time, throughput and speed-up per node count.

Pure arithmetic over a `Profile` (one worker's measured cost), a `Cluster` (the target's
shape and links) and an `Algorithm` (its exchange pattern, from spec.py). Communication is a
ring all-reduce: `2 (W-1)/W * S / B_link + 2 (W-1) * latency` across nodes. `sync` hides each
bucket's all-reduce behind the backward still to run (`sync_exposed_s`); `bmuf`/`easgd` add
their exchange once every `tau` steps, or with `overlap` only what outlasts the next block.
docs/plan.md states the assumptions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from alchemist_jobs.spec import ALGORITHMS, GRADIENTS, MODEL

MIB = 1 << 20
DDP_BUCKET_BYTES = 25 * MIB  # DDP's bucket_cap_mb default, and the spec's algorithm.bucket_mb


@dataclass(frozen=True)
class Profile:
    """One worker's measured cost at the spec's per-worker batch."""

    forward_s: float  # fetching the batch, forward pass and loss, per step
    backward_s: float  # backward pass, per step
    exchange_bytes: int  # one copy of the exchanged tensors (all parameters)
    batch_per_worker: int
    source: str = "profiled"  # where the numbers came from, said in the plan's output
    optimizer_s: float = 0.0  # the optimizer step (after the gradients are all-reduced)
    # sync: DDP's buckets in the order they are all-reduced, as (bytes, when the bucket's last
    # gradient is ready, as a fraction of backward). Empty: `uniform_buckets` of 25 MiB.
    buckets: tuple[tuple[int, float], ...] = ()
    exchange_local_s: float = 0.0  # bmuf/easgd: one exchange's arithmetic on this worker

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s


@dataclass(frozen=True)
class Cluster:
    """The target's shape and links."""

    workers_per_node: int
    link_bytes_per_s: float  # what one node can send to the others (NIC, network fabric, or a tc limit)
    latency_s: float = 50e-6  # one message between nodes
    node_bytes_per_s: float = 100e9  # between workers of one node (NVLink-class default)
    compute_scale: float = 1.0  # >1: compute slower than the profile measured it
    assumptions: tuple[str, ...] = field(default_factory=tuple)


# The exchange patterns this model knows (spec.py: what an algorithm says of its exchange).
PATTERNS = (GRADIENTS, MODEL)


@dataclass(frozen=True)
class Algorithm:
    name: str  # sync, bmuf or easgd
    tau: int = 1  # steps between exchanges (bmuf, easgd)
    overlap: bool = False  # bmuf/easgd: the all-reduce runs behind the next block
    exchange: str = ""  # the algorithm's exchange pattern; "": asked of the algorithm

    def __post_init__(self) -> None:
        if not self.exchange and self.name in ALGORITHMS:
            object.__setattr__(self, "exchange", ALGORITHMS[self.name](name=self.name).exchange)


@dataclass(frozen=True)
class Point:
    """The prediction for one node count and algorithm."""

    algorithm: str
    nodes: int
    workers: int
    compute_s: float
    communication_s: float  # per step, amortised over tau, before overlap
    step_s: float
    samples_per_s: float
    speedup: float  # throughput against the same algorithm's 1-node throughput
    efficiency: float  # speedup / nodes
    # per step: what the step waits for, step_s - compute_s; the figure a run reports as
    # alchemist_communication_seconds_total (the rest of communication_s hides behind compute)
    exposed_s: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def ddp_buckets(
    grads: list[tuple[int, float]], cap_bytes: int, first_cap_bytes: int | None = None
) -> tuple[tuple[int, float], ...]:
    """DDP's buckets from the gradients in the order backward produces them, given as
    (bytes, ready fraction of backward): returns (bytes, ready fraction) per bucket.

    DDP's rule (torch's compute_bucket_assignment_by_size, used when it rebuilds its buckets
    in gradient-ready order after the first step): add gradients to the open bucket; close it
    once it holds at least its limit, the first bucket's limit being `first_cap_bytes` (1 MiB
    when DDP is built without bucket_cap_mb, else the cap itself; the sync strategy always
    passes bucket_cap_mb) and every later one `cap_bytes`. A bucket is ready when its last
    gradient is."""
    limit = first_cap_bytes if first_cap_bytes is not None else cap_bytes
    out: list[tuple[int, float]] = []
    size, ready = 0, 0.0
    for nbytes, at in grads:
        size, ready = size + nbytes, max(ready, at)
        if size >= limit:
            out.append((size, ready))
            size, ready, limit = 0, 0.0, cap_bytes
    if size:
        out.append((size, ready))
    return tuple(out)


def uniform_buckets(total_bytes: int, cap_bytes: int = DDP_BUCKET_BYTES) -> tuple[tuple[int, float], ...]:
    """Buckets of `cap_bytes` when nothing is known of the layers: gradients assumed to come
    out of backward at an even rate, so a bucket is ready at the share of bytes done."""
    out, done = [], 0
    while done < total_bytes:
        size = min(cap_bytes, total_bytes - done)
        done += size
        out.append((size, done / total_bytes))
    return tuple(out)


def allreduce_s(nbytes: float, nodes: int, cluster: Cluster) -> float:
    """Seconds of one ring all-reduce of `nbytes` over `nodes` nodes of the cluster."""
    workers = nodes * cluster.workers_per_node
    if workers <= 1:
        return 0.0
    volume = 2.0 * (workers - 1) / workers * nbytes
    if nodes == 1:  # the whole ring stays inside the node
        return volume / cluster.node_bytes_per_s
    # The ring crosses the node boundary: every node's link carries the volume, and each of
    # the 2 (W-1) steps pays the latency once.
    return volume / cluster.link_bytes_per_s + 2 * (workers - 1) * cluster.latency_s


def sync_exposed_s(
    buckets: tuple[tuple[int, float], ...], backward_s: float, nodes: int, cluster: Cluster
) -> tuple[float, float]:
    """(all-reduce seconds of every bucket, the part of them that outlasts backward).

    Bucket i starts when it is ready and the link is done with bucket i-1; the optimizer waits
    for the last one. What finishes before backward would have is hidden."""
    end = total = 0.0
    for nbytes, ready in buckets:
        t = allreduce_s(nbytes, nodes, cluster)
        end = max(end, ready * backward_s) + t
        total += t
    return total, max(0.0, end - backward_s)


def step_s(profile: Profile, algo: Algorithm, nodes: int, cluster: Cluster) -> tuple[float, float, float]:
    """(compute, communication per step, step time) for one worker."""
    scale = cluster.compute_scale
    compute = profile.compute_s * scale
    if algo.exchange == GRADIENTS:
        buckets = profile.buckets or uniform_buckets(profile.exchange_bytes)
        comm, exposed = sync_exposed_s(buckets, profile.backward_s * scale, nodes, cluster)
        return compute, comm, compute + exposed
    if algo.exchange == MODEL:
        tau = max(algo.tau, 1)
        t = allreduce_s(profile.exchange_bytes, nodes, cluster)
        local = profile.exchange_local_s * scale if nodes * cluster.workers_per_node > 1 else 0.0
        waited = max(0.0, t - tau * compute) if algo.overlap else t
        return compute, (t + local) / tau, compute + (waited + local) / tau
    raise ValueError(
        f"no scaling model for algorithm {algo.name!r} (its exchange: "
        f"{algo.exchange or 'unknown'}; modelled: {', '.join(PATTERNS)})"
    )


# `--tau auto`: the fewest local steps per exchange (the closest to sync, the least drift)
# at which the step waits for communication at most this share of its compute.
AUTO_TAU_EXPOSED = 0.10
AUTO_TAU_MAX = 256


def choose_tau(profile: Profile, algo: Algorithm, nodes: int, cluster: Cluster) -> int:
    """The smallest tau (up to AUTO_TAU_MAX) whose step waits at most AUTO_TAU_EXPOSED of its
    compute at `nodes` nodes; AUTO_TAU_MAX if none does."""
    for tau in range(1, AUTO_TAU_MAX + 1):
        compute, _, step = step_s(profile, replace(algo, tau=tau), nodes, cluster)
        if step - compute <= AUTO_TAU_EXPOSED * compute:
            return tau
    return AUTO_TAU_MAX


def nearest(by_nodes: dict[int, Profile | Cluster], n: int):
    """The entry for `n` nodes, else the one measured at the nearest node count (the smaller
    on a tie)."""
    return by_nodes[n] if n in by_nodes else by_nodes[min(by_nodes, key=lambda k: (abs(k - n), k))]


def predict(
    profile: Profile | dict[int, Profile],
    algos: list[Algorithm],
    node_counts: list[int],
    cluster: Cluster | dict[int, Cluster],
) -> list[Point]:
    """Every (algorithm, node count) point; speed-up is against the same algorithm on 1 node.

    Either fact may differ per node count ({nodes: ...}, the nearest count's used): on emulated
    nodes that share one machine, compute at n nodes is measured with n nodes' workers
    computing at once, and the link with n nodes' network stacks sending at once."""

    def at(facts, n):
        return nearest(facts, n) if isinstance(facts, dict) else facts

    points: list[Point] = []
    for algo in algos:
        _, _, base_step = step_s(at(profile, 1), algo, 1, at(cluster, 1))
        c1 = at(cluster, 1)
        base = c1.workers_per_node * at(profile, 1).batch_per_worker / base_step
        for n in node_counts:
            p, c = at(profile, n), at(cluster, n)
            compute, comm, step = step_s(p, algo, n, c)
            workers = n * c.workers_per_node
            rate = workers * p.batch_per_worker / step
            points.append(
                Point(
                    algorithm=algo.name,
                    nodes=n,
                    workers=workers,
                    compute_s=compute,
                    communication_s=comm,
                    step_s=step,
                    samples_per_s=rate,
                    speedup=rate / base,
                    efficiency=rate / base / n,
                    exposed_s=max(0.0, step - compute),
                )
            )
    return points


# bmuf and easgd trade some accuracy for fewer exchanges (the paper, and docs/paradigms.md):
# the plan picks one only where it is clearly faster than sync.
PREFER_SYNC_WITHIN = 0.05


def best_by_nodes(points: list[Point]) -> dict[int, str]:
    """At each node count: sync, unless another algorithm is more than 5% faster (then the
    fastest)."""
    choice: dict[int, str] = {}
    for n in sorted({p.nodes for p in points}):
        here = [p for p in points if p.nodes == n]
        fastest = max(here, key=lambda p: p.samples_per_s)
        sync = next((p for p in here if p.algorithm == "sync"), None)
        keep_sync = sync is not None and fastest.samples_per_s <= sync.samples_per_s * (
            1 + PREFER_SYNC_WITHIN
        )
        choice[n] = "sync" if keep_sync else fastest.algorithm
    return choice
