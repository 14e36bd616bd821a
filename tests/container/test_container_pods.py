"""A rendered job's pods as real containers of the training image: exactly what the manifests
say (tests/container/pod_runner.py translates them), rendezvousing over a podman network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from alchemist_jobs.rundir import RunDir
from tests.container.conftest import REPO
from tests.container.pod_runner import PODMAN, Cluster, _quantity_bytes, team_json
from tests.k8s_stacks import FIXTURES

JOB_UID = 1000  # contract SharedFs.uid's default: the identity job pods run as


def run_id(objects: list[dict]) -> str:
    return next(o for o in objects if o["kind"] == "ConfigMap")["metadata"]["name"]


def render(tmp_path: Path, train_image: str, *sets: str) -> tuple[list[dict], dict]:
    """`alchemist run examples/digits.yaml --dry-run` for the dev stack, with our image."""
    out = json.loads((FIXTURES / "dev.json").read_text())
    out["images"] = {"train": train_image, "interactive": train_image}
    outputs = tmp_path / "dev.json"
    outputs.write_text(json.dumps(out))
    cmd = [sys.executable, "-m", "alchemist_jobs", "run", str(REPO / "examples" / "digits.yaml"),
           "--dry-run", "--stack", "dev", "--outputs", str(outputs)]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stderr
    return [o for o in yaml.safe_load_all(proc.stdout) if o], out


def access_point_volume(tmp_path: Path) -> Path:
    """The shared volume as an EFS access point presents it to the pod: its root directory
    created with creationInfo owner uid/gid = the job identity and permissions 0755, every
    operation done as posixUser (the same identity the pods already run as)."""
    shared = tmp_path / "efs-access-point"
    shared.mkdir()
    os.chown(shared, JOB_UID, JOB_UID)
    shared.chmod(0o755)
    return shared


def pod_status(cluster: Cluster, pod) -> dict[str, str]:
    """The running container's PID 1, as /proc shows it: user, groups, capabilities, NNP."""
    name = cluster.containers[pod.name]
    text = subprocess.run([*PODMAN, "exec", name, "cat", "/proc/1/status"], capture_output=True,
                          text=True, check=True).stdout
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def in_container(cluster: Cluster, pod, *argv: str) -> str:
    return subprocess.run([*PODMAN, "exec", cluster.containers[pod.name], *argv],
                          capture_output=True, text=True, check=True).stdout


def test_rendered_pods_train_together_as_the_manifests_say(images, tmp_path):
    objects, out = render(tmp_path, images["train"], "nodes=2")
    shared = access_point_volume(tmp_path)
    seen: dict = {}

    def inspect_running_pods(cluster: Cluster) -> bool:
        """Once both trainers run, read what the kernel says about them."""
        if any(cluster.status(p)[0] != "running" for p in cluster.pods):
            return False
        for pod in cluster.pods:
            (main,) = pod.spec["containers"]
            seen[pod.name] = {
                "status": pod_status(cluster, pod),
                "shm": in_container(cluster, pod, "python", "-c",
                                    "import os; s = os.statvfs('/dev/shm'); print(s.f_blocks * s.f_frsize)"),
                # /workspace is the image's one directory uid 1000 owns: only a read-only root stops it
                "root_writable": in_container(cluster, pod, "sh", "-c",
                                              "touch /workspace/probe 2>/dev/null && echo yes || echo no"),
                "manifest": main,
            }
        return True

    with Cluster(objects, {"alchemist-shared": shared}, tmp_path / "k", tmp_path.name[-12:]) as cluster:
        cluster.start()
        result = cluster.run(until=inspect_running_pods)
        logs = {p.name: cluster.logs(p) for p in cluster.pods}
    assert result == "succeeded", (cluster.events, logs)
    assert cluster.restarts == 0 and len(seen) == 2, cluster.events

    pod_spec = cluster.pods[0].spec
    psc = pod_spec["securityContext"]
    assert [c["name"] for c in pod_spec["initContainers"]] == ["setup"]
    assert cluster.events[0].startswith(f"{cluster.pods[0].name}: init setup exited 0")
    for name, got in seen.items():
        st, c = got["status"], got["manifest"]
        csc = c["securityContext"]
        assert st["Uid"].split()[:2] == [str(psc["runAsUser"])] * 2
        assert st["Gid"].split()[:2] == [str(psc["runAsGroup"])] * 2
        assert str(psc["fsGroup"]) in st["Groups"].split()
        if csc["capabilities"]["drop"] == ["ALL"]:
            assert int(st["CapEff"], 16) == int(st["CapPrm"], 16) == int(st["CapBnd"], 16) == 0
        assert st["NoNewPrivs"].strip() == ("1" if csc["allowPrivilegeEscalation"] is False else "0")
        assert got["root_writable"].strip() == ("no" if csc.get("readOnlyRootFilesystem") else "yes")
        shm = next(v for v in pod_spec["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"]
        assert int(got["shm"]) == _quantity_bytes(shm)

    run = RunDir(shared / "runs" / run_id(objects))
    assert team_json(run.result_file)["test_accuracy"] >= 0.9, team_json(run.result_file)
    assert list(run.checkpoints.glob("step-*.pt"))
    assert list(run.tensorboard.glob("events.out.tfevents.*"))
    assert list((run.logs / "torchrun").rglob("stdout.log"))
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in run.path.rglob("*")}
    assert owners == {(JOB_UID, JOB_UID)}, owners  # what posixUser makes of every write
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    assert run.spec.read_text() == config["data"]["spec.yaml"]


