"""Every pod of every job shape mounts its team's subtree on every stack, NFS with root_squash included.

The platform half is the rendered program (the team PVs, the prepare Job's own command and
security context, the CSI driver chart's values); the job half is the backend's real pods
(and the platform's TensorBoard). The kubelet's fsGroup step and the export's root_squash are
ported in storage_model.py (kubernetes v1.35.0 pkg/volume/csi/csi_mounter.go and
pkg/volume/volume_linux.go; csi-driver-nfs v4.11.0 charts/v4.11.0/csi-driver-nfs/templates/
csi-nfs-driverinfo.yaml and pkg/nfs/nfs.go; aws-efs-csi-driver chart 3.2.1 templates/
csidriver.yaml; exports(5)). The file server is a local directory, and the prepare Job, the
kubelet and the pods run against it as real processes with the credentials the server would
see (root needed, as for the prepare test of tests/unit/infra).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
from helm_names import releases
from storage_model import as_pod, as_server_sees, fs_group_policy, kubelet_applies_fs_group, kubelet_mount
from system_tier import ALL_SHAPES, STACK_NAMES, Platform

from infra.shared_fs import PREPARE_NAMESPACE, ROOT_PVC

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's owners and modes need root to set up")


def pv_of(platform: Platform, namespace: str, claim: str) -> dict[str, Any]:
    """The spec of the PV a namespace's claim binds (claimRef both ways, as rendered)."""
    (pvc,) = [o for o in platform.kube_objects("PersistentVolumeClaim")
              if o["metadata"]["namespace"] == namespace and o["metadata"]["name"] == claim]
    (pv,) = [o["spec"] for o in platform.kube_objects("PersistentVolume")
             if o["metadata"]["name"] == pvc["spec"]["volumeName"]]
    assert pv["claimRef"] == {"namespace": namespace, "name": claim}
    return pv


def driver_values(platform: Platform, pv: dict[str, Any]) -> dict[str, Any]:
    """The CSI driver chart's values as installed (its defaults under ours), dotted keys."""
    if (pv.get("csi") or {}).get("driver") != "nfs.csi.k8s.io":
        return {}
    (release,) = releases(platform.render, "csi-driver-nfs")
    return {"feature.enableFSGroupPolicy": release.value("feature.enableFSGroupPolicy")}


def team_pods(platform: Platform, jobs) -> list[tuple[str, dict[str, Any]]]:
    """(what, pod spec) of every pod in the team namespace that mounts the shared claim."""
    ns = platform.output.namespace
    out = []
    for shape in ALL_SHAPES:
        job = jobs(platform.name, shape)
        out += [(f"{shape}/{n}", t["spec"]) for n, t in job.pod_templates()] if job else []
    out += [(f"{o['metadata']['name']}", o["spec"]["template"]["spec"])
            for o in platform.kube_objects("StatefulSet") if o["metadata"]["namespace"] == ns]
    return [(what, spec) for what, spec in out
            if any((v.get("persistentVolumeClaim") or {}).get("claimName") == platform.output.shared_fs.pvc
                   for v in spec.get("volumes", []))]


