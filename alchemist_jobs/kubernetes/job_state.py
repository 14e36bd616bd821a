"""A Job and its pods, as the API server reports them, become a RunStatus (pure).

    suspended, never started      -> pending    (waiting in the Kueue queue)
    admitted, pods not all running -> pending    (scheduling, pulling, setting up: the reason)
    every index's pod running      -> running
    a pod failed or evicted, its replacement not running yet -> restarting
    condition Complete             -> succeeded
    condition Failed/FailureTarget -> failed     (reason and message of the condition)
"""

from __future__ import annotations

import calendar
import time
from typing import Any

from alchemist_jobs.contract import RUN_LABEL
from alchemist_jobs.kubernetes.manifests import (INDEX_ANNOTATION, NAME_LABEL, NODES_ANNOTATION,
                                                 PROCS_ANNOTATION, QUEUE_LABEL,
                                                 SERVERS_ANNOTATION, WORKERS_ANNOTATION)
from alchemist_jobs.scheduler import (FAILED, PENDING, RESTARTING, RUNNING, SUCCEEDED,
                                      RunStatus)


def parse_time(ts: str | None) -> float | None:
    """RFC 3339 (`2026-01-01T12:00:00Z`, as the API server writes it) to epoch seconds."""
    if not ts:
        return None
    return float(calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S")))


def pod_index(pod: dict) -> int:
    meta = pod.get("metadata", {})
    value = (meta.get("annotations") or {}).get(INDEX_ANNOTATION) \
        or (meta.get("labels") or {}).get(INDEX_ANNOTATION)
    return int(value) if value is not None else -1


def newest_pods(pods: list[dict]) -> dict[int, dict]:
    """The newest pod of each completion index (a replaced pod leaves its failed one behind)."""
    out: dict[int, dict] = {}
    for pod in sorted(pods, key=lambda p: (parse_time(p["metadata"].get("creationTimestamp")) or 0,
                                           p["metadata"]["name"])):
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
        if term and term.get("exitCode", 0) != 0:
            return f"{cs['name']} exited {term.get('exitCode')} ({term.get('reason', 'Error')})"
    return st.get("reason") or ("deleted" if pod["metadata"].get("deletionTimestamp") else "failed")


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
                f": {waiting['message']}" if waiting.get("message") else "")
        if state.get("running"):
            return "setting up the run directory and code snapshot"
    for cs in st.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return f"{cs['name']}: {waiting['reason']}" + (
                f": {waiting['message']}" if waiting.get("message") else "")
    return "starting"


def run_status(job: dict, pods: list[dict], stack: str) -> RunStatus:
    meta, spec, st = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    labels, ann = meta.get("labels") or {}, meta.get("annotations") or {}
    conds = {c["type"]: c for c in st.get("conditions") or [] if c.get("status") == "True"}
    expected = int(spec.get("completions") or 0)
    failed_pods = [p for p in pods if _phase(p) == "Failed"]
    newest = newest_pods(pods)
    extra: dict[str, Any] = {
        "job": meta["name"], "namespace": meta.get("namespace"),
        "queue": labels.get(QUEUE_LABEL), "nodes": int(ann.get(NODES_ANNOTATION, 0)),
        "procs_per_node": int(ann.get(PROCS_ANNOTATION, 1)),
        "parameter_servers": int(ann.get(SERVERS_ANNOTATION, 0)),
        "pods": {i: p["metadata"]["name"] for i, p in sorted(newest.items())},
    }
    out = RunStatus(run_id=labels.get(RUN_LABEL, meta["name"]), name=labels.get(NAME_LABEL, ""),
                    stack=stack, state=PENDING, created=parse_time(meta.get("creationTimestamp")),
                    workers=int(ann.get(WORKERS_ANNOTATION, 0)), restarts=len(failed_pods),
                    extra=extra)

    def cond_message(c: dict) -> str:
        return ": ".join(x for x in (c.get("reason"), c.get("message")) if x)

    if "Complete" in conds or "SuccessCriteriaMet" in conds:
        out.state = SUCCEEDED
        c = conds.get("Complete") or conds["SuccessCriteriaMet"]
        out.ended = parse_time(st.get("completionTime") or c.get("lastTransitionTime"))
        out.message = f"all {expected} pod(s) completed"
    elif "Failed" in conds or "FailureTarget" in conds:
        c = conds.get("Failed") or conds["FailureTarget"]
        out.state, out.message = FAILED, cond_message(c)
        out.ended = parse_time(c.get("lastTransitionTime"))
        culprit = next((p for p in failed_pods if failure_reason(p) != "failed"), None)
        if culprit is not None:
            out.message += f" (pod {culprit['metadata']['name']}: {failure_reason(culprit)})"
    elif spec.get("suspend"):
        queue = labels.get(QUEUE_LABEL, "?")
        if st.get("startTime"):  # it ran before: Kueue took it back (preemption)
            out.message = (f"suspended (preempted?); waiting in Kueue queue {queue} "
                           "to be admitted again")
        else:
            out.message = f"waiting in Kueue queue {queue} for admission of all {expected} pods"
    else:
        broken = [p for i, p in sorted(newest.items()) if _gone(p)]
        not_running = [p for i, p in sorted(newest.items()) if not _gone(p)
                       and _phase(p) not in ("Running", "Succeeded")]
        missing = expected - len(newest)
        if broken or (failed_pods and (not_running or missing)):
            p = broken[0] if broken else failed_pods[-1]
            out.state = RESTARTING
            out.message = f"pod {p['metadata']['name']} {failure_reason(p)}; replacing it"
        elif not not_running and missing <= 0:
            out.state = RUNNING
            out.message = f"{len(newest)} pod(s) running"
        else:
            ready = sum(1 for p in newest.values() if _phase(p) in ("Running", "Succeeded"))
            out.message = f"{ready}/{expected} pods running"
            if not_running:
                p = not_running[0]
                out.message += f"; pod {p['metadata']['name']}: {pending_reason(p)}"
    return out