def test_root_owned_volume_fails_with_one_line_naming_path_and_uid(images, tmp_path):
    """Without an access point the volume root is root's 0755: the init container must say so."""
    objects, _ = render(tmp_path, images["train"], "nodes=2")
    shared = tmp_path / "efs-root"
    shared.mkdir()
    shared.chmod(0o755)  # root:root, as a bare EFS or NFS export root is
    with Cluster(objects, {"alchemist-shared": shared}, tmp_path / "k", tmp_path.name[-12:]) as cluster:
        cluster.start()
        result = cluster.run()
        log = cluster.init_logs[cluster.pods[0].name]
    assert result.startswith("failed"), cluster.events
    lines = [ln for ln in log.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in log, log
    assert "/shared" in lines[0] and str(JOB_UID) in lines[0], lines[0]


@pytest.mark.timeout(1200)  # two trainings in containers: minutes on a loaded 2-core machine
def test_killed_pod_zero_restarts_the_whole_group(images, tmp_path):
    """pod 0's container killed mid-run (after a checkpoint): every pod is recreated, as
    JobSet's failure policy does, and the run resumes and finishes."""
    objects, _ = render(tmp_path, images["train"], "nodes=2", "hyper.epochs=20")
    if not any(o.get("kind") == "JobSet" for o in objects):
        pytest.skip("the manifests render a batch/v1 Job, whose podFailurePolicy fails the whole "
                    "run on a killed pod; the group restart is JobSet's failure policy")
    shared = access_point_volume(tmp_path)
    run = RunDir(shared / "runs" / run_id(objects))
    killed: list[str] = []

    def kill_pod_zero_after_a_checkpoint(cluster: Cluster) -> bool:
        if not list(run.checkpoints.glob("step-*.pt")):
            return False
        name = cluster.containers[cluster.pods[0].name]
        subprocess.run([*PODMAN, "kill", "--signal", "KILL", name], check=True, capture_output=True)
        killed.append(name)
        return True

    with Cluster(objects, {"alchemist-shared": shared}, tmp_path / "k", tmp_path.name[-12:]) as cluster:
        cluster.start()
        result = cluster.run(until=kill_pod_zero_after_a_checkpoint)
        logs = {p.name: cluster.logs(p) for p in cluster.pods}
    assert killed and result == "succeeded", (cluster.events, logs)
    assert cluster.restarts == 1, cluster.events
    assert team_json(run.result_file)["test_accuracy"] >= 0.9
