"""Kueue v0.13.4's admission of a workload into an empty cohort, ported from its source.

What is ported, from https://github.com/kubernetes-sigs/kueue at tag v0.13.4 (Apache-2.0):
- the workload's pod sets: pkg/controller/jobs/jobset/jobset_controller.go `PodSets` (one per
  replicated job, count = replicas x min(parallelism, completions)); a plain pod is one pod set
  of one (pkg/controller/jobs/pod);
- a pod set's requests: pkg/workload/workload.go `totalRequestsFromPodSets` (the pod's requests
  as k8s.io/component-helpers/resource `PodRequests` sums them, less `dropExcludedResources`,
  times the count);
- flavor assignment: pkg/scheduler/flavorassigner/flavorassigner.go `assignFlavors` and
  `findFlavorForPodSetResource` (the resource group covering each resource, else "resource X
  unavailable in ClusterQueue"; per flavor in order: untolerated NoSchedule/NoExecute flavor
  taints, the node selector and required node affinity restricted to the group's label keys
  `flavorSelector`, then quota) and `fitsResourceQuota` ("insufficient quota ... request >
  maximum capacity");
- quota: pkg/cache/resource_node.go `potentialAvailable`, `guaranteedQuota` and
  `accumulateFromChild` (a ClusterQueue's nominal quota plus what the rest of its cohort lends,
  within lending and borrowing limits). With nothing admitted yet, available = potential.
- what admission does to the pods: pkg/podset/podset.go `FromAssignment`/`Merge` (the flavors'
  node labels join the node selector, their tolerations the pod's).

- a workload's priority: pkg/controller/jobframework/reconciler.go `ExtractPriority` and
  `extractPriorityFromPodSets` (the first pod set's priorityClassName) with
  pkg/util/priority/priority.go `GetPriorityFromPriorityClass` (that PriorityClass's value; none
  named: the global default class's, else 0);
- whom a workload may preempt: pkg/scheduler/preemption/preemption.go `findCandidates` (within
  its ClusterQueue by `withinClusterQueue`; in the cohort by `reclaimWithinCohort`, only from
  ClusterQueues that borrow), by priority alone (`LowerPriority`, `Any`, `Never`).

Not ported: fair sharing, topology-aware scheduling, admission checks, partial admission, and
of preemption the timestamps of `LowerOrNewerEqualPriority` and the choice among candidates:
none of them changes whether a workload fits an empty cohort, or who ranks above whom.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml
from kubernetes.utils import parse_quantity

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def quantity(v: Any) -> Any:
    return parse_quantity(str(v))


def pod_requests(spec: dict[str, Any]) -> dict[str, Any]:
    """k8s.io/component-helpers/resource/helpers.go `PodRequests` (Kubernetes 1.35): the sum of
    the containers' requests (a limit stands in for a missing request, as API defaulting does),
    at least each init container's, plus the pod overhead."""
    def requests(c: dict[str, Any]) -> dict[str, Any]:
        res = c.get("resources") or {}
        out = {k: quantity(v) for k, v in (res.get("limits") or {}).items()}
        out.update({k: quantity(v) for k, v in (res.get("requests") or {}).items()})
        return out

    total: dict[str, Any] = {}
    for c in spec.get("containers", []):
        for k, v in requests(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers", []):
        if c.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
            for k, v in requests(c).items():
                total[k] = total.get(k, 0) + v
            continue
        for k, v in requests(c).items():
            total[k] = max(total.get(k, 0), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0) + quantity(v)
    return total


@dataclass
class PodSet:
    name: str
    count: int
    template: dict[str, Any]  # {"metadata", "spec"}


def workload_pod_sets(obj: dict[str, Any]) -> list[PodSet]:
    """The pod sets of the Workload Kueue makes for a JobSet, a Job or a plain Pod."""
    if obj["kind"] == "JobSet":
        out = []
        for rj in obj["spec"]["replicatedJobs"]:
            job = rj["template"]["spec"]
            per_replica = job.get("parallelism", 1)
            per_replica = min(per_replica, job.get("completions", per_replica))
            out.append(PodSet(rj["name"], rj.get("replicas", 1) * per_replica, job["template"]))
        return out
    if obj["kind"] == "Job":  # pkg/controller/jobs/job/job_controller.go PodSets: one, of parallelism
        job = obj["spec"]
        count = job.get("parallelism", 1)
        return [PodSet("main", min(count, job.get("completions", count)), job["template"])]
    if obj["kind"] == "Pod":
        return [PodSet("main", 1, {"metadata": obj["metadata"], "spec": obj["spec"]})]
    raise ValueError(f"not a workload kind here: {obj['kind']}")


def manager_config(values: dict[str, Any]) -> dict[str, Any]:
    """Kueue's Configuration from the chart's values (managerConfig.controllerManagerConfigYaml)."""
    return yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])


