"""Every job shape on every stack, its pods together on the nodes they would get: beside each
other and beside the DaemonSet pods the platform runs on every node (node_fit.py, which cites
the charts and the autoscaler's estimator it models). test_scheduling.py judges each pod alone
against an empty node; issue 36.7 was a parameter server that fitted an empty GPU node and no
node beside a worker, so a job of two GPU nodes took three and left one's GPUs idle.
"""

from __future__ import annotations

import copy

import pytest
from kueue_model import admitted_pod_spec, pod_requests, quantity
from node_fit import GPU, DaemonPod, daemon_pods, new_node, pack
from node_groups import NodeGroup, why_not
from system_tier import STACK_NAMES
from test_scheduling import SCHEDULED_SHAPES, admit_job, eks_groups, job_of, node_groups, queueing, workloads  # noqa: F401


def job_pods(platform, job) -> list[tuple[str, dict]]:
    """Every pod of the job, one entry per pod, as admission leaves its spec."""
    flavors = queueing(platform)[1]
    if not workloads(job):  # not managed by Kueue: the pods as written
        return [(n, copy.deepcopy(t["spec"])) for n, t in job.pod_templates()]
    return [(f"{ps.name}-{i}", admitted_pod_spec(ps, admission.flavors.get(ps.name, {}), flavors))
            for pod_sets, admission in admit_job(platform, job) for ps in pod_sets for i in range(ps.count)]


def running_nodes(platform) -> tuple[list[NodeGroup], dict[str, int]]:
    """(node groups as their nodes run, the most nodes of each where the stack fixes it): on AWS
    a running node of each managed group (the autoscaler adds as many as the job needs); on-prem
    and kind each host or node is one; an `existing` cluster's count is its own."""
    if platform.output.provider == "aws":
        return [node for _, node in eks_groups(platform)], {}
    groups = node_groups(platform)
    if platform.output.provider == "existing":
        return groups, {}
    return groups, {g.name: 1 for g in groups}


@pytest.mark.parametrize("shape", SCHEDULED_SHAPES)
@pytest.mark.parametrize("stack", STACK_NAMES)
def test_a_job_takes_no_gpu_node_its_workers_do_not_use(platforms, job_of, stack, shape):
    """All pods of the job fit together, beside the DaemonSets, and no GPU node holds only pods
    that ask for no GPU (parameter servers sit beside the workers or on nodes without GPUs)."""
    job = job_of(stack, shape)
    if job is None:
        pytest.skip(f"{stack} cannot have {shape}")
    platform = platforms[stack]
    groups, most = running_nodes(platform)
    pods = job_pods(platform, job)
    nodes, left = pack(pods, groups, daemon_pods(platform.render), most)
    assert not left, f"{stack}/{shape}: {left} fit no node beside the job's other pods and the DaemonSets"
    asks_gpu = {name for name, spec in pods if pod_requests(spec).get(GPU)}
    idle = [n.pods for n in nodes if n.group.allocatable.get(GPU) and not asks_gpu & set(n.pods)]
    assert not idle, f"{stack}/{shape}: a GPU node of its own for {idle}, its GPUs idle"


def test_parameter_servers_share_the_workers_gpu_nodes_on_g5_12xlarge(platforms, job_of):
    """Issue 36.7: `async` on g5.12xlarge with workers of 40 CPUs / 160 GiB: two worker nodes
    hold the two servers too (a server fitted only an empty node before: 10 CPUs / 40 GiB each)."""
    platform = platforms["aws-us-west-2"]
    groups, most = running_nodes(platform)
    nodes, left = pack(job_pods(platform, job_of("aws-us-west-2", "async-gpu-big")), groups,
                       daemon_pods(platform.render), most)
    assert not left
    jobs = [sorted(p for p in n.pods if not p.startswith("daemonset/")) for n in nodes]
    assert len(nodes) == 2 and all(n.group.allocatable.get(GPU) for n in nodes), jobs
    assert sorted(p for pods in jobs for p in pods) == ["ps-0", "ps-1", "worker-0", "worker-1"]


def test_daemonset_overhead_is_what_the_pinned_charts_request(platforms):
    """By hand from the vendored chart values: the NFD worker 5m / 64Mi on every node it tolerates
    (gpu-operator v25.10.1 values.yaml), csi-driver-nfs v4.11.0's node pod 3 x (10m / 20Mi), the
    node exporter, the GPU operands and the EFS node pod nothing; the operands only on GPU nodes,
    the driver and toolkit only where the operator installs them."""
    def overhead(stack: str, gpu: bool) -> tuple[int, dict]:
        platform = platforms[stack]
        group = next(g for g in running_nodes(platform)[0] if bool(g.allocatable.get(GPU)) == gpu)
        node = new_node(group, daemon_pods(platform.render))
        return node.used.pop("pods"), node.used

    nfs = {"cpu": quantity("35m"), "memory": quantity("124Mi")}
    # onprem-lab: node exporter, NFD worker, csi-nfs-node; on GPU hosts also device plugin, GFD,
    # DCGM exporter, MIG manager, validator (gpuDriver: host, the hosts' toolkit: neither operand)
    assert overhead("onprem-lab", gpu=False) == (3, nfs)
    assert overhead("onprem-lab", gpu=True) == (8, nfs)
    # the `existing` lab: the operator's toolkit too
    assert overhead("onprem-existing", gpu=True) == (9, nfs)
    # AWS (EFS): the EFS node pod requests nothing; the AMI brings driver and toolkit
    efs = {"cpu": quantity("5m"), "memory": quantity("64Mi")}
    assert overhead("aws-us-west-2", gpu=True) == (8, efs)
    assert overhead("aws-us-west-2", gpu=False) == (3, efs)


def test_the_fit_counts_what_an_empty_node_check_does_not(platforms):
    """Not a rubber stamp: a pod asking for a running g5.12xlarge's whole allocatable CPU fits the
    empty node (node_groups.why_not) and no node that runs the platform's DaemonSets; two pods of
    half of it each fit one node, three do not."""
    platform = platforms["aws-us-west-2"]
    (gpu,) = [g for g in running_nodes(platform)[0] if g.allocatable.get(GPU)]
    cpu = gpu.allocatable["cpu"]
    whole = {"tolerations": [{"operator": "Exists"}],
             "containers": [{"resources": {"requests": {"cpu": str(cpu)}}}]}
    assert why_not(whole, gpu) is None
    daemons = daemon_pods(platform.render)
    assert not new_node(gpu, daemons).fits(whole)
    assert new_node(gpu, [DaemonPod("none", {}, [{"operator": "Exists"}])]).fits(whole)
    half = {**whole, "containers": [{"resources": {"requests": {"cpu": str((cpu - quantity("5m")) / 2)}}}]}
    nodes, left = pack([("a", half), ("b", half)], [gpu], daemons)
    assert (len(nodes), left) == (1, [])
    nodes, left = pack([("a", half), ("b", half), ("c", half)], [gpu], daemons, {gpu.name: 1})
    assert (len(nodes), left) == (1, ["c"])
