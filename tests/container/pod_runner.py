"""Run a rendered job's pods as podman containers, as the kubelet and the Job/JobSet controllers would.

Only the control plane is emulated; every container is the real image running the manifest's
own command. What each piece copies, and from where (upstream, at the versions we target):

* Pod templates are found anywhere in the rendered objects. Pods are named by the controller
  that owns them: an Indexed Job's pods get the hostname `<job>-<index>` and the env var
  JOB_COMPLETION_INDEX in every container, init containers included (kubernetes v1.31
  pkg/controller/job/indexed_job_utils.go: addCompletionIndexEnvVariables, podGenerateName);
  a JobSet's child Jobs are `<jobset>-<replicatedJob>-<jobIndex>` with the pod subdomain
  `spec.network.subdomain`, defaulting to the JobSet's name (kubernetes-sigs/jobset v0.12.0
  pkg/util/placement/placement.go GenJobName; pkg/controllers/jobset_controller.go).
* Names resolve as a headless Service with publishNotReadyAddresses makes them resolve:
  `<hostname>.<subdomain>` (and the FQDN) for every pod the Service selects.
* The kubelet's container settings: command replaces the entrypoint and args the CMD, $(VAR)
  references expand from the container's env, the pod's and container's securityContext
  (user, group, fsGroup as a supplementary group, dropped capabilities, no privilege
  escalation, read-only root without podman's extra tmpfs mounts), memory limits, an emptyDir
  of medium Memory at /dev/shm sized by its sizeLimit, ConfigMap volumes as read-only files,
  and a PVC as the host directory the test gives for the claim. Init containers run to
  completion, in order, before the pod's containers start (restartPolicy Never).
* Failures: a Job's podFailurePolicy (FailJob on exit codes, reason PodFailurePolicy) or its
  backoffLimit (reason BackoffLimitExceeded; below it the failed index is recreated alone);
  a JobSet restarts every child Job (all pods recreated) while its failurePolicy's
  maxRestarts allows (jobset v0.12.0 pkg/controllers/failure_policy.go, default action
  RestartJobSet), else fails.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

PODMAN = ["podman"]  # its settings (runtime, ulimits) come from CONTAINERS_CONF: see conftest


def podman(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:3])}...: {proc.stderr.strip()[-2000:]}")
    return proc


def run_in(image: str, *argv: str, user: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command in a throw-away container of the image."""
    cmd = [*PODMAN, "run", "--rm", "--network", "none"]
    cmd += ["--user", user] if user else []
    proc = subprocess.run([*cmd, image, *argv], capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, f"{argv}: {proc.stderr[-3000:]}"
    return proc


@dataclass
class Pod:
    """One pod a controller would create: its identity and its (unchanged) template."""
    name: str
    hostname: str
    subdomain: str | None
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]
    owner: "Group"
    index: int
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass
class Group:
    """A Job (standalone, or a JobSet's child): its pods and its failure rules."""
    name: str
    job_spec: dict[str, Any]
    pods: list[Pod] = field(default_factory=list)


def _quantity_bytes(q: str | int) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", str(q))
    assert m and (m.group(2) == "" or m.group(2) in units), f"quantity {q!r}"
    return int(m.group(1)) * units.get(m.group(2), 1)


def _pods_of_job(job_name: str, job_spec: dict, namespace: str, subdomain: str | None,
                 labels: dict, annotations: dict) -> Group:
    group = Group(job_name, job_spec)
    tmpl = job_spec["template"]
    assert job_spec.get("completionMode") == "Indexed", "only Indexed Jobs name their pods stably"
    for i in range(int(job_spec.get("completions", 1))):
        meta = tmpl.get("metadata", {})
        spec = tmpl["spec"]
        group.pods.append(Pod(
            # generateName `<job>-<index>-`: the API server appends five random characters
            name=f"{job_name}-{i}-{secrets.token_hex(3)[:5]}", hostname=f"{job_name}-{i}",
            subdomain=subdomain or spec.get("subdomain"), namespace=namespace,
            labels={**meta.get("labels", {}), **labels, "batch.kubernetes.io/job-completion-index": str(i)},
            annotations={**meta.get("annotations", {}), **annotations,
                         "batch.kubernetes.io/job-completion-index": str(i)},
            spec=spec, owner=group, index=i, extra_env={"JOB_COMPLETION_INDEX": str(i)}))
    return group


