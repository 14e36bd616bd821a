"""Who can reach whom, for every stack and job shape: np-guard's analyzer over the rendered platform's NetworkPolicies and the job library's own.

Each stack becomes one cluster as `pulumi up` and a few submissions would leave it: the
platform's namespaces and NetworkPolicies (Platform.kube_objects), every job shape's real
manifests submitted to the stack's team (one run per shape, so the other shapes' runs are
"another run"), one run of the same shapes submitted by another team of the stack, an
interactive session, and the cluster's own pods the policies name (Prometheus, kube-dns).
Pods are the jobs' real pod templates (labels, ports), one per completion index, named as
JobSet v0.12.0 names them. `network-config-analyzer` (np-guard) computes what the policies
allow; docs/platform.md's flow table says what must be allowed and denied, and the rows are
checked as written there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from cluster_world import DNS, JOB_SHAPES, World, store_addresses, store_port
from system_tier import ALL_SHAPES, REPO, SESSION, STACK_NAMES
from np_analyzer import analyze, namespace

from alchemist_jobs.contract import RUN_LABEL

DOC = REPO / "docs" / "platform.md"
METADATA = "169.254.169.254"
# --- docs/platform.md's flow table --------------------------------------------------------------


@dataclass(frozen=True)
class Flow:
    src: str
    dst: str
    protocols: tuple[str, ...]
    ports: str  # "1-65535", "53", "1-9399, 9416-65535" or "the store's port"
    allowed: bool


def doc_flows() -> list[Flow]:
    text = DOC.read_text()
    section = text[text.index("### Flows"):]
    section = section[:section.index("\n### ", 5)]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| from")]
    flows = []
    for row in rows:
        src, dst, protos, ports, verdict = (c.strip() for c in row.strip("|").split("|"))
        assert verdict in ("allowed", "denied"), row
        flows.append(Flow(src, dst, tuple(p.strip() for p in protos.split(",")), ports, verdict == "allowed"))
    return flows


def port_ranges(ports: str, world: World) -> list[tuple[int, int]]:
    if ports == "the store's port":
        p = store_port(world.platform)
        return [(p, p)]
    out = []
    for part in ports.split(","):
        a, _, b = part.strip().partition("-")
        out.append((int(a), int(b or a)))
    return out


def endpoints(name: str, world: World, shape: str) -> list[str] | None:
    """The pods or addresses a table entry names, for `shape`'s run; None where the stack has none."""
    run = world.runs[shape]
    fixed = re.fullmatch(r"(\d+\.\d+\.\d+\.\d+) \(.*\)", name)
    if fixed:
        return [fixed[1]]
    table = {
        "a run's pod": [p.key for p in run],
        "kube-dns": [DNS.key],
        "Prometheus": [world.prometheus.key],
        "another run's pod": [p.key for s, ps in world.runs.items() if s != shape for p in ps],
        "another team's pod": [p.key for p in world.other_team],
        "an interactive session": [world.session.key],
        "the object store": store_addresses(world.platform) or None,
    }
    if name == "another pod of the same run":
        return None  # pairs within the run: see check_flow
    assert name in table, f"docs/platform.md flow table: unknown endpoint {name!r}"
    return table[name]


def check_flow(flow: Flow, world: World, shape: str) -> list[str]:
    """What the analyzer says against one row of the table: the disagreements, as sentences."""
    run = world.runs[shape]
    if flow.dst == "another pod of the same run":
        pairs = [(a.key, b.key) for a in run for b in run if a != b]
    else:
        srcs, dsts = endpoints(flow.src, world, shape), endpoints(flow.dst, world, shape)
        if srcs is None or dsts is None:
            return []  # the stack has no such endpoint (no object store)
        pairs = [(s, d) for s in srcs for d in dsts]
    wrong = []
    for s, d in pairs:
        for proto in flow.protocols:
            for lo, hi in port_ranges(flow.ports, world):
                ok = (world.conn.allows if flow.allowed else world.conn.denies)(s, d, proto, lo, hi)
                if not ok:
                    wrong.append(f"{s} -> {d} {proto} {lo}-{hi}: should be {'allowed' if flow.allowed else 'denied'}")
    return wrong


