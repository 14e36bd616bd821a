"""The Kubernetes backend behind the scheduler interface: a spec becomes manifests (`dryrun`,
pure) and objects on the stack's cluster (`schedule`); `status`, `logs`, `cancel` and `list`
read and act on them through the API. Runs are found by their `alchemist.io/run` label.

A cluster job runs on its own: `schedule` returns once the objects exist, and `follow`
(used by `alchemist run` and `submit --follow`) watches it without owning it; Ctrl-C
detaches, `alchemist cancel` stops it.
"""

from __future__ import annotations

import builtins
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alchemist_jobs import job_env
from alchemist_jobs.contract import MANAGED_BY_LABEL, PROGRESS_LINE_PREFIX, RUN_LABEL, StackOutput
from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes import manifests as mf
from alchemist_jobs.kubernetes.api_checks import validate_for_api_server
from alchemist_jobs.kubernetes.client import Cluster, ClusterError, Connector, NotFound
from alchemist_jobs.kubernetes.code_assets import CodeSnapshot, pack
from alchemist_jobs.kubernetes.job_state import newest_pods, parse_time, run_status
from alchemist_jobs.launch_plan import LaunchPlan
from alchemist_jobs.rundir import default_root, new_run_id
from alchemist_jobs.runtime import framework_env
from alchemist_jobs.scheduler import CANCELLED, Placement, Request, RunStatus, Scheduler
from alchemist_jobs.spec import JobSpec
from alchemist_jobs.stack_kinds import CLUSTER

POLL_S = 2.0
LOG_REATTACH_MARGIN_S = 300
PROGRESS_TAIL_LINES = 200
LIST_PAGE = 500  # objects per LIST request; the rest follow a continue token
_JOBSET = {"group": mf.JOBSET_API[0], "version": mf.JOBSET_API[1], "plural": mf.JOBSET_API[2]}
# Kueue v0.13.4 Workloads: one per JobSet, labelled with the JobSet's uid
# (kueue pkg/controller/constants JobUIDLabel).
_WORKLOAD = {"group": "kueue.x-k8s.io", "version": "v1beta1", "plural": "workloads"}
WORKLOAD_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# kind -> verb -> (API group, client method), spelled out so the platform's RBAC test can
# find every call the backend makes.
_API = {
    "ConfigMap": {
        "create": ("core", "create_namespaced_config_map"),
        "patch": ("core", "patch_namespaced_config_map"),
        "delete": ("core", "delete_namespaced_config_map"),
    },
    "NetworkPolicy": {
        "create": ("networking", "create_namespaced_network_policy"),
        "patch": ("networking", "patch_namespaced_network_policy"),
        "delete": ("networking", "delete_namespaced_network_policy"),
    },
    "JobSet": {
        "create": ("custom", "create_namespaced_custom_object"),
        "delete": ("custom", "delete_namespaced_custom_object"),
    },
}
_KW = {"JobSet": _JOBSET}
_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z")
_RANK_LINE = re.compile(r"\[rank\d+\]: ")
_REF = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,62}")


@dataclass
class KubeRequest(Request):
    run_id: str
    stack: StackOutput
    spec: JobSpec
    manifests: list[dict]
    code: CodeSnapshot | None = None
    data_upload: Any = None  # (directory, s3 URI): a local data.source, pushed at submit
    # What the manifests materialise (launch_plan.py): the roles a local run would start too.
    plan: LaunchPlan | None = None

    @property
    def name(self) -> str:
        return self.manifests[-1]["metadata"]["name"]

    def describe(self) -> str:
        s = self.stack
        plan = self.plan or mf.plan(self.spec, s, self.run_id)
        ps = plan.servers
        servers = ps.replicas if ps else 0
        head = [
            f"# run {self.run_id} on stack {s.stack}: {plan.workers.replicas} pod(s) x "
            f"{plan.workers.procs_per_replica} worker(s)"
            + (f" + {servers} parameter-server pod(s)" if servers else "")
            + f", namespace {s.namespace}, Kueue queue {s.queue}"
        ]
        if self.code is not None:
            head.append(
                f"# code snapshot {self.code.digest}: {len(self.code.files)} file(s) "
                f"from {self.code.root}, {len(self.code.tarball)} bytes packed"
            )
            head += [f"#   ships {f}" for f in self.code.files]
        head += framework_env.dry_run_lines(  # each TF/JAX worker's variables, TF_CONFIG's task too
            self.spec.task.framework,
            self.spec.nodes,
            self.spec.procs_per_node,
            self._worker_env(),
            local=False,
        )
        return "\n".join(head) + "\n" + mf.to_yaml(self.manifests)

    def _worker_env(self) -> dict[str, str]:
        """The literal variables of the JobSet's worker container (what every worker starts with)."""
        for o in self.manifests:
            if o.get("kind") != "JobSet":
                continue
            for rj in o["spec"]["replicatedJobs"]:
                if rj["name"] == mf.WORKER_RJOB:
                    (container, *_) = rj["template"]["spec"]["template"]["spec"]["containers"]
                    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        return {}


