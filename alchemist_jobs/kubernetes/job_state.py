"""A JobSet, its pods and its Kueue Workload, as the API server reports them, become a
RunStatus (pure).

    suspended, Workload without quota       -> queued     (Kueue's own reason: no flavor fits...)
    suspended, Workload evicted             -> preempted  (requeued: waits for readmission)
    suspended, Workload admitted            -> admitted   (Kueue is unsuspending it)
    running, pods not all running yet       -> pending    (scheduling, pulling: the reason)
    every worker pod running                -> running
    a pod failed or gone, the group being recreated -> restarting (JobSet's failurePolicy)
    condition Completed                     -> succeeded
    condition Failed                        -> failed     (reason, message and the pod's why)

Restarts: JobSet v0.12.0 counts every group restart in `status.restarts` (the pods'
restart-attempt label follows it) and only those that spend `maxRestarts` in
`status.restartsCountTowardsMax` (api/jobset/v1alpha2/jobset_types.go; a restart by the
rule StoppedFromOutside, action RestartJobSetAndIgnoreMaxRestarts, spends none).

Stuck: a pod whose deletion deadline passed long ago (its node is gone or unreachable, so no
kubelet confirms it stopped) holds a BlockingRecreate restart forever; it is named, with its
node, in the message and in `stuck_pods`.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from alchemist_jobs.contract import RUN_LABEL
from alchemist_jobs.kubernetes.manifests import (
    INDEX_ANNOTATION,
    MAX_RESTARTS_ANNOTATION,
    NAME_LABEL,
    NODES_ANNOTATION,
    PROCS_ANNOTATION,
    QUEUE_LABEL,
    REQUIREMENTS_ANNOTATION,
    RESTART_ATTEMPT_LABEL,
    RJOB_LABEL,
    SERVERS_ANNOTATION,
    WORKER_RJOB,
    WORKERS_ANNOTATION,
)
from alchemist_jobs.runtime.config_error import CONFIG_ERROR_EXIT_CODE
from alchemist_jobs.scheduler import FAILED, PENDING, RESTARTING, RUNNING, SUCCEEDED, RunStatus

# States only a queued cluster run has (not final).
QUEUED, ADMITTED, PREEMPTED = "queued", "admitted", "preempted"
# A pod still there this long after its deletion deadline (deletionTimestamp: the request's
# time plus the grace period) is not coming back by itself: a live kubelet kills it at the
# deadline and confirms within seconds. The margin absorbs clock skew with the API server.
STUCK_AFTER_S = 180
# The marks the controllers leave on such a pod
# (kubernetes v1.33 pkg/controller/tainteviction/taint_eviction.go: DisruptionTarget
# `DeletionByTaintManager`; pkg/controller/podgc/gc_controller.go: `DeletionByPodGC`;
# pkg/controller/util/node MarkPodsNotReady: Ready=False).
NODE_LOST_REASONS = ("DeletionByTaintManager", "DeletionByPodGC")


def parse_time(ts: str | None) -> float | None:
    """RFC 3339 (`2026-01-01T12:00:00Z`, as the API server writes it) to epoch seconds."""
    if not ts:
        return None
    # fromisoformat: a tenth of strptime's cost, which listing 10,000 runs felt.
    return datetime.fromisoformat(ts[:19]).replace(tzinfo=timezone.utc).timestamp()


def pod_index(pod: dict) -> int:
    meta = pod.get("metadata", {})
    value = (meta.get("annotations") or {}).get(INDEX_ANNOTATION) or (meta.get("labels") or {}).get(
        INDEX_ANNOTATION
    )
    return int(value) if value is not None else -1


def worker_pods(pods: list[dict]) -> list[dict]:
    return [
        p for p in pods if (p["metadata"].get("labels") or {}).get(RJOB_LABEL, WORKER_RJOB) == WORKER_RJOB
    ]


def attempt(pod: dict) -> int:
    """Which JobSet restart a pod belongs to (its restart-attempt label)."""
    return int((pod["metadata"].get("labels") or {}).get(RESTART_ATTEMPT_LABEL, 0))


def newest_pods(pods: list[dict]) -> dict[int, dict]:
    """The newest worker pod of each completion index (a replaced pod, or an older attempt of
    the group, leaves its pods behind for a while)."""
    out: dict[int, dict] = {}
    for pod in sorted(
        worker_pods(pods),
        key=lambda p: (parse_time(p["metadata"].get("creationTimestamp")) or 0, p["metadata"]["name"]),
    ):
        out[pod_index(pod)] = pod
    return out


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase", "Pending")


def _gone(pod: dict) -> bool:
    return _phase(pod) == "Failed" or bool(pod["metadata"].get("deletionTimestamp"))


def failure_reason(pod: dict) -> str:
    """Why a pod ended or is being removed: eviction, preemption, an exit code."""
    st = pod.get("status") or {}
    for c in st.get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return c.get("reason") or "disrupted"
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        term = (cs.get("state") or {}).get("terminated")
        if term and term.get("exitCode", 0) == CONFIG_ERROR_EXIT_CODE:
            # The worker's one line, from the container's termination message.
            why = " ".join((term.get("message") or "").split()) or "see the pod's log"
            return (
                f"{cs['name']} exited {CONFIG_ERROR_EXIT_CODE}, a configuration error "
                f"that no restart fixes: {why}"
            )
        if term and term.get("exitCode", 0) != 0:
            return f"{cs['name']} exited {term.get('exitCode')} ({term.get('reason', 'Error')})"
    return st.get("reason") or ("deleted" if pod["metadata"].get("deletionTimestamp") else "failed")


def config_error(pod: dict) -> bool:
    """The pod's main container exited CONFIG_ERROR_EXIT_CODE (no GPU, no NCCL net plugin)."""
    return any(
        ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") == CONFIG_ERROR_EXIT_CODE
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
    )