def groups_of(objects: list[dict]) -> tuple[list[Group], dict | None]:
    """Every pod the rendered objects make, grouped by Job; and the JobSet, if any."""
    groups, jobset = [], None
    for obj in objects:
        kind, meta = obj.get("kind"), obj.get("metadata", {})
        ns = meta.get("namespace", "default")
        if kind == "Job":
            groups.append(_pods_of_job(meta["name"], obj["spec"], ns, None, {}, {}))
        elif kind == "JobSet":
            jobset = obj
            sub = (obj["spec"].get("network") or {}).get("subdomain") or meta["name"]
            for rj in obj["spec"]["replicatedJobs"]:
                for j in range(int(rj.get("replicas", 1))):
                    name = f"{meta['name']}-{rj['name']}-{j}"
                    marks = {"jobset.sigs.k8s.io/jobset-name": meta["name"],
                             "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                             "jobset.sigs.k8s.io/job-index": str(j)}
                    groups.append(_pods_of_job(name, rj["template"]["spec"], ns, sub, marks, marks))
        elif _has_pod_template(obj):
            raise NotImplementedError(f"{kind}: a pod template under a controller this runner does not know")
    return groups, jobset


def _has_pod_template(obj: Any) -> bool:
    if isinstance(obj, dict):
        if "containers" in obj and isinstance(obj["containers"], list):
            return True
        return any(_has_pod_template(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_pod_template(v) for v in obj)
    return False


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: known names expand, $$ escapes, unknown refs stay."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


# podman's container states (containers/podman v5 libpod/define/containerstate.go, as
# `inspect` prints them): "created" (configured), "initialized" (created in the OCI runtime),
# "running", "paused", "stopping" and "removing" (transitional), "stopped" (the process has
# exited; podman has not cleaned up yet) and "exited" (exited and cleaned up). Under load a
# finished container stays "stopped" for a while, with its exit code already set.
_NOT_STARTED = {"created", "initialized", "configured"}
_STARTED = {"running", "paused", "stopping"}
_FINISHED = {"stopped", "exited"}


def container_phase(state: str, code: int) -> tuple[str, int | None]:
    """The kubelet's view of a podman container: ("pending", None) before its process starts,
    ("running", None) until it has exited, then ("exited", exit code); anything else
    (removed, unknown) is ("failed", None)."""
    if state in _NOT_STARTED:
        return "pending", None
    if state in _STARTED:
        return "running", None
    if state in _FINISHED:
        return "exited", code
    return "failed", None


class Cluster:
    """The pods of one run on a podman network, with the controllers' restart behaviour."""

    def __init__(self, objects: list[dict], claims: dict[str, Path], workdir: Path, tag: str,
                 secret_values: dict[tuple[str, str], str] | None = None):
        self.objects, self.claims, self.workdir, self.tag = objects, claims, workdir, tag
        self.secrets = secret_values or {}  # (Secret name, key) -> value, for secretKeyRef
        self.groups, self.jobset = groups_of(objects)
        self.pods = [p for g in self.groups for p in g.pods]
        self.tag = f"{tag}-{secrets.token_hex(3)}"  # unique: a crashed run leaves its network
        self.network = f"alc-{self.tag}"
        self.subnet = ""
        self.ips: dict[str, str] = {}
        self.containers: dict[str, str] = {}  # pod name -> its running container
        self.restarts = 0
        self.events: list[str] = []
        self.init_logs: dict[str, str] = {}

    # --- the pod network and names -------------------------------------------------------
    def __enter__(self) -> "Cluster":
        for _ in range(20):  # a free /24 for the pod network (others' networks may hold some)
            self.subnet = f"10.{secrets.choice(range(100, 250))}.{secrets.choice(range(250))}"
            if podman("network", "create", "--subnet", f"{self.subnet}.0/24", self.network,
                      check=False).returncode == 0:
                break
        else:
            raise RuntimeError("no free subnet for the pod network")
        self.ips = {p.name: f"{self.subnet}.{10 + i}" for i, p in enumerate(self.pods)}
        return self

    def __exit__(self, *exc) -> None:
        for c in podman("ps", "-a", "--filter", f"label=alchemist.test/cluster={self.tag}",
                        "--format", "{{.ID}}", check=False).stdout.split():
            podman("rm", "-f", "-t", "0", c, check=False)
        podman("network", "rm", "-f", self.network, check=False)

    def _jobset_services(self) -> list[dict]:
        """The headless Service the JobSet controller makes when DNS hostnames are on
        (kubernetes-sigs/jobset v0.12.0 pkg/controllers/jobset_controller.go,
        createHeadlessSvcIfNecessary): named as the subdomain, selecting the JobSet's pods."""
        js = self.jobset
        net = (js or {}).get("spec", {}).get("network") or {}
        if not net.get("enableDNSHostnames"):
            return []
        name = js["metadata"]["name"]
        return [{"kind": "Service", "metadata": {"name": net.get("subdomain") or name},
                 "spec": {"clusterIP": "None",
                          "selector": {"jobset.sigs.k8s.io/jobset-name": name}}}]

    def _hosts(self) -> list[str]:
        """--add-host for every pod a headless Service selects, as cluster DNS would answer."""
        out = []
        for svc in (o for o in [*self.objects, *self._jobset_services()] if o.get("kind") == "Service"):
            spec, name = svc["spec"], svc["metadata"]["name"]
            if spec.get("clusterIP") != "None":
                continue
            for p in self.pods:
                if p.subdomain == name and all(p.labels.get(k) == v for k, v in spec["selector"].items()):
                    fqdn = f"{p.hostname}.{name}.{p.namespace}.svc.cluster.local"
                    out += ["--add-host", f"{p.hostname}.{name}:{self.ips[p.name]}",
                            "--add-host", f"{fqdn}:{self.ips[p.name]}"]
        return out

    # --- one container of a pod ----------------------------------------------------------
    def _env(self, pod: Pod, c: dict) -> dict[str, str]:
        env = dict(pod.extra_env)
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = _expand(str(e["value"]), env)
            elif "fieldRef" in e["valueFrom"]:
                path = e["valueFrom"]["fieldRef"]["fieldPath"]
                m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
                env[e["name"]] = (
                    getattr(pod, m.group(1)).get(m.group(2), "") if m else
                    {"metadata.name": pod.name, "metadata.namespace": pod.namespace,
                     "status.podIP": self.ips[pod.name]}[path])
            elif "secretKeyRef" in e["valueFrom"]:
                ref = e["valueFrom"]["secretKeyRef"]
                env[e["name"]] = self.secrets[(ref["name"], ref["key"])]
            else:
                raise NotImplementedError(f"env {e['name']}: {e['valueFrom']}")
        return env

    def _volume_args(self, pod: Pod, c: dict) -> list[str]:
        vols = {v["name"]: v for v in pod.spec.get("volumes", [])}
        args: list[str] = []
        for m in c.get("volumeMounts", []):
            v, ro = vols[m["name"]], ":ro" if m.get("readOnly") else ""
            if "persistentVolumeClaim" in v:
                host = self.claims[v["persistentVolumeClaim"]["claimName"]]
                args += ["-v", f"{host}:{m['mountPath']}{ro}"]
            elif "configMap" in v:
                args += ["-v", f"{self._config_map_dir(pod, v)}:{m['mountPath']}:ro"]
            elif "emptyDir" in v and v["emptyDir"].get("medium") == "Memory":
                size = v["emptyDir"].get("sizeLimit")
                if m["mountPath"] == "/dev/shm":
                    args += ["--shm-size", str(_quantity_bytes(size))] if size else []
                else:
                    args += ["--mount", f"type=tmpfs,destination={m['mountPath']}"
                             + (f",tmpfs-size={_quantity_bytes(size)}" if size else "")]
            elif "emptyDir" in v:
                d = self.workdir / "emptydir" / pod.name / m["name"]
                d.mkdir(parents=True, exist_ok=True)
                d.chmod(0o777)  # the kubelet makes emptyDirs world-writable
                args += ["-v", f"{d}:{m['mountPath']}{ro}"]
            else:
                raise NotImplementedError(f"volume {m['name']}: {sorted(v)}")
        return args

    def _config_map_dir(self, pod: Pod, v: dict) -> Path:
        name = v["configMap"]["name"]
        cm = next(o for o in self.objects if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == name)
        d = self.workdir / "configmaps" / name
        if not d.exists():
            import base64

            d.mkdir(parents=True)
            for key, text in (cm.get("data") or {}).items():
                (d / key).write_text(text)
            for key, b64 in (cm.get("binaryData") or {}).items():
                (d / key).write_bytes(base64.b64decode(b64))
            for f in d.iterdir():
                f.chmod(v["configMap"].get("defaultMode", 0o644))
        return d

    def _run_args(self, pod: Pod, c: dict, name: str) -> list[str]:
        psc, csc = pod.spec.get("securityContext", {}), c.get("securityContext", {})
        sc = {**psc, **csc}
        args = ["run", "--name", name, "--label", f"alchemist.test/cluster={self.tag}",
                "--network", self.network, "--ip", self.ips[pod.name], "--hostname", pod.hostname,
                "--pull", "never", *self._hosts()]
        if "runAsUser" in sc:
            args += ["--user", f"{sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}"]
        for g in ([psc["fsGroup"]] if "fsGroup" in psc else []) + psc.get("supplementalGroups", []):
            args += ["--group-add", str(g)]
        caps = sc.get("capabilities", {})
        args += [a for cap in caps.get("drop", []) for a in ("--cap-drop", cap)]
        args += [a for cap in caps.get("add", []) for a in ("--cap-add", cap)]
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        if sc.get("privileged"):
            args += ["--privileged"]
        if sc.get("readOnlyRootFilesystem"):
            args += ["--read-only", "--read-only-tmpfs=false"]
        limits = c.get("resources", {}).get("limits", {})
        if "memory" in limits:
            args += ["--memory", str(_quantity_bytes(limits["memory"]))]
        env = self._env(pod, c)
        for k, v in env.items():
            args += ["--env", f"{k}={v}"]
        args += self._volume_args(pod, c)
        if c.get("workingDir"):
            args += ["--workdir", c["workingDir"]]
        if c.get("command"):
            args += ["--entrypoint", json.dumps([_expand(a, env) for a in c["command"]])]
        args += [c["image"], *[_expand(a, env) for a in c.get("args", [])]]
        return args

    def _check_non_root(self, pod: Pod, c: dict) -> None:
        """runAsNonRoot: the kubelet refuses to start a container that would run as uid 0."""
        sc = {**pod.spec.get("securityContext", {}), **c.get("securityContext", {})}
        if sc.get("runAsNonRoot"):
            uid = sc.get("runAsUser")
            if uid is None:
                user = podman("image", "inspect", "--format", "{{.Config.User}}", c["image"]).stdout.strip()
                uid = user.split(":")[0] or "0"
            assert str(uid) not in ("0", "root"), f"{pod.name}/{c['name']}: runAsNonRoot but uid {uid}"

    # --- pods and controllers ------------------------------------------------------------
    def start_pod(self, pod: Pod) -> bool:
        """Init containers in order (each must succeed), then the pod's containers; False if
        an init container failed (its log is kept in init_logs)."""
        attempt = f"{pod.name}-r{self.restarts}-{int(time.monotonic() * 1000) % 100000}"
        for c in pod.spec.get("initContainers", []):
            self._check_non_root(pod, c)
            name = f"{attempt}-{c['name']}"
            args = self._run_args(pod, c, name)
            podman(args[0], "-d", *args[1:])
            code = int(podman("wait", name, timeout=900).stdout.strip().splitlines()[-1])
            self.init_logs[pod.name] = podman("logs", name, check=False).stdout + podman(
                "logs", name, check=False).stderr
            self.events.append(f"{pod.name}: init {c['name']} exited {code}")
            if code != 0:
                return False
        (main,) = pod.spec["containers"]  # the job pods have one container; say so if that changes
        self._check_non_root(pod, main)
        name = f"{attempt}-{main['name']}"
        args = self._run_args(pod, main, name)
        podman(args[0], "-d", *args[1:])
        self.containers[pod.name] = name
        return True

    def start(self) -> None:
        for pod in self.pods:
            if not self.start_pod(pod):
                self.containers.pop(pod.name, None)

    def status(self, pod: Pod) -> tuple[str, int | None]:
        name = self.containers.get(pod.name)
        if name is None:
            return "failed", None
        out = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name).stdout.split()
        return container_phase(out[0], int(out[1]))

    def logs(self, pod: Pod) -> str:
        name = self.containers.get(pod.name)
        if name is None:
            return self.init_logs.get(pod.name, "")
        p = podman("logs", name, check=False)
        return p.stdout + p.stderr

    def _job_fails(self, group: Group, pod: Pod, code: int | None) -> str | None:
        """The Job controller's verdict on a failed pod: a failure reason, or None (recreate it)."""
        for rule in (group.job_spec.get("podFailurePolicy") or {}).get("rules", []):
            on = rule.get("onExitCodes")
            if on and code is not None:
                inside = code in on["values"]
                if (on["operator"] == "In") == inside:
                    if rule["action"] == "FailJob":
                        return "PodFailurePolicy"
                    if rule["action"] == "Ignore":
                        return None
                    break  # Count: falls through to the backoff limit
        group.job_spec.setdefault("_failures", 0)
        group.job_spec["_failures"] += 1
        if group.job_spec["_failures"] > int(group.job_spec.get("backoffLimit", 6)):
            return "BackoffLimitExceeded"
        return None

    def _restart_all(self) -> None:
        for pod in self.pods:
            name = self.containers.pop(pod.name, None)
            if name:
                podman("rm", "-f", "-t", "0", name, check=False)
        self.restarts += 1
        self.events.append(f"restart {self.restarts}: every pod recreated")
        self.start()

    def run(self, until: Callable[["Cluster"], bool] | None = None, poll: float = 1.0) -> str:
        """Drive the pods to an end: "succeeded" or "failed: <reason>". `until` is called each
        round and may act on the pods (kill one); it returns True once it has done its part."""
        hook_done = until is None
        while True:
            if not hook_done:
                hook_done = until(self)
            states = {p.name: self.status(p) for p in self.pods}
            if all(s == ("exited", 0) for s in states.values()):
                return "succeeded"
            for pod in self.pods:
                state, code = states[pod.name]
                if state in ("pending", "running") or (state, code) == ("exited", 0):
                    continue
                reason = self._job_fails(pod.owner, pod, code)
                self.events.append(f"{pod.name}: {state} code {code}; job verdict {reason}")
                if reason is None:
                    if not self.start_pod(pod):
                        self.containers.pop(pod.name, None)
                    continue
                if self.jobset is None:
                    return f"failed: {reason}"
                policy = self.jobset["spec"].get("failurePolicy")
                fail_now = any(r.get("action") == "FailJobSet" and reason in r.get("onJobFailureReasons", [reason])
                               for r in (policy or {}).get("rules", []))
                if policy is None or fail_now or self.restarts >= int(policy.get("maxRestarts", 0)):
                    return f"failed: {reason} (jobset restarts {self.restarts})"
                self._restart_all()
                break
            time.sleep(poll)


def team_json(path: Path) -> dict:
    """A run file the pods wrote, read as this test (root, the cluster's admin) reads it. The
    product's RunDir.read_json trusts only the reader's own files (or root's), and here the
    team's uid wrote them, as on a real shared file system; a team member's own tools (same
    uid) read them through RunDir."""
    return json.loads(Path(path).read_text())
