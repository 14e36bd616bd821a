"""The paper's scaling claim through `alchemist plan`'s model, under stated assumptions.

    .venv/bin/python bench/plan_paper.py [--link 25gbit] [--step-ms 180]

Alchemist (Apple, 2018) cut training time 10x to 14x on 64 GPUs against one 4-GPU machine.
Assumptions (each a flag): a ResNet-50-sized model (25.6 M parameters, exchanged in fp32:
102.4 MB), 180 ms per GPU step at batch 64 (a V100-class GPU in fp32), 8 GPUs per node joined
inside the node at 100 GB/s, nodes joined by one link per node, 50 us per message, bmuf and
easgd exchanging every 8 steps. The baseline is 4 GPUs in one node; the table gives, per node
count, the speed-up over it for each algorithm, the scaling efficiency against perfect
scaling from the baseline, and the algorithm the plan would choose.

Writes bench/results/plan/paper.md and prints it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from alchemist_jobs.planner import model  # noqa: E402
from alchemist_jobs.planner.facts import cluster_facts  # noqa: E402


def table(link: str, step_ms: float, params_m: float, gpus_per_node: int,
          nodes: list[int], tau: int) -> list[str]:
    prof = model.Profile(forward_s=step_ms / 3e3, backward_s=2 * step_ms / 3e3,
                         exchange_bytes=int(params_m * 4e6), batch_per_worker=64,
                         source="stated")
    algos = [model.Algorithm("sync"), model.Algorithm("bmuf", tau), model.Algorithm("easgd", tau)]
    big = cluster_facts(workers_per_node=gpus_per_node, link=link, latency_us=50, stack=None,
                        runs_root=None, job_name="paper")
    base_cluster = cluster_facts(workers_per_node=4, link=link, latency_us=50, stack=None,
                                 runs_root=None, job_name="paper")
    base = model.predict(prof, [model.Algorithm("sync")], [1], base_cluster)[0].samples_per_s
    points = model.predict(prof, algos, nodes, big)
    best = model.best_by_nodes(points)
    rows = [f"Link {link} per node, {gpus_per_node} GPUs per node, {params_m:g} M parameters, "
            f"{step_ms:g} ms per GPU step; baseline: 4 GPUs in one node ({base:,.0f} samples/s).", "",
            "| nodes | GPUs | sync speed-up | bmuf speed-up | easgd speed-up | sync efficiency | "
            "plan chooses |", "|---|---|---|---|---|---|---|"]
    for n in nodes:
        by = {p.algorithm: p for p in points if p.nodes == n}
        gpus = n * gpus_per_node
        ideal = gpus / 4
        rows.append(f"| {n} | {gpus} | {by['sync'].samples_per_s / base:.1f}x | "
                    f"{by['bmuf'].samples_per_s / base:.1f}x | {by['easgd'].samples_per_s / base:.1f}x | "
                    f"{by['sync'].samples_per_s / base / ideal:.0%} | {best[n]} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--links", default="10gbit,25gbit,100gbit")
    ap.add_argument("--step-ms", type=float, default=180.0)
    ap.add_argument("--params-m", type=float, default=25.6)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--nodes", default="1,2,4,8,16")
    ap.add_argument("--tau", type=int, default=8)
    args = ap.parse_args()
    out = ["# The paper's claim through the plan's model", ""]
    for link in args.links.split(","):
        out += table(link, args.step_ms, args.params_m, args.gpus_per_node,
                     [int(n) for n in args.nodes.split(",")], args.tau) + [""]
    dest = REPO / "bench" / "results" / "plan"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "paper.md").write_text("\n".join(out))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