def excluded_prefixes(config: dict[str, Any]) -> list[str]:
    return list((config.get("resources") or {}).get("excludeResourcePrefixes") or [])


# --- the ClusterQueue and its cohort -----------------------------------------------------------


@dataclass
class Quota:
    nominal: Any
    borrowing_limit: Any = None
    lending_limit: Any = None

    def guaranteed(self) -> Any:
        """resource_node.go guaranteedQuota: what the queue keeps from its cohort."""
        if self.lending_limit is None:
            return 0
        return max(0, self.nominal - self.lending_limit)


@dataclass
class ClusterQueue:
    name: str
    cohort: str | None
    groups: list[dict[str, Any]]  # spec.resourceGroups
    quotas: dict[tuple[str, str], Quota] = field(default_factory=dict)  # (flavor, resource)

    @classmethod
    def of(cls, obj: dict[str, Any]) -> "ClusterQueue":
        spec = obj["spec"]
        cq = cls(obj["metadata"]["name"], spec.get("cohort"), spec.get("resourceGroups", []))
        for rg in cq.groups:
            for fl in rg["flavors"]:
                for r in fl["resources"]:
                    cq.quotas[fl["name"], r["name"]] = Quota(
                        quantity(r["nominalQuota"]),
                        quantity(r["borrowingLimit"]) if "borrowingLimit" in r else None,
                        quantity(r["lendingLimit"]) if "lendingLimit" in r else None)
        return cq

    def group_of(self, resource: str) -> dict[str, Any] | None:
        for rg in self.groups:
            if resource in rg["coveredResources"]:
                return rg
        return None


def potential_available(cq: ClusterQueue, cohort: list[ClusterQueue], fr: tuple[str, str]) -> Any:
    """resource_node.go potentialAvailable for a ClusterQueue whose parent is a flat cohort (a
    cohort with no quota of its own: its SubtreeQuota is what its queues lend)."""
    own = cq.quotas.get(fr, Quota(0))
    if cq.cohort is None:
        return own.nominal
    cohort_subtree = sum((q.quotas[fr].nominal - q.quotas[fr].guaranteed()
                          for q in cohort if fr in q.quotas), 0)  # accumulateFromChild
    available = own.guaranteed() + cohort_subtree
    if own.borrowing_limit is not None:
        available = min(own.nominal + own.borrowing_limit, available)
    return available