def test_the_flow_table_is_there_and_names_every_flow_the_issue_asks_for():
    flows = doc_flows()
    named = {(f.src, f.dst, f.allowed) for f in flows}
    for need in [("a run's pod", "another pod of the same run", True), ("a run's pod", "kube-dns", True),
                 ("a run's pod", "the object store", True), ("Prometheus", "a run's pod", True),
                 ("another run's pod", "a run's pod", False), ("another team's pod", "a run's pod", False),
                 ("an interactive session", "a run's pod", False)]:  # fmt: skip
        assert need in named, need
    assert any(f.dst.startswith(METADATA) and not f.allowed for f in flows)


@pytest.mark.parametrize("shape", ALL_SHAPES)
@pytest.mark.parametrize("stack", STACK_NAMES)
def test_every_flow_of_the_table_holds(worlds, jobs, stack, shape):
    if jobs(stack, shape) is None:
        pytest.skip(f"stack {stack} cannot have shape {shape}")
    world = worlds(stack)
    flows = doc_flows()
    if shape == SESSION:  # the session against every run of the cluster
        wrong = [w for s in world.runs for f in flows if "an interactive session" in (f.src, f.dst)
                 for w in check_flow(f, world, s)]  # fmt: skip
    else:
        wrong = [w for f in flows for w in check_flow(f, world, shape)]
    assert not wrong, f"{stack} {shape}: {len(wrong)} flows differ from docs/platform.md:\n" + "\n".join(wrong[:20])


@pytest.mark.parametrize("shape", JOB_SHAPES)
@pytest.mark.parametrize("stack", STACK_NAMES)
def test_every_port_the_runs_own_pods_listen_on_is_reachable_by_its_peers(worlds, jobs, stack, shape):
    """The ports as the manifests declare them: the rendezvous store on worker 0, each
    parameter server's shard port, from every other pod of the run; the metrics ports from
    Prometheus; the store from every pod of an `s3://` run."""
    job = jobs(stack, shape)
    if job is None:
        pytest.skip(f"stack {stack} cannot have shape {shape}")
    world = worlds(stack)
    run = world.runs[shape]
    listening = [(p, port) for p in run for port in p.ports]
    assert any(port["name"] == "rdzv" for _, port in listening)
    wrong = []
    for dst, port in listening:
        n, proto = port["containerPort"], port.get("protocol", "TCP")
        sources = [world.prometheus] if port["name"].startswith("metrics") else [p for p in run if p != dst]
        for src in sources:
            if not world.conn.allows(src.key, dst.key, proto, n):
                wrong.append(f"{src.key} -> {dst.key}:{n} ({port['name']})")
    if job.spec is not None and (job.spec.data.source or "").startswith("s3://"):
        addresses = store_addresses(world.platform)
        assert addresses, f"{stack}: an s3:// run on a stack without an object store"
        wrong += [f"{p.key} -> object store {a}:{store_port(world.platform)}" for p in run for a in addresses
                  if not world.conn.allows(p.key, a, "TCP", store_port(world.platform))]  # fmt: skip
    assert not wrong, f"{stack} {shape}: blocked:\n" + "\n".join(wrong)


def test_the_analyzer_sees_the_old_ingress_only_run_policy_drop_the_runs_own_traffic(worlds, jobs, tmp_path):
    """The check can fail: the per-run policy as it was (Ingress only) leaves every pod of a
    multi-pod run unable to open a connection to its peers under the namespace's default-deny."""
    world = worlds("dev")
    job = jobs("dev", "two-nodes")
    old = []
    for policy in job.objects("NetworkPolicy"):
        spec = {k: v for k, v in policy["spec"].items() if k != "egress"}
        old.append({**policy, "spec": {**spec, "policyTypes": ["Ingress"]}})
    platform = world.platform
    namespaces = [namespace(n["metadata"]["name"], n["metadata"].get("labels"))
                  for n in platform.kube_objects("Namespace")]  # fmt: skip
    pods = world.runs["two-nodes"]
    conn = analyze([*platform.kube_objects("NetworkPolicy"), *old], [*pods, DNS, world.prometheus],
                   [*namespaces, namespace("kube-system")], tmp_path)  # fmt: skip
    a, b = pods[0], pods[1]
    assert conn.denies(b.key, a.key, "TCP", 1, 65535)
    assert world.conn.allows(b.key, a.key, "TCP", 1, 65535)
    assert RUN_LABEL in a.labels
