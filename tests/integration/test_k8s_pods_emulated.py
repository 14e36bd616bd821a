"""The pods of a cluster job, run for real without a cluster: each worker pod of the JobSet is
a network namespace with the pod's hostname and the /etc/hosts the kubelet and JobSet's
headless Service would give it, and runs exactly the init-container and container commands and
environment of the rendered manifests (only the ConfigMap's mount point is a directory here
and `python`/`torchrun` are this environment's). Real torchrun, real c10d rendezvous at pod 0
through the Service's DNS name, real gloo. The Kubernetes API is the fake client (the far
edge), fed the pods' real logs, so `alchemist logs --rank` is checked on real output too.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.kubernetes import manifests as mf
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler, rank_pod_index
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack
from tests.unit.k8s.fake_kube import FakeKube

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"),
                       reason="needs root, ip and unshare (Linux network namespaces)"),
]


def _sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@pytest.fixture
def pods_network():
    """Two network namespaces joined by a veth pair, torn down afterwards."""
    tag = f"{os.getpid() % 100000}"
    names = [f"alck8s-{tag}-{i}" for i in range(2)]
    veths = [f"ak{tag}a", f"ak{tag}b"]
    subnet = f"10.237.{os.getpid() % 250}"
    ips = [f"{subnet}.1", f"{subnet}.2"]
    try:
        for n in names:
            _sh("ip", "netns", "add", n)
        _sh("ip", "link", "add", veths[0], "type", "veth", "peer", "name", veths[1])
        for n, v, ip in zip(names, veths, ips):
            _sh("ip", "link", "set", v, "netns", n)
            _sh("ip", "-n", n, "addr", "add", f"{ip}/24", "dev", v)
            _sh("ip", "-n", n, "link", "set", "lo", "up")
            _sh("ip", "-n", n, "link", "set", v, "up")
        yield names, ips
    finally:
        for n in names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
            shutil.rmtree(f"/etc/netns/{n}", ignore_errors=True)


def resolve_env(container: dict, pod_name: str, annotations: dict, attempt: int,
                termination_log: Path) -> dict:
    """The container's env as the kubelet gives it: values, the downward API over the pod's
    metadata as JobSet v0.12.0 makes it (the template's annotations plus the restart attempt,
    jobset_controller.go labelAndAnnotateObject), and the file the kubelet mounts at
    terminationMessagePath (the API's default: /dev/termination-log) in place of that path."""
    meta = {"metadata.name": pod_name}
    meta.update({f"metadata.annotations['{k}']": v for k, v in {
        **annotations, mf.RESTART_ATTEMPT_LABEL: str(attempt)}.items()})
    path = container.get("terminationMessagePath", "/dev/termination-log")
    termination_log.unlink(missing_ok=True)
    env = {}
    for e in container["env"]:
        value = e["value"] if "value" in e else meta[e["valueFrom"]["fieldRef"]["fieldPath"]]
        env[e["name"]] = str(termination_log) if value == path else value
    return env


def test_the_rendered_pods_train_together(tmp_path, pods_network):
    names, ips = pods_network
    shared = tmp_path / "shared"
    data = stack("dev").output.model_dump(mode="json")
    data["kubeconfig"] = "unused"
    data["shared_fs"]["mount_path"] = str(shared)
    out = StackOutput.parse(data, "emulated")
    spec = load_spec(EXAMPLES / "script.yaml", ["nodes=2", "procs_per_node=1",
                                                 "task.args=[--epochs, '3']"])
    fake = FakeKube()
    sched = KubernetesScheduler(out, connector=fake.connector)
    request = sched.dryrun(spec, EXAMPLES)
    cm, policy, jobset = request.manifests
    name, ns = jobset["metadata"]["name"], out.namespace
    assert jobset["spec"]["network"]["subdomain"] == name
    job = jobset["spec"]["replicatedJobs"][0]["template"]
    pod = job["spec"]["template"]["spec"]
    host = [f"{name}-{mf.WORKER_RJOB}-0-{i}" for i in range(2)]  # JobSet's pod hostnames

    # The ConfigMap's volume.
    config = tmp_path / "config"
    config.mkdir()
    (config / mf.SPEC_KEY).write_text(cm["data"][mf.SPEC_KEY])
    (config / mf.CODE_KEY).write_bytes(base64.b64decode(cm["binaryData"][mf.CODE_KEY]))

    # What the kubelet writes to /etc/hosts, plus what cluster DNS answers for the Service.
    hosts = "127.0.0.1 localhost\n" + "".join(
        f"{ip} {host[i]}.{name}.{ns}.svc.cluster.local {host[i]}.{name} {host[i]}\n"
        for i, ip in enumerate(ips))
    for n in names:
        Path(f"/etc/netns/{n}").mkdir(parents=True, exist_ok=True)
        Path(f"/etc/netns/{n}/hosts").write_text(hosts)

    base_env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                "HOME": str(tmp_path), "LANG": "C.UTF-8",
                "PYTHONPATH": str(REPO)}  # the image has the package installed

    def pod_env(i: int) -> dict:
        return dict(base_env, JOB_COMPLETION_INDEX=str(i), **resolve_env(
            pod["containers"][0], f"{host[i]}-emul{i}",
            job["spec"]["template"]["metadata"]["annotations"], 0,
            tmp_path / f"pod-{i}-termination-log"))

    def in_pod(i: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", names[i], "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', host[i], *argv]

    # Init containers: every pod, idempotently.
    init = [sys.executable if a == "python" else a.replace(mf.CONFIG_MOUNT, str(config))
            for a in pod["initContainers"][0]["command"]]
    for i in range(2):
        subprocess.run(in_pod(i, init), env=base_env, check=True, capture_output=True, timeout=60)

    # The containers, at once, as the Job controller starts them.
    procs, logs = [], []
    train = pod["containers"][0]
    for i in range(2):
        log = open(tmp_path / f"pod-{i}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen(in_pod(i, train["command"]), env=pod_env(i),
                                      cwd=train["workingDir"], stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    try:
        codes = [p.wait(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for log in logs:
            log.close()
    pod_logs = [(tmp_path / f"pod-{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0], pod_logs

    # Rank 0's line, prefixed by torchrun with its global rank, in pod 0's log.
    assert any(line.startswith("[rank0]: steps ") and "test accuracy" in line
               for line in pod_logs[0].splitlines()), pod_logs[0]
    # Where each rank ran, as the bootstrap recorded it: the pod rank_pod_index says.
    run = shared / "runs" / request.run_id
    for rank in range(2):
        rec = json.loads((run / "workers" / f"rank-{rank}.json").read_text())
        assert rec["node"].startswith(f"{host[rank_pod_index(rank, 2, 1)]}-")
    assert (run / "spec.yaml").read_text() == cm["data"][mf.SPEC_KEY]
    assert list((run / "logs" / "torchrun").glob("*/attempt_0/0/stdout.log"))
    code_dir = Path(train["workingDir"])
    assert (code_dir / "plain_ddp.py").read_bytes() == (EXAMPLES / "plain_ddp.py").read_bytes()

    # `alchemist logs --rank 0` on those pods' real logs (the API is the fake).
    sched.schedule(request)
    fake.set_job(name, spec={"suspend": False},
                 status={"conditions": [{"type": "Completed", "status": "True"}]})
    for i in range(2):
        fake.add_pod(name, i, "Succeeded", log=pod_logs[i])
    lines = list(sched.logs(request.run_id, rank=0))
    assert any(line.startswith("steps ") for line in lines) and not any("[rank" in l for l in lines)


# --- failure injection: what JobSet does when a pod is lost or the run is preempted ----------


class EmulatedJobSet:
    """The worker pods of a rendered JobSet as network namespaces (see the test above), and
    JobSet v0.12.0's group restart as upstream does it (pkg/controllers/jobset_controller.go
    with restartStrategy BlockingRecreate: every Job of the old attempt, and so every pod, is
    deleted (the kubelet sends SIGTERM) before all Jobs are created anew; each new pod runs
    its init container and container again)."""

    def __init__(self, tmp_path: Path, names: list[str], ips: list[str], overrides: list[str],
                 stack_name: str = "dev"):
        self.tmp, self.names = tmp_path, names
        data = stack(stack_name).output.model_dump(mode="json")
        data["kubeconfig"] = "unused"
        data["shared_fs"]["mount_path"] = str(tmp_path / "shared")
        out = StackOutput.parse(data, "emulated")
        spec = load_spec(EXAMPLES / "digits.yaml", ["nodes=2", "procs_per_node=1", *overrides])
        self.request = KubernetesScheduler(out, connector=FakeKube().connector).dryrun(
            spec, EXAMPLES)
        cm, _, jobset = self.request.manifests
        self.name = jobset["metadata"]["name"]
        self.pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        self.pod_annotations = jobset["spec"]["replicatedJobs"][0]["template"]["spec"][
            "template"]["metadata"]["annotations"]
        self.hosts = [f"{self.name}-{mf.WORKER_RJOB}-0-{i}" for i in range(2)]
        self.config = tmp_path / "config"
        self.config.mkdir()
        (self.config / mf.SPEC_KEY).write_text(cm["data"][mf.SPEC_KEY])
        lines = "127.0.0.1 localhost\n" + "".join(
            f"{ip} {h}.{self.name}.{out.namespace}.svc.cluster.local {h}.{self.name} {h}\n"
            for h, ip in zip(self.hosts, ips))
        for n in names:
            Path(f"/etc/netns/{n}").mkdir(parents=True, exist_ok=True)
            Path(f"/etc/netns/{n}/hosts").write_text(lines)
        self.base_env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                         "HOME": str(tmp_path), "LANG": "C.UTF-8", "PYTHONPATH": str(REPO)}
        self.run = tmp_path / "shared" / "runs" / self.request.run_id
        self.procs: dict[int, subprocess.Popen] = {}
        self.attempt = -1

    def _in_pod(self, i: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.names[i], "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hosts[i], *argv]

    def termination_log(self, i: int) -> Path:
        return self.tmp / f"pod-{i}-termination-log"

    def log(self, i: int, attempt: int | None = None) -> str:
        a = self.attempt if attempt is None else attempt
        return (self.tmp / f"pod-{i}-attempt-{a}.log").read_text()

    def start(self, indices=(0, 1)) -> None:
        """A new attempt's pods (init container, then the container), started at once."""
        self.attempt += 1
        init = [sys.executable if a == "python" else a.replace(mf.CONFIG_MOUNT, str(self.config))
                for a in self.pod["initContainers"][0]["command"]]
        for i in indices:
            self.start_pod(i, init)

    def start_pod(self, i: int, init: list[str] | None = None) -> None:
        if init is None:
            init = [sys.executable if a == "python" else
                    a.replace(mf.CONFIG_MOUNT, str(self.config))
                    for a in self.pod["initContainers"][0]["command"]]
        subprocess.run(self._in_pod(i, init), env=self.base_env, check=True,
                       capture_output=True, timeout=120)
        env = dict(self.base_env, JOB_COMPLETION_INDEX=str(i), **resolve_env(
            self.pod["containers"][0], f"{self.hosts[i]}-a{self.attempt}",
            self.pod_annotations, self.attempt, self.termination_log(i)))
        log = open(self.tmp / f"pod-{i}-attempt-{self.attempt}.log", "w")
        self.procs[i] = subprocess.Popen(self._in_pod(i, self.pod["containers"][0]["command"]),
                                         env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        log.close()

    def wait_for_checkpoint(self, timeout: float = 300) -> int:
        """The step of the first checkpoint on the shared file system (an event, polled)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = sorted(self.run.glob("checkpoints/step-*.pt"))
            if done:
                return int(done[0].stem.split("-")[1])
            assert all(p.poll() is None for p in self.procs.values()), \
                [self.log(i) for i in self.procs]
            time.sleep(0.2)
        raise AssertionError("no checkpoint was written")

    def terminate(self, i: int) -> None:
        """The kubelet deleting the pod: SIGTERM to its main process (the pod script)."""
        os.kill(self.procs[i].pid, signal.SIGTERM)

    def lose(self, i: int) -> None:
        """The pod's node is gone: everything in it dies at once."""
        os.killpg(self.procs[i].pid, signal.SIGKILL)

    def wait(self, timeout: float = 420) -> list[int]:
        try:
            return [self.procs[i].wait(timeout=timeout) for i in sorted(self.procs)]
        finally:
            self.kill_all()

    def kill_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _result(js: EmulatedJobSet) -> dict:
    return json.loads((js.run / "result.json").read_text())


def test_losing_pod_0_restarts_the_group_from_the_newest_checkpoint(tmp_path, pods_network):
    """(a) Pod 0, which holds torchrun's c10d store, is lost mid-run. Its Job fails
    (backoffLimit 0), JobSet deletes every pod and recreates them all; the new group resumes
    from the newest checkpoint and finishes with test accuracy >= 0.9."""
    js = EmulatedJobSet(tmp_path, *pods_network,
                        ["hyper.epochs=12", "checkpoint.every_steps=20"])
    js.start()
    try:
        first = js.wait_for_checkpoint()
        js.lose(0)
        js.procs[0].wait()
        js.terminate(1)  # JobSet deletes the rest of the group (BlockingRecreate)
        js.procs[1].wait(timeout=120)
    finally:
        js.kill_all()
    js.start()  # restart 1: all pods anew
    codes = js.wait()
    assert codes == [0, 0], [js.log(i) for i in range(2)]
    result = _result(js)
    assert result["resumed_from_step"] and result["resumed_from_step"] >= first
    assert "resumed from checkpoint at step" in js.log(0)
    # The workers know which group restart they are (JobSet's restart attempt, through the
    # downward API), not torchrun's count, which stays 0.
    resumed = next(ln for ln in js.log(0).splitlines() if "resumed from checkpoint" in ln)
    assert resumed.endswith(", restart 1"), resumed
    assert result["restarts"] == 1, result
    assert result["test_accuracy"] >= 0.9, result


def test_sigterm_to_every_pod_is_a_preemption_and_the_restart_resumes(tmp_path, pods_network):
    """(c) Kueue preempts: JobSet suspends, every pod is deleted (SIGTERM). Each pod script
    passes SIGTERM to torchrun and exits 143, which the Job's FailJob rule and JobSet's
    `StoppedFromOutside` rule turn into an uncounted restart. Readmitted, the new group
    resumes, not from step 0."""
    js = EmulatedJobSet(tmp_path, *pods_network,
                        ["hyper.epochs=12", "checkpoint.every_steps=20"])
    js.start()
    try:
        first = js.wait_for_checkpoint()
        for i in range(2):
            js.terminate(i)
        codes = [js.procs[i].wait(timeout=120) for i in range(2)]
    finally:
        js.kill_all()
    assert codes == [mf.PREEMPTED_EXIT_CODE] * 2, [js.log(i) for i in range(2)]
    js.start()
    codes = js.wait()
    assert codes == [0, 0], [js.log(i) for i in range(2)]
    result = _result(js)
    assert result["resumed_from_step"] and result["resumed_from_step"] >= first
    assert result["test_accuracy"] >= 0.9, result


# torch 2.13, torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py,
# _create_tcp_store: the store client's `read_timeout` defaults to 60 s, and with `is_host`
# given explicitly there is no second try; the "about 2 minutes" is 2 x 60 s.
OLD_STORE_TIMEOUT_S = 2 * 60


@pytest.mark.waits  # 130 s of pod 1 waiting, nearly idle: run beside the integration tier
def test_a_pod_0_that_starts_late_is_waited_for(tmp_path, pods_network):
    """(b) Pod 0 (the c10d store) starts long after pod 1 (a GPU scale-up, a big image
    pull). Rather than a literal 5 minutes, pod 0 is held until pod 1 has been waiting longer
    than torch's old store timeout (2 x 60 s, which is what failed runs before): the same
    code path (pod 1's agent connecting to a store that is not there yet, under
    read_timeout), then pod 0 starts and the run succeeds. Pod 1 still being alive at that
    moment is the assertion that fails with the old flags."""
    js = EmulatedJobSet(tmp_path, *pods_network, ["hyper.epochs=3"])
    js.attempt += 1
    js.start_pod(1)
    started = time.monotonic()
    try:
        while time.monotonic() - started < OLD_STORE_TIMEOUT_S + 10:
            assert js.procs[1].poll() is None, "pod 1 gave up waiting for pod 0: " + js.log(1)
            time.sleep(1)
        js.start_pod(0)
    except BaseException:
        js.kill_all()
        raise
    codes = js.wait()
    assert codes == [0, 0], [js.log(i) for i in range(2)]
    assert _result(js)["test_accuracy"] >= 0.9


@pytest.mark.skipif(__import__("torch").cuda.is_available(),
                    reason="this machine has a GPU: the pods would find one")
def test_a_pod_without_its_gpu_exits_the_configuration_error_code(tmp_path, pods_network):
    """A GPU job's pods on nodes that give them no usable GPU (here: this machine). Each
    worker stops with one line; torchrun exits 1 as it does for any failed worker, and the
    pod script turns that into CONFIG_ERROR_EXIT_CODE, which the Job's podFailurePolicy maps
    to FailJob and JobSet to FailJobSet (see test_k8s_queue_status). The line is in the
    container's termination message, where `status` reads it. The old pods exited 1: a
    counted restart, max_restarts times over."""
    from alchemist_jobs.runtime.config_error import CONFIG_ERROR_EXIT_CODE

    js = EmulatedJobSet(tmp_path, *pods_network, ["resources.gpu=1"], stack_name="onprem-lab")
    assert js.pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    js.start()
    codes = js.wait(timeout=300)
    assert codes == [CONFIG_ERROR_EXIT_CODE] * 2, [js.log(i) for i in range(2)]
    for i in range(2):
        message = js.termination_log(i).read_text()
        assert message.startswith(f"rank {i}: resources.gpu=1: no usable GPU"), message
        # torchrun's own report names the worker's code: the pod's code carries it now.
        assert f"exitcode  : {CONFIG_ERROR_EXIT_CODE}" in js.log(i), js.log(i)
