"""np-guard's network-config-analyzer (`nca`, PyPI `network-config-analyzer` 2.1.0) over real objects: which connections a set of NetworkPolicies allows between pods and addresses.

The analyzer is the established implementation of NetworkPolicy semantics (np-guard,
github.com/np-guard/network-config-analyzer); this module only writes its three inputs
(policies, pods, namespaces) as YAML files, runs `nca --connectivity ... -o txt_no_fw_rules
--output_endpoints pods`, and reads its per-pair answer back:

    research/run-a-worker-0-0 => research/run-a-worker-0-1 : All connections
    research/run-a-worker-0-0 => 10.40.240.0-10.40.255.255 : {protocols:TCP,dst_ports:443}
    research/run-a-worker-0-0 => kube-system/coredns : {protocols:TCP, UDP,dst_ports:53}

A pair it does not print has no connection at all.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# scripts/setup installs it into a virtualenv of its own beside the project's (scripts/lock-nca).
NCA = Path(sys.executable).parents[1] / "nca" / "bin" / "nca"
ALL_PORTS = (1, 65535)
_LINE = re.compile(r"^(?P<src>\S+) => (?P<dst>\S+) : (?P<conn>.+)$")
_GROUP = re.compile(r"\{([^}]*)\}")
LINT_SELECTS_ALL = "A podSelector selects all pods in the current namespace"
LINT_SELECTS_NONE = "A podSelector selects no pods"


@dataclass(frozen=True)
class Pod:
    """A pod as the analyzer sees it: where it is, its labels and its containers' ports."""

    namespace: str
    name: str
    labels: dict[str, str]
    ports: tuple[dict[str, Any], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def manifest(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(self.labels)},
                "spec": {"containers": [{"name": "c", "ports": [dict(p) for p in self.ports]}]}}  # fmt: skip


@dataclass
class Allowed:
    """Per protocol, the destination port ranges one source may open to one destination."""

    ranges: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def add(self, conn: str) -> None:
        if conn.strip() == "All connections":
            for proto in ("TCP", "UDP", "SCTP"):
                self.ranges.setdefault(proto, []).append(ALL_PORTS)
            return
        groups = _GROUP.findall(conn)
        if not groups:
            raise ValueError(f"nca: a connection this reader does not know: {conn!r}")
        for group in groups:
            protos, ports = _split(group)
            for proto in protos:
                self.ranges.setdefault(proto, []).extend(ports)

    def covers(self, protocol: str, lo: int, hi: int) -> bool:
        """Every port lo..hi of `protocol` is allowed."""
        want = lo
        for a, b in sorted(self.ranges.get(protocol, [])):
            if a > want:
                break
            want = max(want, b + 1)
            if want > hi:
                return True
        return want > hi

    def touches(self, protocol: str, lo: int, hi: int) -> bool:
        """Some port lo..hi of `protocol` is allowed."""
        return any(a <= hi and lo <= b for a, b in self.ranges.get(protocol, []))


def _split(group: str) -> tuple[list[str], list[tuple[int, int]]]:
    """`protocols:TCP, UDP,dst_ports:53,9400-9415` -> (["TCP", "UDP"], [(53, 53), (9400, 9415)])."""
    protos_text, _, ports_text = group.partition(",dst_ports:")
    protos = [p.strip() for p in protos_text.removeprefix("protocols:").split(",") if p.strip()]
    if not ports_text:
        return protos, [ALL_PORTS]
    ports = []
    for part in ports_text.split(","):
        a, _, b = part.strip().partition("-")
        ports.append((int(a), int(b or a)))
    return protos, ports


def _address_range(text: str) -> tuple[int, int] | None:
    """`10.0.0.0-10.0.0.255`, `10.0.0.0/24` or `10.0.0.1` -> its first and last address; None for a pod."""
    try:
        if "-" in text:
            a, b = text.split("-", 1)
            return int(ipaddress.IPv4Address(a)), int(ipaddress.IPv4Address(b))
        net = ipaddress.IPv4Network(text, strict=False)
        return int(net.network_address), int(net.broadcast_address)
    except ValueError:
        return None