def stuck_pod(pod: dict, now: float) -> dict | None:
    """A pod long past its deletion deadline, with what the cluster says of its node; None
    for any other pod."""
    meta, st = pod["metadata"], pod.get("status") or {}
    deadline = parse_time(meta.get("deletionTimestamp"))
    if deadline is None or now - deadline < STUCK_AFTER_S or _phase(pod) in ("Succeeded", "Failed"):
        return None
    conds = {c.get("type"): c for c in st.get("conditions") or []}
    signs = []
    target = conds.get("DisruptionTarget") or {}
    if target.get("status") == "True" and target.get("reason") in NODE_LOST_REASONS:
        signs.append(f"{target['reason']}: {target.get('message') or 'node lost'}")
    if (conds.get("Ready") or {}).get("status") == "False":
        signs.append("Ready=False")
    return {
        "pod": meta["name"],
        "node": (pod.get("spec") or {}).get("nodeName") or "",
        "deletion_deadline": meta.get("deletionTimestamp"),
        "overdue_s": int(now - deadline),
        "signs": signs,
    }


def stuck_message(stuck: list[dict], namespace: str | None) -> str:
    """What a person reads about stuck pods: which, where, why it matters, who acts."""
    first = stuck[0]
    node = f"node {first['node']}" if first["node"] else "no node"
    why = (
        "its node stopped reporting (" + "; ".join(first["signs"]) + ")"
        if first["signs"]
        else "its kubelet never confirmed it stopped"
    )
    more = f" (and {len(stuck) - 1} more pod(s))" if len(stuck) > 1 else ""
    ns = f" -n {namespace}" if namespace else ""
    return (
        f"stuck: pod {first['pod']} on {node}{more} is still terminating "
        f"{first['overdue_s'] // 60} min after its deletion deadline: {why}; the group "
        "restart (BlockingRecreate) waits until it is gone. A cluster admin who has "
        f"confirmed that {node} is down runs `kubectl delete pod {first['pod']}{ns} "
        "--force --grace-period=0`, or taints the node node.kubernetes.io/out-of-service "
        '(docs/kubernetes.md, "A pod stuck on a lost node")'
    )


def pending_reason(pod: dict) -> str:
    """What a pod that is not running yet waits for, in the cluster's own words."""
    st = pod.get("status") or {}
    for c in st.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"not scheduled: {c.get('message') or c.get('reason', '')}".rstrip(": ")
    for cs in st.get("initContainerStatuses") or []:
        state = cs.get("state") or {}
        waiting = state.get("waiting")
        if waiting and waiting.get("reason") not in (None, "PodInitializing"):
            return f"{cs['name']}: {waiting['reason']}" + (
                f": {waiting['message']}" if waiting.get("message") else ""
            )
        if state.get("running"):
            return "setting up the run directory and code snapshot"
    for cs in st.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return f"{cs['name']}: {waiting['reason']}" + (
                f": {waiting['message']}" if waiting.get("message") else ""
            )
    return "starting"


def _true(obj: dict | None) -> dict[str, dict]:
    return {
        c["type"]: c
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }


def _cond_message(c: dict) -> str:
    return ": ".join(x for x in (c.get("reason"), c.get("message")) if x)


def queue_state(workload: dict | None, queue: str, pods: int) -> tuple[str, str]:
    """(state, message) of a suspended run, from its Kueue Workload's conditions
    (kueue v0.13.4 apis/kueue/v1beta1/workload_types.go: QuotaReserved, Admitted, Evicted,
    Requeued)."""
    wl = _true(workload)
    every = ((workload or {}).get("status") or {}).get("conditions") or []
    if "Evicted" in wl and "Admitted" not in wl:
        return PREEMPTED, (
            f"preempted by Kueue ({_cond_message(wl['Evicted'])}); requeued "
            f"in queue {queue}, resumes from its newest checkpoint when "
            "admitted again"
        )
    if "Admitted" in wl:
        return ADMITTED, f"admitted by Kueue in queue {queue}; starting its {pods} pod(s)"
    why = next(
        (
            c
            for c in every
            if c.get("type") == "QuotaReserved" and c.get("status") == "False" and c.get("message")
        ),
        None,
    )
    if why is not None:  # e.g. "couldn't assign flavors to pod set worker: insufficient..."
        return QUEUED, f"waiting in Kueue queue {queue}: {why['message']}"
    return QUEUED, f"waiting in Kueue queue {queue} for admission of all {pods} pod(s)"


