"""A fake Kubernetes API at the client boundary (the far edge the standards allow faking).

It stands in for `kubernetes.client.CoreV1Api` and `BatchV1Api`: the same method names and
keyword arguments the backend passes to the real client, answered the way the API server
answers (JSON bodies with uid and creationTimestamp, the client's real ApiException for 404
and 409). Every call is recorded, so tests assert on what the backend asked the cluster to
do. There is no controller: tests set Job status and pods themselves.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import threading
import uuid
from typing import Any

from kubernetes.client.exceptions import ApiException

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.kubernetes.client import Cluster

KINDS = {"config_map": "ConfigMap", "service": "Service", "job": "Job", "pod": "Pod",
         "network_policy": "NetworkPolicy", "secret": "Secret"}
PLURALS = {"jobsets": "JobSet", "workloads": "Workload"}  # custom objects, by plural


class FakeResponse:
    """What the client returns with _preload_content=False: `.data` and `.stream()`."""

    def __init__(self, data: bytes, chunks: list[bytes] | None = None):
        self.data = data
        self._chunks = chunks if chunks is not None else [data]

    def stream(self, amt: int = 4096, decode_content: bool = True):
        yield from self._chunks


def _api_error(status: int, reason: str, message: str) -> ApiException:
    e = ApiException(status=status, reason=reason)
    e.body = json.dumps({"kind": "Status", "status": "Failure", "reason": reason,
                         "message": message, "code": status})
    return e


def _selector_matches(selector: str | None, labels: dict) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class _Api:
    def __init__(self, fake: "FakeKube", group: str):
        self._fake, self._group = fake, group

    def __getattr__(self, method: str):
        def call(*args: Any, **kw: Any):
            assert not args, f"{method}: the backend passes keyword arguments only"
            assert kw.pop("_preload_content", True) is False, \
                f"{method}: the backend must ask for the raw response"
            # One request at a time, as the API server answers each against one consistent
            # state: the --follow log thread calls while the main thread advances a timeline.
            with self._fake.lock:
                self._fake.calls.append((method, copy.deepcopy(kw)))
                return self._fake.handle(method, kw)
        return call


class FakeKube:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.objects: dict[tuple[str, str], dict] = {}
        self.pod_logs: dict[str, str] = {}  # pod name -> its log
        self.metrics: dict[str, str] = {}  # "pod:port" -> /metrics text
        self.fail: dict[str, ApiException] = {}  # method -> error to raise
        self.core, self.batch = _Api(self, "core"), _Api(self, "batch")
        self.custom, self.networking = _Api(self, "custom"), _Api(self, "networking")
        self._clock = itertools.count(1)
        self.on_call = None  # hook(fake, method) for scripted timelines
        self.lock = threading.RLock()

    def connector(self, out: StackOutput) -> Cluster:
        return Cluster(self.core, self.batch, out.stack, out.namespace,
                       custom=self.custom, networking=self.networking)

    # -- what tests look at -----------------------------------------------------------------

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]

    @staticmethod
    def _kind(method: str, kw: dict) -> str:
        rest = method.partition("_namespaced_")[2]
        return PLURALS[kw["plural"]] if rest == "custom_object" else KINDS[rest]

    def creates(self) -> list[tuple[str, str]]:
        return [(self._kind(m, kw), kw["body"]["metadata"]["name"])
                for m, kw in self.calls if m.startswith("create_namespaced_")]

    def deletes(self) -> list[tuple[str, str]]:
        return [(self._kind(m, kw), kw["name"])
                for m, kw in self.calls if m.startswith("delete_namespaced_")]

    # -- what tests set up -------------------------------------------------------------------

    def _stamp(self, obj: dict) -> dict:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", f"2026-01-01T12:{next(self._clock) % 60:02d}:00Z")
        return obj

    def copy_run(self, run_id: str, new_ids: list[str]) -> None:
        """More runs exactly like `run_id` (its JobSet and its pods), one per new id: many
        runs from one the backend really submitted."""
        from alchemist_jobs.contract import RUN_LABEL

        mine = [(kind, name, obj) for (kind, name), obj in self.objects.items()
                if kind in ("JobSet", "Pod")
                and obj["metadata"].get("labels", {}).get(RUN_LABEL) == run_id]
        for new_id in new_ids:
            for kind, name, obj in mine:
                twin = copy.deepcopy(obj)
                twin["metadata"].update(name=name.replace(run_id, new_id), uid=str(uuid.uuid4()))
                twin["metadata"]["labels"][RUN_LABEL] = new_id
                self.objects[(kind, twin["metadata"]["name"])] = twin

    def set_job(self, name: str, spec: dict | None = None, status: dict | None = None) -> dict:
        """Set the JobSet's spec fields or status."""
        job = self.objects[("JobSet", name)]
        if spec:
            job["spec"].update(spec)
        if status is not None:
            job["status"] = status
        return job

    def add_pod(self, job_name: str, index: int, phase: str = "Running", suffix: str = "",
                status: dict | None = None, log: str = "", created: str | None = None,
                rjob: str = "worker", attempt: int = 0) -> dict:
        """A pod as JobSet's Job for `rjob` makes it (labels from jobset v0.12.0
        api/jobset/v1alpha2/jobset_types.go and pkg/constants/constants.go)."""
        jobset = self.objects[("JobSet", job_name)]
        rj = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == rjob)
        job = rj["template"]
        labels = dict(job["spec"]["template"]["metadata"]["labels"])
        labels.update({"batch.kubernetes.io/job-completion-index": str(index),
                       "jobset.sigs.k8s.io/jobset-name": job_name,
                       "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                       "jobset.sigs.k8s.io/job-index": "0",
                       "jobset.sigs.k8s.io/restart-attempt": str(attempt)})
        # jobset v0.12.0 pkg/controllers/jobset_controller.go labelAndAnnotateObject: the
        # restart attempt is an annotation of the pod template too.
        annotations = {**job["spec"]["template"]["metadata"].get("annotations", {}),
                       "batch.kubernetes.io/job-completion-index": str(index),
                       "jobset.sigs.k8s.io/restart-attempt": str(attempt)}
        name = f"{job_name}-{rjob}-0-{index}-{suffix or 'abcde'}"
        pod = self._stamp({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": jobset["metadata"]["namespace"], "labels": labels,
            "annotations": annotations,
            **({"creationTimestamp": created} if created else {})},
            "spec": copy.deepcopy(job["spec"]["template"]["spec"]),
            "status": {"phase": phase, **(status or {})}})
        self.objects[("Pod", name)] = pod
        self.pod_logs[name] = log
        return pod

    # -- the controllers' answer to a failed pod, as upstream gives it ---------------------

    def fail_pod(self, pod_name: str, exit_code: int, message: str = "",
                 reason: str = "Error") -> str:
        """The pod's main container exits `exit_code` (with `message` as its termination
        message, as the kubelet reports it); the Job controller, then JobSet's failure policy,
        act on the JobSet's own rules. Returns the JobSet action taken."""
        pod = self.objects[("Pod", pod_name)]
        term = {"exitCode": exit_code, "reason": reason, **({"message": message} if message else {})}
        pod["status"] = {"phase": "Failed", "containerStatuses": [
            {"name": pod["spec"]["containers"][0]["name"], "state": {"terminated": term}}]}
        labels = pod["metadata"]["labels"]
        jobset_name = labels["jobset.sigs.k8s.io/jobset-name"]
        rjob = labels["jobset.sigs.k8s.io/replicatedjob-name"]
        failed = self.job_failure(jobset_name, rjob, pod)
        if failed is None:
            return "Ignore"
        return self.jobset_failure_policy(jobset_name, f"{jobset_name}-{rjob}-0", rjob, *failed)

    def job_failure(self, jobset_name: str, rjob: str, pod: dict) -> tuple[str, str] | None:
        """(reason, message) of the Job's Failed condition after `pod` failed, or None (an
        Ignore rule): kubernetes v1.33 pkg/controller/job/pod_failure_policy.go
        matchPodFailurePolicy (rules in order; onExitCodes over terminated containers with a
        non-zero code) and job_controller.go (FailJob: reason PodFailurePolicy; otherwise one
        failed pod exceeds backoffLimit 0: reason BackoffLimitExceeded)."""
        jobset = self.objects[("JobSet", jobset_name)]
        spec = next(r for r in jobset["spec"]["replicatedJobs"]
                    if r["name"] == rjob)["template"]["spec"]
        statuses = (pod["status"].get("containerStatuses") or []) + \
            (pod["status"].get("initContainerStatuses") or [])
        def matches(req: dict, cs: dict) -> bool:
            term = (cs.get("state") or {}).get("terminated")
            if not term or term["exitCode"] == 0 or \
                    req.get("containerName") not in (None, cs["name"]):
                return False
            return (term["exitCode"] in req["values"]) == (req["operator"] == "In")

        for index, rule in enumerate((spec.get("podFailurePolicy") or {}).get("rules", [])):
            cs = next((c for c in statuses if rule.get("onExitCodes")
                       and matches(rule["onExitCodes"], c)), None)
            if cs is None:
                continue
            if rule["action"] == "Ignore":
                return None
            if rule["action"] == "FailJob":
                meta = pod["metadata"]
                return ("PodFailurePolicy",
                        f"Container {cs['name']} for pod {meta['namespace']}/{meta['name']} "
                        f"failed with exit code {cs['state']['terminated']['exitCode']} "
                        f"matching FailJob rule at index {index}")
            break  # Count: counted against backoffLimit, as without a rule
        if 1 > spec.get("backoffLimit", 6):
            return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        return None

    def jobset_failure_policy(self, jobset_name: str, job: str, rjob: str, reason: str,
                              message: str) -> str:
        """jobset v0.12.0 pkg/controllers/failure_policy.go executeFailurePolicy: the first
        rule whose reasons, message patterns (Go regexp.MatchString: unanchored) and target
        replicatedJobs match the failed Job; none: RestartJobSet. RestartJobSet past
        maxRestarts (restartsCountTowardsMax) fails the JobSet (ReachedMaxRestarts)."""
        import re

        js = self.objects[("JobSet", jobset_name)]
        policy = js["spec"].get("failurePolicy")
        status = js.setdefault("status", {})

        def failed(cond_reason: str, base: str) -> str:
            status.setdefault("conditions", []).append({
                "type": "Failed", "status": "True", "reason": cond_reason,
                "message": f"{base} (first failed job: {job})",
                "lastTransitionTime": "2026-01-01T14:00:00Z"})
            return cond_reason

        if policy is None:
            return failed("FailedJobs", "jobset failed due to one or more job failures")
        action = "RestartJobSet"
        for rule in policy.get("rules", []):
            if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
                continue
            patterns = rule.get("onJobFailureMessagePatterns")
            if patterns and not any(re.search(p, message) for p in patterns):
                continue
            if rule.get("targetReplicatedJobs") and rjob not in rule["targetReplicatedJobs"]:
                continue
            action = rule["action"]
            break
        if action == "FailJobSet":
            return failed("FailJobSetFailurePolicyAction",
                          "applying FailJobSet failure policy action")
        if action == "RestartJobSet":
            if status.get("restartsCountTowardsMax", 0) >= policy.get("maxRestarts", 0):
                return failed("ReachedMaxRestarts",
                              "jobset failed due to reaching max number of restarts")
            status["restartsCountTowardsMax"] = status.get("restartsCountTowardsMax", 0) + 1
        status["restarts"] = status.get("restarts", 0) + 1
        return action

    # -- the API ------------------------------------------------------------------------------

    @staticmethod
    def _page(kind: str, items: list[dict], limit: int | None, token: str | None) -> dict:
        """A LIST answer as the API server gives it (k8s.io/apiserver at the pinned Kubernetes
        version, storage/etcd3 GetList; "Retrieving large results sets in chunks" in the API
        concepts): without `limit`, everything; with it, at most `limit` objects in key order
        (namespace/name), and while more match, `metadata.continue`, an opaque token the next
        request passes back as `continue`, with `remainingItemCount`."""
        meta: dict = {"resourceVersion": "1"}
        if not limit:
            return {"kind": f"{kind}List", "metadata": meta, "items": items}
        items = sorted(items, key=lambda o: o["metadata"]["name"])
        after = base64.urlsafe_b64decode(token.encode()).decode() if token else None
        if after is not None:
            items = [o for o in items if o["metadata"]["name"] > after]
        page, rest = items[:limit], items[limit:]
        if rest:
            last = page[-1]["metadata"]["name"]
            meta["continue"] = base64.urlsafe_b64encode(last.encode()).decode()
            meta["remainingItemCount"] = len(rest)
        return {"kind": f"{kind}List", "metadata": meta, "items": page}

    def _ok(self, obj: Any) -> FakeResponse:
        return FakeResponse(json.dumps(obj).encode())

    def handle(self, method: str, kw: dict) -> FakeResponse:
        if self.on_call:
            self.on_call(self, method)
        if method in self.fail:
            raise self.fail[method]
        verb, _, rest = method.partition("_namespaced_")
        if method == "read_namespaced_pod_log":
            name = kw["name"]
            if ("Pod", name) not in self.objects:
                raise _api_error(404, "NotFound", f'pods "{name}" not found')
            text = self.pod_logs.get(name, "")
            if kw.get("timestamps"):  # as the kubelet: an RFC3339Nano stamp and a space
                text = "".join(f"2026-01-01T12:00:00.{i + 1:09d}Z {line}"
                               for i, line in enumerate(text.splitlines(keepends=True)))
            text = text.encode()
            # Chunks that split lines: the backend must join them.
            return FakeResponse(text, [text[i:i + 7] for i in range(0, len(text), 7)])
        if method == "connect_get_namespaced_pod_proxy_with_path":
            text = self.metrics.get(kw["name"])
            if text is None:
                raise _api_error(503, "ServiceUnavailable", "no endpoints")
            return FakeResponse(text.encode())
        kind = PLURALS[kw["plural"]] if rest == "custom_object" else KINDS[rest]
        if rest == "custom_object":
            assert kw["group"] == {"JobSet": "jobset.x-k8s.io", "Workload": "kueue.x-k8s.io"}[kind]
        if verb == "get":
            verb = "read"
        if verb == "create":
            body = copy.deepcopy(kw["body"])
            key = (kind, body["metadata"]["name"])
            if key in self.objects:
                raise _api_error(409, "AlreadyExists", f"{kind} {key[1]} already exists")
            body["metadata"]["namespace"] = kw["namespace"]
            self.objects[key] = self._stamp(body)
            return self._ok(body)
        if verb == "list":
            items = [o for (k, _), o in self.objects.items() if k == kind
                     and o["metadata"].get("namespace") == kw["namespace"]
                     and _selector_matches(kw.get("label_selector"), o["metadata"].get("labels", {}))]
            return self._ok(self._page(kind, items, kw.get("limit"), kw.get("_continue")))
        key = (kind, kw["name"])
        if key not in self.objects:
            raise _api_error(404, "NotFound", f'{kind.lower()}s "{kw["name"]}" not found')
        if verb == "read":
            return self._ok(self.objects[key])
        if verb == "delete":
            del self.objects[key]
            return self._ok({"kind": "Status", "status": "Success"})
        if verb == "patch":
            for op in kw["body"]:  # JSON patch: only the `add` the backend uses
                assert op["op"] == "add"
                *parents, leaf = op["path"].strip("/").split("/")
                node = self.objects[key]
                for p in parents:
                    node = node[p]
                node[leaf] = op["value"]
            return self._ok(self.objects[key])
        raise AssertionError(f"the fake does not know {method}")