@dataclass
class Connectivity:
    """The analyzer's answer: (source, destination) -> what is allowed. A source or destination
    is a pod key `namespace/name` or an IPv4 address."""

    pairs: dict[tuple[str, str], Allowed]
    report: str

    def _find(self, src: str, dst: str) -> list[Allowed]:
        out = []
        for (s, d), allowed in self.pairs.items():
            if _matches(s, src) and _matches(d, dst):
                out.append(allowed)
        return out

    def allows(self, src: str, dst: str, protocol: str, lo: int, hi: int | None = None) -> bool:
        """Every port lo..hi of `protocol` from src to dst is allowed."""
        hi = lo if hi is None else hi
        found = self._find(src, dst)
        merged = Allowed()
        for a in found:
            for proto, ranges in a.ranges.items():
                merged.ranges.setdefault(proto, []).extend(ranges)
        return merged.covers(protocol, lo, hi)

    def denies(self, src: str, dst: str, protocol: str, lo: int, hi: int | None = None) -> bool:
        """No port lo..hi of `protocol` from src to dst is allowed."""
        hi = lo if hi is None else hi
        return not any(a.touches(protocol, lo, hi) for a in self._find(src, dst))


def _matches(endpoint: str, query: str) -> bool:
    """An analyzer endpoint (pod key or address range) against a query (pod key or address)."""
    if endpoint == query:
        return True
    rng, addr = _address_range(endpoint), _address_range(query)
    return rng is not None and addr is not None and addr[0] == addr[1] and rng[0] <= addr[0] <= rng[1]


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Namespace as the API server stores it: it adds `kubernetes.io/metadata.name` to every
    namespace (kubernetes v1.21+, pkg/registry/core/namespace/strategy.go, PrepareForCreate)."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**(labels or {}), "kubernetes.io/metadata.name": name}}}


def analyze(policies: list[dict[str, Any]], pods: list[Pod], namespaces: list[dict[str, Any]],
            workdir: Path) -> Connectivity:
    """Run `nca --connectivity` over the objects; its per-pair answer."""
    assert NCA.exists(), f"{NCA}: np-guard's analyzer is not installed; scripts/setup installs it"
    workdir.mkdir(parents=True, exist_ok=True)
    files = {
        "policies.yaml": policies,
        "pods.yaml": [{"apiVersion": "v1", "kind": "PodList", "items": [p.manifest() for p in pods]}],
        "namespaces.yaml": [{"apiVersion": "v1", "kind": "NamespaceList", "items": namespaces}],
    }
    for name, docs in files.items():
        (workdir / name).write_text(yaml.safe_dump_all(docs, sort_keys=False))
    proc = subprocess.run(
        [str(NCA), "--connectivity", str(workdir / "policies.yaml"), "--pod_list", str(workdir / "pods.yaml"),
         "--ns_list", str(workdir / "namespaces.yaml"), "--output_endpoints", "pods",
         "-o", "txt_no_fw_rules", "--return_0"],
        capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, f"nca failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    pairs: dict[tuple[str, str], Allowed] = {}
    for line in proc.stdout.splitlines():
        m = _LINE.match(line.strip())
        if m is None:
            continue
        pairs.setdefault((m["src"], m["dst"]), Allowed()).add(m["conn"])
    assert pairs, f"nca printed no connection at all:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    # nca reports a policy it could not read as a warning, not an error: refuse to judge with
    # one missing. Its style lints change nothing it computes: default-deny's `podSelector: {}`
    # ("should better be removed"), and a platform policy for pods a namespace has none of in
    # this world (`alchemist-sessions` where no one started a session).
    warnings = [line for line in (proc.stdout + proc.stderr).splitlines()
                if "Warning" in line and LINT_SELECTS_ALL not in line and LINT_SELECTS_NONE not in line]  # fmt: skip
    assert not warnings and "error" not in proc.stdout.lower(), "\n".join(warnings) or proc.stdout
    return Connectivity(pairs, proc.stdout)