@dataclass
class KubeHandle:
    run_id: str
    name: str
    namespace: str
    spec: JobSpec
    created: list[tuple[str, str]] = field(default_factory=list)


def rank_pod_index(rank: int, nodes: int, procs_per_node: int) -> int:
    """The completion index of the pod that runs a global rank.

    torchrun's c10d rendezvous numbers nodes in the order of their host names
    (`<job>-<index>.<service>...`), which is text order, not number order: with 12 pods,
    node 2 is pod 10. Each node's ranks are node * procs_per_node + local rank.
    """
    order = sorted(range(nodes), key=lambda i: f"{i}.")
    return order[rank // procs_per_node]


class LogCursor:
    """Where a pod's log was read up to, so a reattached stream repeats no line: lines carry the API server's RFC 3339 timestamps
    (`timestamps=true`), which are stripped here."""

    def __init__(self) -> None:
        self.last, self.at_last = "", 0  # newest timestamp seen; lines seen with it

    def since_seconds(self) -> int | None:
        """`sinceSeconds` for a reattach (the generated client has no `sinceTime`): back to
        the newest line seen, with a margin for clock skew; the overlap is dropped here."""
        if not self.last:
            return None
        newest = parse_time(self.last) or 0.0
        return max(1, int(time.time() - newest) + LOG_REATTACH_MARGIN_S)

    def new_lines(self, lines: Iterator[str]) -> Iterator[str]:
        start, skip = self.last, self.at_last  # what the previous streams already gave
        for line in lines:
            raw, sep, text = line.partition(" ")
            ts = _nanos(raw) if sep else ""
            if not ts:  # no timestamp: pass through
                yield line
                continue
            if ts < start:
                continue
            if ts == start and skip:
                skip -= 1
                continue
            if ts == self.last:
                self.at_last += 1
            else:
                self.last, self.at_last = ts, 1
            yield text


def _nanos(ts: str) -> str:
    """An RFC 3339 timestamp with exactly nine fraction digits (Go's RFC3339Nano trims
    trailing zeros), so that text order is time order; "" if `ts` is not one."""
    m = _TIMESTAMP.fullmatch(ts)
    return f"{m[1]}.{(m[2] or '').ljust(9, '0')}Z" if m else ""


def _lines(resp: Any) -> Iterator[str]:
    """Whole lines from a streamed log response."""
    rest = ""
    for chunk in resp.stream(4096, decode_content=True):
        rest += chunk.decode("utf-8", errors="replace") if isinstance(chunk, bytes) else chunk
        *whole, rest = rest.split("\n")
        for line in whole:
            yield line + "\n"
    if rest:
        yield rest


class KubernetesScheduler(Scheduler[KubeRequest, KubeHandle]):
    capabilities = CLUSTER

    def run_id(self, handle: KubeHandle) -> str:
        return handle.run_id

    def __init__(self, out: StackOutput, connector: Connector | None = None, team: str | None = None):
        self.out = out.for_team(team)  # None: the team `out` is already (the stack's default)
        self.stack = out.stack
        self._connector = connector
        self._cluster: Cluster | None = None

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            if self._connector is None:
                from alchemist_jobs.kubernetes.client import connect

                self._connector = connect
            self._cluster = self._connector(self.out)
        return self._cluster

    # -- dryrun / schedule --------------------------------------------------------------------

    def dryrun(self, spec: JobSpec, spec_dir: Path, run_id: str | None = None) -> KubeRequest:
        """The manifests; reads the code directory, touches no cluster."""
        mf.check_fits(spec, self.out)  # cheap refusals before packing anything
        code = None
        if not spec.task.builtin:  # a script, a module or an entry: the user's code travels
            code = pack(Path(spec_dir), source="task", ship_secrets=spec.ship_secrets)
            for field, rel in (("task.script", spec.task.script), ("task.entry", spec.task.entry_file)):
                if rel:
                    _check_shipped(rel, code, field)

        from alchemist_jobs.data.pods import plan_local_source

        run_id = run_id or new_run_id(spec.name)
        spec, upload = plan_local_source(spec, self.out)  # where a local data.source will live
        # The job's own packages, resolved here once (cached under the home) like a local run's.
        assert not isinstance(spec.requirements, str)  # parse_spec has read a file's lines
        deps = job_env.resolve(spec.requirements, default_root()) if spec.requirements else None
        plan = mf.plan(spec, self.out, run_id)
        manifests = mf.build(spec, self.out, run_id, code, deps=deps, launch=plan)
        validate_for_api_server(manifests)  # what the API server would refuse, said now
        return KubeRequest(
            run_id=run_id,
            stack=self.out,
            spec=spec,
            manifests=manifests,
            code=code,
            data_upload=upload,
            plan=plan,
        )

    def schedule(self, request: KubeRequest, warm: Any = None) -> KubeHandle:
        """ConfigMap and NetworkPolicy, then the JobSet; then the JobSet owns the other two,
        so its TTL (or a cancel) removes them all. If anything fails, what was created is
        deleted again. Checks the API server would make first (validate_for_api_server).
        A cluster job has no use for a `warm` agent: it is discarded."""
        if warm is not None:
            warm.discard()

        validate_for_api_server(request.manifests)
        if request.data_upload is not None:  # the data first: pods stage it as they start
            from alchemist_jobs.data.pods import push_planned

            push_planned(self.out, request.data_upload)
        c = self.cluster
        handle = KubeHandle(
            run_id=request.run_id, name=request.name, namespace=c.namespace, spec=request.spec
        )
        try:
            owner_obj = {}
            for obj in request.manifests:
                api, method = _API[obj["kind"]]["create"]
                owner_obj = c.call(api, method, namespace=c.namespace, body=obj, **_KW.get(obj["kind"], {}))
                handle.created.append((obj["kind"], obj["metadata"]["name"]))
            owner = [
                {
                    "apiVersion": owner_obj["apiVersion"],
                    "kind": owner_obj["kind"],
                    "name": handle.name,
                    "uid": owner_obj["metadata"]["uid"],
                    "blockOwnerDeletion": False,
                }
            ]
            for kind, name in handle.created[:-1]:
                api, method = _API[kind]["patch"]
                c.call(
                    api,
                    method,
                    name=name,
                    namespace=c.namespace,
                    **_KW.get(kind, {}),
                    body=[{"op": "add", "path": "/metadata/ownerReferences", "value": owner}],
                )
        except BaseException:
            self._delete(handle.created)
            raise
        return handle

    def _delete(self, objects: list[tuple[str, str]]) -> None:
        for kind, name in reversed(objects):
            api, method = _API[kind]["delete"]
            kw = dict(_KW.get(kind, {}))
            if kind == "JobSet":  # its Jobs and their pods go too
                kw["propagation_policy"] = "Background"
            try:
                self.cluster.call(api, method, name=name, namespace=self.cluster.namespace, **kw)
            except NotFound:
                pass

    # -- finding runs -------------------------------------------------------------------------

    def _list(self, api: str, method: str, selector: str, **kw: Any) -> list[dict]:
        """Every object the selector matches, LIST_PAGE at a time: the API server answers a
        `limit` with that many and a `continue` token for the rest ("Retrieving large results
        sets in chunks", Kubernetes API concepts), so neither side holds 10,000 JobSets in
        one response."""
        items: list[dict] = []
        token = None
        while True:
            page = self.cluster.call(
                api,
                method,
                namespace=self.cluster.namespace,
                label_selector=selector,
                limit=LIST_PAGE,
                **({"_continue": token} if token else {}),
                **kw,
            )
            items += page.get("items", [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _jobsets(self, selector: str) -> list[dict]:
        return self._list("custom", "list_namespaced_custom_object", selector, **_JOBSET)

    def _workload(self, jobset: dict) -> dict | None:
        """Kueue's Workload of a JobSet (why it waits), or None where it cannot be read."""
        uid = jobset["metadata"].get("uid")
        if not uid:
            return None
        try:
            items = self._list(
                "custom", "list_namespaced_custom_object", f"{WORKLOAD_JOB_UID_LABEL}={uid}", **_WORKLOAD
            )
        except ClusterError:  # no Kueue, or no right to read Workloads: pods still tell
            return None
        return items[0] if items else None

    def _managed(self) -> str:
        return f"{MANAGED_BY_LABEL[0]}={MANAGED_BY_LABEL[1]}"

    def _job(self, ref: str) -> dict:
        """A run's Job by run id, or by a unique prefix of one."""
        if not _REF.fullmatch(ref):
            raise UserError(f"run {ref!r}: not a run id; accepted: letters, digits, '-', '.', '_'")
        jobs = self._jobsets(f"{RUN_LABEL}={ref}")
        if not jobs:
            every = self._jobsets(self._managed())
            jobs = [j for j in every if j["metadata"]["labels"].get(RUN_LABEL, "").startswith(ref)]
            if len(jobs) != 1:
                recent = sorted(every, key=lambda j: j["metadata"].get("creationTimestamp", ""))
                ids = [j["metadata"]["labels"].get(RUN_LABEL) for j in recent][-5:]
                what = "matches several runs" if jobs else "no such run"
                hint = f"; recent runs: {', '.join(ids)}" if ids else "; there are no runs"
                raise UserError(
                    f"run {ref!r}: {what} on stack {self.stack} (namespace "
                    f"{self.cluster.namespace}; finished runs are removed after "
                    f"{mf.TTL_AFTER_FINISHED_S // 86400} days){hint}"
                )
        return jobs[0]

    def _pods(self, run_id: str) -> list[dict]:
        return self._list("core", "list_namespaced_pod", f"{RUN_LABEL}={run_id}")

    # -- status / list / cancel ----------------------------------------------------------------

    def _status(self, job: dict, pods: list[dict], workload: dict | None = None) -> RunStatus:
        st = run_status(job, pods, self.stack, workload)
        # Where the pods keep the run (checkpoints, TensorBoard, logs/torchrun): the shared FS.
        st.extra["run_dir"] = st.run_dir = mf.shared_paths(self.out, st.run_id)[1]
        return st

    def status(self, run_id: str) -> RunStatus:
        job = self._job(run_id)
        return self._status(job, self._pods(job["metadata"]["labels"][RUN_LABEL]), self._workload(job))

    def list(self) -> list[RunStatus]:
        jobs = self._jobsets(self._managed())
        pods = self._list("core", "list_namespaced_pod", self._managed())
        try:
            workloads = {
                w["metadata"].get("labels", {}).get(WORKLOAD_JOB_UID_LABEL): w
                for w in self._list("custom", "list_namespaced_custom_object", "", **_WORKLOAD)
            }
        except ClusterError:
            workloads = {}
        by_run: dict[str, list[dict]] = {}
        for p in pods:
            by_run.setdefault(p["metadata"]["labels"].get(RUN_LABEL, ""), []).append(p)
        out = [
            self._status(
                j,
                by_run.get(j["metadata"]["labels"].get(RUN_LABEL, ""), []),
                workloads.get(j["metadata"].get("uid")),
            )
            for j in jobs
        ]
        return sorted(out, key=lambda s: s.created or 0)

    def cancel(self, run_id: str) -> RunStatus:
        job = self._job(run_id)
        st = run_status(job, self._pods(job["metadata"]["labels"][RUN_LABEL]), self.stack)
        if st.finished:
            return st
        name = job["metadata"]["name"]
        # The JobSet first: its Jobs, pods and Service go (Background propagation), then
        # what it owns but a failed owner patch might have left.
        self._delete([("ConfigMap", name), ("NetworkPolicy", name), ("JobSet", name)])
        st.state, st.ended = CANCELLED, time.time()
        st.message = "cancelled: JobSet (its Jobs, pods and Service), ConfigMap deleted"
        return st

    # -- logs ----------------------------------------------------------------------------------

    def placements(self, status: RunStatus) -> builtins.list[Placement]:
        """Each rank with the pod that runs it (several ranks share a pod on a multi-process
        node); a rank whose pod is not there yet waits."""
        pods = status.extra.get("pods") or {}
        nodes, per = status.extra.get("nodes") or 1, status.extra.get("procs_per_node") or 1
        out = []
        for rank in range(min(status.workers, nodes * per)):
            pod = pods.get(rank_pod_index(rank, nodes, per))
            out.append(
                Placement(
                    index=rank,
                    state=status.state if pod else "pending",
                    node=str(pod or ""),
                    restarts=status.restarts,
                )
            )
        return out

    def logs(
        self, run_id: str, rank: int = 0, follow: bool = False, stop: threading.Event | None = None
    ) -> Iterator[str]:
        """Rank N's lines from the pod that runs it (torchrun prefixes each with its rank).
        With `follow`, `stop` (once set) ends the following: what is left is read once."""
        job = self._job(run_id)
        run_id = job["metadata"]["labels"][RUN_LABEL]
        st = run_status(job, self._pods(run_id), self.stack)
        if not 0 <= rank < max(st.workers, 1):
            raise UserError(f"--rank {rank}: run {run_id} has ranks 0..{st.workers - 1}")
        index = rank_pod_index(rank, st.extra["nodes"], st.extra["procs_per_node"])
        prefix = mf.LOG_PREFIX_TEMPLATE.replace("${rank}", str(rank))
        return self._follow_pod_log(run_id, index, prefix, follow, stop or threading.Event())

    def _follow_pod_log(
        self, run_id: str, index: int, prefix: str, follow: bool, stop: threading.Event
    ) -> Iterator[str]:
        """The lines of `prefix` (one rank) and torchrun's own agent lines from the pod of
        `index`; with `follow`, reattaches when a stream drops while the pod still runs, and
        moves on to the replacement pod when the group restarts, until `stop` is set."""
        seen: set[str] = set()  # pods whose log was read to their end
        cursor: dict[str, LogCursor] = {}
        while True:
            stopping = follow and stop.is_set()
            if stopping:  # the follower is done with the run: read what is left, once
                follow = False
            job, all_pods = self._job(run_id), self._pods(run_id)
            st = run_status(job, all_pods, self.stack)
            pod = newest_pods(all_pods).get(index)
            started = (
                pod is not None
                and pod["metadata"]["name"] not in seen
                and (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
            )
            if pod is None or not started:
                if st.finished or not follow:
                    if seen or stopping:
                        return
                    raise UserError(f"run {run_id}: pod {index} has no log yet ({st.state}: {st.message})")
                stop.wait(POLL_S)
                continue
            name = pod["metadata"]["name"]
            at = cursor.setdefault(name, LogCursor())
            since = at.since_seconds()
            kw = {"since_seconds": since} if since else {}
            try:
                resp = self.cluster.raw(
                    "core",
                    "read_namespaced_pod_log",
                    name=name,
                    namespace=self.cluster.namespace,
                    timestamps=True,
                    container=mf.CONTAINER,
                    follow=follow,
                    **kw,
                )
            except NotFound:  # deleted meanwhile: a replacement, if any, is found next round
                seen.add(name)
                continue
            try:
                for line in at.new_lines(_lines(resp)):
                    if line.startswith(prefix):
                        if not line.startswith(PROGRESS_LINE_PREFIX, len(prefix)):
                            yield line[len(prefix) :]
                    elif not _RANK_LINE.match(line):  # the agent's own lines (errors too)
                        yield line
            except ClusterError:  # the stream broke mid-way: reattach below
                pass
            if not follow:
                return
            # A stream ends when its pod does, or when a connection drops (API server
            # restart, load balancer idle timeout): reattach unless the pod has finished.
            if (pod.get("status") or {}).get("phase") != "Running" or self._pod_done(name):
                seen.add(name)
            else:  # a stream that keeps ending at once must not become a busy loop of reads
                stop.wait(POLL_S)

    def _pod_done(self, name: str) -> bool:
        pod = self.cluster.get("core", "read_namespaced_pod", name=name, namespace=self.cluster.namespace)
        return (
            pod is None
            or bool(pod["metadata"].get("deletionTimestamp"))
            or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        )

    def progress(self, st: RunStatus) -> dict | None:
        """Rank 0's newest progress line from the tail of its pod log, through the API server
        (pods/log reaches the kubelet, not the pod's network, so the platform's default-deny
        NetworkPolicy does not stand in the way), with the client's request timeout."""
        pod = st.extra["pods"].get(rank_pod_index(0, st.extra["nodes"] or 1, 1))
        if pod is None:
            return None
        try:
            resp = self.cluster.raw(
                "core",
                "read_namespaced_pod_log",
                name=pod,
                namespace=self.cluster.namespace,
                container=mf.CONTAINER,
                tail_lines=PROGRESS_TAIL_LINES,
            )
        except (NotFound, ClusterError):
            return None
        text = resp.data.decode(errors="replace") if isinstance(resp.data, bytes) else str(resp.data)
        marker = mf.LOG_PREFIX_TEMPLATE.replace("${rank}", "0") + PROGRESS_LINE_PREFIX
        for line in reversed(text.splitlines()):
            if line.startswith(marker):
                try:
                    return json.loads(line[len(marker) :])
                except ValueError:
                    continue
        return None


def _check_shipped(script: str, code: CodeSnapshot, field: str = "task.script") -> None:
    path = (code.root / script).resolve()
    try:
        rel = path.relative_to(code.root).as_posix()
    except ValueError:
        raise UserError(
            f"{field}: {script!r} lies outside {code.root}, the directory "
            "that ships to the cluster; accepted: a file inside the spec's "
            "directory"
        ) from None
    if rel not in code.files:
        raise UserError(
            f"{field}: {script!r} is excluded by .gitignore or "
            ".alchemistignore, so it would not ship; accepted: a file that is "
            "not ignored"
        )