def prepare(platform: Platform) -> tuple[str, list[str]]:
    """(the prepare Job's script, its container's added capabilities), as rendered."""
    (job,) = [o for o in platform.kube_objects("Job") if o["metadata"]["namespace"] == PREPARE_NAMESPACE]
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["volumes"] == [{"name": "fs", "persistentVolumeClaim": {"claimName": ROOT_PVC}}]
    assert container["command"][:2] == ["sh", "-c"] and container["securityContext"]["runAsUser"] == 0
    sc = container["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    return container["command"][2], sc["capabilities"].get("add", [])


@pytest.fixture
def server():
    """A directory every uid may reach (pytest's own tmp_path is root's alone), standing for
    the file server's disk."""
    path = Path(tempfile.mkdtemp(prefix="alchemist-server-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def make_export(root: Path) -> None:
    """A fresh export as a file server has it: owned by root, mode 0755."""
    root.mkdir()
    os.chown(root, 0, 0)
    os.chmod(root, 0o755)


def run_prepare(script: str, export: Path, caps: list[str], squashed: bool):
    return as_server_sees(["sh", "-c", script.replace("/fs/", f"{export}/").replace("/fs ", f"{export} ")],
                          squashed, caps)


def admin_commands(stderr: str) -> list[str]:
    """The commands the prepare Job's failure asks the file server's admin to run, in the
    export's directory (the text after `run:` on each line)."""
    return [line.split(" run: ", 1)[1] for line in stderr.splitlines() if " run: " in line]


def mount_and_write(platform: Platform, jobs, export: Path, squashed: bool) -> dict[str, str]:
    """What goes wrong for each team pod: the kubelet's fsGroup step on the team's subtree, then
    the pod's own process making its run directory there."""
    ns = platform.output.namespace
    pv = pv_of(platform, ns, platform.output.shared_fs.pvc)
    values = driver_values(platform, pv)
    team_dir = export / "teams" / ns
    problems = {}
    for what, spec in team_pods(platform, jobs):
        sc = spec.get("securityContext") or {}
        (volume,) = [v for v in spec["volumes"] if "persistentVolumeClaim" in v
                     and v["persistentVolumeClaim"]["claimName"] == platform.output.shared_fs.pvc]
        read_only = bool(volume["persistentVolumeClaim"].get("readOnly"))
        if kubelet_applies_fs_group(pv, volume, sc.get("fsGroup"), values):
            err = kubelet_mount(str(team_dir), sc["fsGroup"], sc.get("fsGroupChangePolicy"), read_only, squashed)
            if err is not None:
                problems[what] = f"ContainerCreating: {err}"
                continue
        if read_only:
            done = as_pod(["ls", str(team_dir)], sc)
        else:
            run = team_dir / "runs" / re.sub(r"[^a-z0-9-]", "-", what)
            done = as_pod(["sh", "-c", f"mkdir -p {shlex.quote(str(run))} && touch {shlex.quote(str(run))}/x"], sc)
        if done.returncode != 0:
            problems[what] = done.stderr.strip()
    return problems


PREPARED = [s for s in STACK_NAMES if not s.startswith("aws-")]  # EFS makes each subtree itself (access points)


@pytest.mark.parametrize("squashed", [False, True], ids=["no_root_squash", "root_squash"])
@pytest.mark.parametrize("stack", PREPARED)
def test_the_prepare_job_and_every_team_pod_on_the_export(platforms, jobs, stack, squashed, server):
    """Issue 36.4: on an NFS export with root_squash the prepare Job's chown failed, and the
    kubelet, applying the pods' fsGroup (csi-driver-nfs's CSIDriver has fsGroupPolicy File)
    to a subtree without the setgid bit, walked it as the anonymous uid, could not list it,
    and left every pod in ContainerCreating. Now: without root_squash the Job makes each
    subtree (twice: a re-created Job changes nothing); with it, the Job stops with the
    commands for the server's admin, and once they ran, it succeeds, and every pod mounts
    and writes."""
    platform = platforms[stack]
    if squashed and platform.output.shared_fs.kind != "nfs":
        pytest.skip(f"{stack}: {platform.output.shared_fs.kind} has no root_squash")
    script, caps = prepare(platform)
    export = server / "export"
    make_export(export)
    first = run_prepare(script, export, caps, squashed)
    if squashed:
        assert first.returncode != 0, "the anonymous uid cannot make the subtrees of a root-owned export"
        commands = admin_commands(first.stderr)
        teams = [o["metadata"]["name"] for o in platform.kube_objects("Namespace")
                 if "alchemist.io/team" in (o["metadata"].get("labels") or {})]
        assert teams and all(any(f"teams/{t} " in c for c in commands) for t in teams), first.stderr
        for command in commands:  # the admin, as root on the server
            assert as_server_sees(["sh", "-c", command], False, cwd=str(export)).returncode == 0, command
    for attempt in range(2):
        done = run_prepare(script, export, caps, squashed)
        assert done.returncode == 0, f"{stack}: prepare run {attempt + 1} failed: {done.stderr}"
    ns = platform.output.namespace
    st = (export / "teams" / ns).stat()
    assert (st.st_uid, st.st_gid) == (platform.output.shared_fs.uid, platform.output.shared_fs.gid)
    assert stat.S_IMODE(st.st_mode) & 0o777 == 0o770, oct(st.st_mode)  # the team's uid and gid, nobody else
    assert not mount_and_write(platform, jobs, export, squashed)


def test_the_model_sees_what_the_kubelet_does(platforms, server):
    """The port is not a rubber stamp: csi-driver-nfs's File policy applies the pods' fsGroup
    to its RWX PV, EFS's default policy does not; with the setgid bit missing from a subtree
    the squashed kubelet fails the mount, while root without squash changes the tree."""
    lab = platforms["onprem-lab"]
    pv = pv_of(lab, "research", lab.output.shared_fs.pvc)
    volume = {"persistentVolumeClaim": {"claimName": lab.output.shared_fs.pvc}}
    assert fs_group_policy("nfs.csi.k8s.io", driver_values(lab, pv)) == "File"
    assert kubelet_applies_fs_group(pv, volume, 1000, driver_values(lab, pv))
    assert not kubelet_applies_fs_group(pv, volume, 1000, {"feature.enableFSGroupPolicy": False})
    assert not kubelet_applies_fs_group(pv, {"persistentVolumeClaim": {"readOnly": True}}, 1000, {})
    aws = platforms["aws-us-west-2"]
    efs = pv_of(aws, "research", aws.output.shared_fs.pvc)
    assert fs_group_policy("efs.csi.aws.com", {}) == "ReadWriteOnceWithFSType"
    assert not kubelet_applies_fs_group(efs, volume, 1000, {})
    team = server / "teams" / "research"
    team.mkdir(parents=True)
    os.chown(team, 1000, 1000)
    os.chmod(team, 0o770)
    assert "Permission denied" in kubelet_mount(str(team), 1000, "OnRootMismatch", False, squashed=True)
    assert kubelet_mount(str(team), 1000, "OnRootMismatch", False, squashed=False) is None
    assert stat.S_IMODE(team.stat().st_mode) == 0o2770  # walked and changed, as root may
    assert kubelet_mount(str(team), 1000, "OnRootMismatch", False, squashed=True) is None  # now it matches
