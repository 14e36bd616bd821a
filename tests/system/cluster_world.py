"""One stack's cluster as `pulumi up` and a few submissions leave it: the platform's namespaces and NetworkPolicies, a run of every job shape, another team's runs, a session, the cluster's own pods, and what np-guard's analyzer says of them.

Every shape's real manifests are submitted to the stack's team (one run per shape, so the
other shapes' runs are "another run"), two shapes again by another team of the stack, and an
interactive session; the cluster's own pods the policies name are Prometheus and kube-dns.
Pods are the jobs' real pod templates (labels, ports), one per completion index, named as
JobSet v0.12.0 names them, placed in the real namespaces (labelled as the API server stores
them).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

from system_tier import SESSION, SHAPES, Job, Platform, build_job_in
from np_analyzer import Connectivity, Pod, analyze, namespace

from infra.labels import MONITORING_NAMESPACE, TEAM_LABEL

JOB_SHAPES = list(SHAPES)

# The cluster's DNS: CoreDNS keeps kube-dns's label on kind (kubeadm's addon), k3s
# (manifests/coredns.yaml) and EKS (the coredns add-on).
DNS = Pod(
    "kube-system",
    "coredns-0",
    {"k8s-app": "kube-dns"},
    ({"name": "dns", "containerPort": 53, "protocol": "UDP"},),
)


def pods_of(job: Job) -> list[Pod]:
    """The pods a job's objects make: a JobSet's replicated job `r` of `completions` pods gives
    `<jobset>-<r>-0-<i>` (jobset v0.12.0 GenJobName plus the Indexed Job's pod index)."""
    out = []
    for m in job.manifests:
        ns = m["metadata"].get("namespace")
        if m["kind"] == "JobSet":
            for rj in m["spec"]["replicatedJobs"]:
                template = rj["template"]["spec"]["template"]
                for i in range(rj["template"]["spec"]["completions"]):
                    out.append(_pod(ns, f"{m['metadata']['name']}-{rj['name']}-0-{i}", template))
        elif m["kind"] == "Pod":
            out.append(_pod(ns, m["metadata"]["name"], m))
    return out


def _pod(ns: str, name: str, template: dict) -> Pod:
    ports = tuple(p for c in template["spec"]["containers"] for p in c.get("ports") or [])
    return Pod(ns, name, dict(template["metadata"].get("labels") or {}), ports)


def prometheus(platform: Platform) -> Pod:
    """The platform's Prometheus: the StatefulSet prometheus-operator makes for the Prometheus
    named in the stack's own `monitoring.prometheus_url` (its Service has the object's name),
    with the labels the operator gives its pods (prometheus-operator pkg/prometheus/server/
    statefulset.go: `app.kubernetes.io/name: prometheus`, `prometheus: <name>`)."""
    host = urlsplit(platform.output.monitoring.prometheus_url).hostname or ""
    name, ns = host.split(".")[:2]
    assert ns == MONITORING_NAMESPACE
    return Pod(ns, f"prometheus-{name}-0", {"app.kubernetes.io/name": "prometheus", "prometheus": name})


def store_addresses(platform: Platform) -> list[str]:
    """Addresses the object store answers on: on AWS the first and last address of every subnet
    of the S3 and STS interface endpoints the stack creates; elsewhere the endpoint's IP."""
    store = platform.output.object_store
    if store is None:
        return []
    if store.endpoint is None:  # AWS: the endpoints' subnets, by the ids the engine gave them
        from infra.render_mocks import fake_id as _fake_id

        subnets = {
            _fake_id(r["name"], "subnet"): r["inputs"]["cidrBlock"]
            for r in platform.resources(":ec2/subnet:Subnet")
        }
        endpoints = [r["inputs"] for r in platform.resources(":ec2/vpcEndpoint:VpcEndpoint")]
        services = {e["serviceName"].rsplit(".", 1)[-1] for e in endpoints}
        assert {"s3", "sts"} <= services, services
        out = []
        for e in endpoints:
            for sid in e["subnetIds"]:
                net = ipaddress.ip_network(subnets[sid])
                out += [str(net.network_address + 4), str(net.broadcast_address - 1)]  # AWS reserves the rest
        return out
    host = urlsplit(store.endpoint).hostname or ""
    return [str(ipaddress.ip_address(host))]


def store_port(platform: Platform) -> int:
    store = platform.output.object_store
    if store is None or store.endpoint is None:
        return 443
    url = urlsplit(store.endpoint)
    return url.port or (443 if url.scheme == "https" else 80)


@dataclass
class World:
    """One stack's cluster with every shape's run in it, and what the analyzer says of it."""

    platform: Platform
    conn: Connectivity
    runs: dict[str, list[Pod]]  # shape -> its run's pods, in the stack's team namespace
    other_team: list[Pod]  # the same shapes' runs of another team
    session: Pod
    prometheus: Pod


def other_team(platform: Platform) -> str:
    """A team of the stack other than the default, as its output names it (every team has a
    namespace labelled as a team's)."""
    teams = [n["metadata"]["name"] for n in platform.kube_objects("Namespace")
             if TEAM_LABEL in (n["metadata"].get("labels") or {})]  # fmt: skip
    others = [t for t in platform.output.teams if t.name != platform.output.team]
    assert others, f"{platform.name}: one team only"
    assert others[0].namespace in teams, f"{platform.name}: no namespace for team {others[0].name}"
    return others[0].name


def built(jobs: Callable[[str, str], Job | None], stack: str, shape: str) -> Job | None:
    """The shape's job, or None where the job library refuses to build it: that shape's own
    test cases then fail with the library's reason, and the other shapes are still judged."""
    try:
        return jobs(stack, shape)
    except Exception:  # noqa: BLE001 (reported by the shape's own test, which builds it again)
        return None


def make_worlds(
    platforms: dict[str, Platform], jobs: Callable[[str, str], Job | None], tmp_path_factory: Any
) -> Callable[[str], World]:
    """worlds(stack) -> World, analyzed once per stack."""
    cache: dict[str, World] = {}

    def get(stack: str) -> World:
        if stack in cache:
            return cache[stack]
        platform = platforms[stack]
        submitted = {s: built(jobs, stack, s) for s in JOB_SHAPES}
        runs = {s: pods_of(j) for s, j in submitted.items() if j is not None}
        team = other_team(platform)
        theirs = [j for j in (build_job_in(platform, s, team) for s in ("two-nodes", "async-two-servers"))
                  if j is not None]  # fmt: skip
        session = pods_of(jobs(stack, SESSION))[0]
        prom = prometheus(platform)
        namespaces = [namespace(n["metadata"]["name"], n["metadata"].get("labels"))
                      for n in platform.kube_objects("Namespace")]  # fmt: skip
        namespaces.append(namespace("kube-system"))  # every cluster's own
        policies = [
            *platform.kube_objects("NetworkPolicy"),
            *(m for j in [*submitted.values(), *theirs] if j for m in j.objects("NetworkPolicy")),
        ]
        pods = [*(p for ps in runs.values() for p in ps), *(p for j in theirs for p in pods_of(j)),
                session, prom, DNS]  # fmt: skip
        conn = analyze(policies, pods, namespaces, tmp_path_factory.mktemp(f"nca-{stack}"))
        cache[stack] = World(platform, conn, runs, [p for j in theirs for p in pods_of(j)], session, prom)
        return cache[stack]

    return get