def run_status(
    job: dict, pods: list[dict], stack: str, workload: dict | None = None, now: float | None = None
) -> RunStatus:
    meta, spec, st = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    labels, ann = meta.get("labels") or {}, meta.get("annotations") or {}
    conds = _true(job)
    nodes = int(ann.get(NODES_ANNOTATION, 0))
    servers = int(ann.get(SERVERS_ANNOTATION, 0))
    restarts = int(st.get("restarts") or 0)  # every group restart: the pods' attempt number
    counted = int(st.get("restartsCountTowardsMax") or 0)  # those that spend max_restarts
    current = [p for p in worker_pods(pods) if attempt(p) >= restarts]
    newest = newest_pods(current)
    extra: dict[str, Any] = {
        "jobset": meta["name"],
        "namespace": meta.get("namespace"),
        "queue": labels.get(QUEUE_LABEL),
        "nodes": nodes,
        "procs_per_node": int(ann.get(PROCS_ANNOTATION, 1)),
        "parameter_servers": servers,
        "max_restarts": int(ann.get(MAX_RESTARTS_ANNOTATION, 0)),
        "pods": {i: p["metadata"]["name"] for i, p in sorted(newest.items())},
    }
    out = RunStatus(
        run_id=labels.get(RUN_LABEL, meta["name"]),
        name=labels.get(NAME_LABEL, ""),
        stack=stack,
        state=PENDING,
        created=parse_time(meta.get("creationTimestamp")),
        workers=int(ann.get(WORKERS_ANNOTATION, 0)),
        restarts=restarts,
        restarts_counted=counted,
        extra=extra,
    )
    if REQUIREMENTS_ANNOTATION in ann:  # the job's lock travels in its ConfigMap; its hash here
        out.requirements = {"sha256": ann[REQUIREMENTS_ANNOTATION]}
    failed_pods = [p for p in pods if _gone(p)]
    if "Completed" in conds:
        out.state = SUCCEEDED
        out.ended = parse_time(conds["Completed"].get("lastTransitionTime"))
        out.message = f"all {nodes} worker pod(s) completed"
    elif "Failed" in conds:
        c = conds["Failed"]
        out.state, out.message = FAILED, _cond_message(c)
        out.ended = parse_time(c.get("lastTransitionTime"))
        culprit = next(
            (
                p
                for p in sorted(failed_pods, key=lambda p: not config_error(p))
                if failure_reason(p) != "failed"
            ),
            None,
        )
        if culprit is not None:
            out.message += f" (pod {culprit['metadata']['name']}: {failure_reason(culprit)})"
    elif spec.get("suspend"):
        out.state, out.message = queue_state(workload, labels.get(QUEUE_LABEL, "?"), nodes + servers)
    else:
        _running_state(out, newest, pods, nodes, restarts, counted)
    if not out.finished:
        clock = time.time() if now is None else now
        stuck = [s for s in (stuck_pod(p, clock) for p in pods) if s is not None]
        if stuck:
            out.stuck_pods = stuck
            out.message = f"{stuck_message(stuck, meta.get('namespace'))}; {out.message}"
    return out


def restart_note(restarts: int, counted: int, max_restarts: int) -> str:
    """' (restart N of at most M)', or, when some restarts were preemptions that spend
    nothing, how many of N count towards M."""
    if not restarts:
        return ""
    if counted >= restarts:
        return f" (restart {restarts} of at most {max_restarts})"
    return (
        f" (restart {restarts}: {counted} of at most {max_restarts} counted, "
        f"{restarts - counted} after being stopped from outside)"
    )


def _running_state(
    out: RunStatus, newest: dict[int, dict], pods: list[dict], nodes: int, restarts: int, counted: int
) -> None:
    """An admitted, unsuspended run: running, starting (and why), or restarting."""
    broken = [p for _, p in sorted(newest.items()) if _gone(p)]
    old = [p for p in worker_pods(pods) if attempt(p) < restarts]
    not_running = [
        p for _, p in sorted(newest.items()) if not _gone(p) and _phase(p) not in ("Running", "Succeeded")
    ]
    of = restart_note(restarts, counted, out.extra["max_restarts"])
    if broken:
        p = broken[0]
        out.state = RESTARTING
        out.message = (
            f"pod {p['metadata']['name']} {failure_reason(p)}; "
            "restarting the group from its newest checkpoint"
        )
    elif old and (not_running or len(newest) < nodes):
        gone = [p for p in old if _gone(p)] or old
        out.state = RESTARTING
        out.message = (
            f"group restarting{of} after pod {gone[0]['metadata']['name']} {failure_reason(gone[0])}"
        )
    elif not not_running and len(newest) >= nodes:
        out.state = RUNNING
        out.message = f"{len(newest)} pod(s) running{of}"
    else:
        ready = sum(1 for p in newest.values() if _phase(p) in ("Running", "Succeeded"))
        out.message = f"{ready}/{nodes} worker pods running{of}"
        if not_running:
            p = not_running[0]
            out.message += f"; pod {p['metadata']['name']}: {pending_reason(p)}"