# --- flavor assignment -------------------------------------------------------------------------


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """k8s.io/api/core/v1 Toleration.ToleratesTaint."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        op = t.get("operator", "Equal")
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t["key"] != taint["key"]:
            continue
        if op == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def match_expression(labels: dict[str, str], e: dict[str, Any]) -> bool:
    """k8s.io/component-helpers/scheduling/corev1/nodeaffinity: one NodeSelectorRequirement."""
    op, key, values = e["operator"], e["key"], e.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels:
            return False
        have, want = int(labels[key]), int(values[0])
        return have > want if op == "Gt" else have < want
    raise ValueError(op)


def required_affinity_matches(spec: dict[str, Any], labels: dict[str, str],
                              allowed_keys: set[str] | None = None) -> bool:
    """nodeaffinity.GetRequiredNodeAffinity(pod).Match(node): the node selector and the required
    node affinity terms (ORed); with `allowed_keys`, only those keys count (flavorSelector)."""
    allowed = (lambda k: True) if allowed_keys is None else (lambda k: k in allowed_keys)
    for k, v in (spec.get("nodeSelector") or {}).items():
        if allowed(k) and labels.get(k) != v:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return True
    terms = []
    for t in required.get("nodeSelectorTerms", []):
        exprs = [e for e in t.get("matchExpressions", []) if allowed(e["key"])]
        if not exprs and allowed_keys is not None:
            return True  # a term left empty matches every flavor
        terms.append(exprs)
    return any(all(match_expression(labels, e) for e in exprs) for exprs in terms)


@dataclass
class Admission:
    admitted: bool
    reason: str = ""
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)  # pod set -> resource -> flavor


def admit(pod_sets: list[PodSet], cq: ClusterQueue, cohort: list[ClusterQueue],
          flavors: dict[str, dict[str, Any]], excluded: list[str]) -> Admission:
    """assignFlavors for an empty cohort: every pod set's resources get a flavor that fits, or
    the workload is not admitted, with upstream's message."""
    usage: dict[tuple[str, str], Any] = {}
    result = Admission(True)
    for ps in pod_sets:
        single = {r: v for r, v in pod_requests(ps.template["spec"]).items()
                  if not any(r.startswith(p) for p in excluded)}  # dropExcludedResources
        requests = {r: v * ps.count for r, v in single.items()}
        assigned: dict[str, str] = {}
        for res in requests:
            if res in assigned:
                continue
            rg = cq.group_of(res)
            if rg is None:
                return Admission(False, f"resource {res} unavailable in ClusterQueue")
            covered = {r: v for r, v in requests.items() if r in rg["coveredResources"]}
            label_keys = {k for f in rg["flavors"] for k in (flavors.get(f["name"]) or {}).get("nodeLabels", {})}
            reasons = []
            for fl in rg["flavors"]:
                fname = fl["name"]
                fspec = flavors.get(fname)
                if fspec is None:
                    reasons.append(f"flavor {fname} not found")
                    continue
                pod_tol = list(ps.template["spec"].get("tolerations") or []) + list(fspec.get("tolerations") or [])
                bad = [t for t in fspec.get("nodeTaints") or []
                       if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod_tol, t)]
                if bad:
                    reasons.append(f"untolerated taint {bad[0]} in flavor {fname}")
                    continue
                if not required_affinity_matches(ps.template["spec"], fspec.get("nodeLabels") or {}, label_keys):
                    reasons.append(f"flavor {fname} doesn't match node affinity")
                    continue
                fits = True
                for r, val in covered.items():
                    fr = (fname, r)
                    cap = potential_available(cq, cohort, fr)
                    if val + usage.get(fr, 0) > cap:
                        reasons.append(f"insufficient quota for {r} in flavor {fname}, request > "
                                       f"maximum capacity ({val + usage.get(fr, 0)} > {cap})")
                        fits = False
                        break
                if fits:
                    for r, val in covered.items():
                        usage[fname, r] = usage.get((fname, r), 0) + val
                        assigned[r] = fname
                    break
            else:
                return Admission(False, f"couldn't assign flavors to pod set {ps.name}: " + ", ".join(reasons))
        result.flavors[ps.name] = assigned
    return result


def admitted_pod_spec(ps: PodSet, assigned: dict[str, str], flavors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The pod spec as admission leaves it (pkg/podset/podset.go FromAssignment + Merge): each
    assigned flavor's node labels join the node selector, its tolerations the pod's."""
    spec = copy.deepcopy(ps.template["spec"])
    for fname in dict.fromkeys(assigned.values()):
        f = flavors.get(fname) or {}
        if f.get("nodeLabels"):
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **f["nodeLabels"]}
        for t in f.get("tolerations") or []:
            if t not in spec.setdefault("tolerations", []):
                spec["tolerations"].append(t)
    return spec


def workload_priority(obj: dict[str, Any], priority_classes: list[dict[str, Any]]) -> int:
    """reconciler.go ExtractPriority for a JobSet or Pod: the first pod set naming a class."""
    name = next((ps.template["spec"].get("priorityClassName") for ps in workload_pod_sets(obj)
                 if ps.template["spec"].get("priorityClassName")), "")
    classes = {pc["metadata"]["name"]: pc for pc in priority_classes}
    if name:
        return int(classes[name]["value"])  # a class that does not exist: the workload is not created
    defaults = [int(pc["value"]) for pc in priority_classes if pc.get("globalDefault")]
    return min(defaults) if defaults else 0


def may_preempt(policy: str, preemptor: int, candidate: int) -> bool:
    """preemption.go findCandidates: whether `policy` lets a workload of priority `preemptor`
    take a candidate of priority `candidate` (LowerOrNewerEqualPriority: equal counts only when
    the preemptor is older, not modelled, so only lower)."""
    if policy == "Never":
        return False
    if policy == "Any":
        return True
    assert policy in ("LowerPriority", "LowerOrNewerEqualPriority"), policy
    return candidate < preemptor


def preemption_candidates(preemptor: int, cq: dict[str, Any], same_queue: list[int],
                          borrowing_cohort: list[int]) -> list[int]:
    """findCandidates: the priorities of the admitted workloads a workload of `preemptor` may
    preempt, from its own ClusterQueue (`same_queue`) and from borrowing queues of its cohort."""
    policy = (cq.get("spec") or {}).get("preemption") or {}
    within, reclaim = policy.get("withinClusterQueue", "Never"), policy.get("reclaimWithinCohort", "Never")
    return ([p for p in same_queue if may_preempt(within, preemptor, p)]
            + [p for p in borrowing_cohort if may_preempt(reclaim, preemptor, p)])
