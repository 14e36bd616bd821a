"""The scaling model behind `alchemist plan`: step time, throughput and speed-up per node count.

Pure arithmetic over three sets of facts, each assumption named where it is used:

- `Profile`: what one worker costs, measured on the cheap target (seconds of forward and of
  backward+optimizer per step at the spec's per-worker batch, and the bytes one exchange of the
  model moves: every parameter, at the precision it is exchanged in).
- `Cluster`: the target's shape and links: workers per node, the bandwidth of the link each
  node sends on and the per-message latency between nodes, the bandwidth between workers of one
  node, and how much slower compute is when workers share processors (1 on a real cluster).
- `Algorithm`: `sync` all-reduces gradients every step; `bmuf` and `easgd` all-reduce the
  model (or its block delta) once every `tau` steps.

Communication is a ring all-reduce (NCCL's and gloo's default for large tensors): each of the
`W` workers sends `2 (W-1)/W * S` bytes in `2 (W-1)` messages. Across nodes, every node's link
carries that volume, so the inter-node time is `2 (W-1)/W * S / B_link + 2 (W-1) * latency`;
inside one node the node-local bandwidth counts instead. `sync` overlaps the all-reduce with the
backward pass (DDP buckets): only the part of communication that outlasts backward adds to the
step, and at least the last bucket (`last_bucket_fraction` of the bytes) cannot overlap.
`bmuf`/`easgd` block at the exchange, so their whole exchange adds, spread over `tau` steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Profile:
    """One worker's measured cost at the spec's per-worker batch."""

    forward_s: float  # forward pass + loss, per step
    backward_s: float  # backward pass + optimizer step, per step
    exchange_bytes: int  # one copy of the exchanged tensors (all parameters)
    batch_per_worker: int
    source: str = "profiled"  # where the numbers came from, said in the plan's output

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s


@dataclass(frozen=True)
class Cluster:
    """The target's shape and links."""

    workers_per_node: int
    link_bytes_per_s: float  # what one node can send to the others (NIC, EFA, or a tc limit)
    latency_s: float = 50e-6  # one message between nodes
    node_bytes_per_s: float = 100e9  # between workers of one node (NVLink-class default)
    compute_scale: float = 1.0  # >1 when the emulated nodes share this machine's processors
    last_bucket_fraction: float = 0.25  # DDP's last bucket: sync traffic that cannot overlap
    assumptions: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Algorithm:
    name: str  # sync, bmuf or easgd
    tau: int = 1  # steps between exchanges (bmuf, easgd)


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

    def as_dict(self) -> dict:
        return asdict(self)


def allreduce_s(nbytes: float, nodes: int, cluster: Cluster) -> float:
    """Seconds of one ring all-reduce of `nbytes` over `nodes` nodes of the cluster."""
    workers = nodes * cluster.workers_per_node
    if workers <= 1:
        return 0.0
    volume = 2.0 * (workers - 1) / workers * nbytes
    if nodes == 1:  # the whole ring stays inside the node
        return volume / cluster.node_bytes_per_s
    # The ring crosses the node boundary: every node's link carries the volume, and each of
    # the 2 (W-1) messages pays the latency once.
    return volume / cluster.link_bytes_per_s + 2 * (workers - 1) * cluster.latency_s


def step_s(profile: Profile, algo: Algorithm, nodes: int, cluster: Cluster) -> tuple[float, float, float]:
    """(compute, communication per step, step time) for one worker."""
    compute = profile.compute_s * cluster.compute_scale
    exchange = allreduce_s(profile.exchange_bytes, nodes, cluster)
    if algo.name == "sync":
        backward = profile.backward_s * cluster.compute_scale
        exposed = max(exchange * cluster.last_bucket_fraction, exchange - backward)
        return compute, exchange, compute + exposed
    if algo.name in ("bmuf", "easgd"):
        per_step = exchange / max(algo.tau, 1)
        return compute, per_step, compute + per_step
    raise ValueError(f"no scaling model for algorithm {algo.name!r} (sync, bmuf, easgd)")


def predict(profile: Profile, algos: list[Algorithm], node_counts: list[int],
            cluster: Cluster) -> list[Point]:
    """Every (algorithm, node count) point; speed-up is against the same algorithm on 1 node."""
    points: list[Point] = []
    for algo in algos:
        _, _, base_step = step_s(profile, algo, 1, cluster)
        base = cluster.workers_per_node * profile.batch_per_worker / base_step
        for n in node_counts:
            compute, comm, step = step_s(profile, algo, n, cluster)
            workers = n * cluster.workers_per_node
            rate = workers * profile.batch_per_worker / step
            points.append(Point(algorithm=algo.name, nodes=n, workers=workers, compute_s=compute,
                                communication_s=comm, step_s=step, samples_per_s=rate,
                                speedup=rate / base, efficiency=rate / base / n))
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
        keep_sync = sync is not None and fastest.samples_per_s <= sync.samples_per_s * (1 + PREFER_SYNC_WITHIN)
        choice[n] = "sync" if keep_sync else fastest.algorithm
    return choice
