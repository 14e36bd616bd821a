"""The kubelet's fsGroup step and an NFS export's root_squash, ported from upstream to judge the shared volume.

- Whether the kubelet applies a pod's fsGroup to a volume: kubernetes v1.35.0
  pkg/volume/csi/csi_mounter.go `supportsFSGroup` (no fsGroup, policy `None` or a read-only
  mount: never; policy `File`: always; otherwise only a ReadWriteOnce PV with an fsType), and
  `SetUpAt`, which hands the fsGroup to the driver instead when its node plugin advertises
  VOLUME_MOUNT_GROUP. The in-tree hostPath plugin never applies it (pkg/volume/hostpath/
  host_path.go: `SetUp` only checks the path's type). Each driver's policy is its CSIDriver
  object as the pinned chart installs it (tests/fixtures/storage/csi-drivers.json, with the
  template and values paths at each tag), defaulted as the API server does.
- What applying it does: pkg/volume/volume_linux.go `ChangePermissions`: with
  `fsGroupChangePolicy: OnRootMismatch` nothing when the volume's root already has the
  fsGroup as its group and at least rwxrwx--- with the setgid bit (`requiresPermissionChange`);
  otherwise `walkDeep` over the whole tree, where a directory it cannot list fails the mount
  (the pod stays ContainerCreating) and a failed chown or chmod is only logged
  (`changeFilePermission`). `kubelet_change_permissions` is that code, run by the caller as
  the credential the file server sees for the kubelet.
- root_squash (exports(5)): the server maps uid 0 to the anonymous uid/gid (65534) and judges
  every call with that credential; the client's capabilities count for nothing there. A
  process of that uid and gid with no capabilities meets the same checks on a local
  directory, so `as_server_sees` runs the real commands that way.
"""

from __future__ import annotations

import ast
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "storage" / "csi-drivers.json").read_text())
ANON = 65534  # exports(5): anonuid and anongid default to the nobody account
RW_MASK, RO_MASK, EXEC_MASK = 0o660, 0o440, 0o110  # volume_linux.go


def fs_group_policy(driver: str, chart_values: dict[str, Any]) -> str:
    """The CSIDriver's spec.fsGroupPolicy as installed: the chart's template over its values
    (`chart_values`: the chart's defaults with the program's values on top, dotted keys)."""
    rule = FIXTURE["drivers"][driver]["fs_group_policy"]
    if rule is None:
        return FIXTURE["default_fs_group_policy"]["value"]
    if "when_value" in rule:
        return rule["value"] if chart_values.get(rule["when_value"]) else FIXTURE["default_fs_group_policy"]["value"]
    return chart_values.get(rule["value_of"], rule["default"])


def kubelet_applies_fs_group(pv: dict[str, Any], pod_volume: dict[str, Any], fs_group: int | None,
                             chart_values: dict[str, Any]) -> bool:
    """csi_mounter.go supportsFSGroup (and SetUpAt's VOLUME_MOUNT_GROUP branch) for the PV a
    pod's volume binds; False for a hostPath PV."""
    if "csi" not in pv:
        return False
    csi = pv["csi"]
    driver = FIXTURE["drivers"][csi["driver"]]
    if "VOLUME_MOUNT_GROUP" in driver.get("node_capabilities", []):
        return False  # the driver mounts with the group itself
    read_only = bool(csi.get("readOnly")) or bool((pod_volume.get("persistentVolumeClaim") or {}).get("readOnly"))
    policy = fs_group_policy(csi["driver"], chart_values)
    if fs_group is None or policy == "None" or read_only:
        return False
    if policy == "File":
        return True
    if not csi.get("fsType"):
        return False
    return "ReadWriteOnce" in (pv.get("accessModes") or [])


def requires_permission_change(root: str, fs_group: int, read_only: bool) -> bool:
    """volume_linux.go requiresPermissionChange."""
    try:
        st = os.stat(root)
    except OSError:
        return True
    if st.st_gid != fs_group:
        return True
    if not stat.S_ISDIR(st.st_mode):
        return True
    perms = (RO_MASK if read_only else RW_MASK) | EXEC_MASK
    return (perms & stat.S_IMODE(st.st_mode)) != perms or not st.st_mode & stat.S_ISGID


def kubelet_change_permissions(root: str, fs_group: int, policy: str | None, read_only: bool) -> str | None:
    """volume_linux.go ChangePermissions: None when the mount goes on, else the error that fails it."""
    if policy == "OnRootMismatch" and not requires_permission_change(root, fs_group, read_only):
        return None

    def change(path: str, info: os.stat_result) -> None:  # changeFilePermission: errors only logged
        try:
            os.lchown(path, -1, fs_group)
        except OSError:
            pass
        if stat.S_ISLNK(info.st_mode):
            return
        mask = (RO_MASK if read_only else RW_MASK) | ((stat.S_ISGID | EXEC_MASK) if stat.S_ISDIR(info.st_mode) else 0)
        try:
            os.chmod(path, stat.S_IMODE(info.st_mode) | mask)
        except OSError:
            pass

    def walk(path: str, info: os.stat_result) -> None:  # walkDeep: children first, then the directory
        if stat.S_ISDIR(info.st_mode):
            for name in os.listdir(path):  # readDirNames: an error here ends the walk
                child = os.path.join(path, name)
                walk(child, os.lstat(child))
        change(path, info)

    try:
        walk(root, os.lstat(root))
    except OSError as e:
        return f"applyFSGroup failed: {e.strerror}: {e.filename}"
    return None


def as_server_sees(command: list[str], squashed: bool, caps: list[str] | None = None,
                   cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run `command` as a root process on an NFS client whose calls the server judges: with
    root_squash as uid/gid 65534 and no capabilities, else as root with `caps` (the
    container's capabilities; None: all of them, as the kubelet has)."""
    if squashed:
        prefix = ["setpriv", f"--reuid={ANON}", f"--regid={ANON}", "--clear-groups", "--inh-caps=-all",
                  "--bounding-set=-all"]
    elif caps is not None:
        prefix = ["setpriv", "--inh-caps=-all", "--bounding-set=" + ",".join(["-all", *(f"+{c.lower()}" for c in caps)])]
    else:
        prefix = []
    return subprocess.run([*prefix, *command], capture_output=True, text=True, cwd=cwd)


def as_pod(command: list[str], pod_security_context: dict[str, Any]) -> subprocess.CompletedProcess:
    """Run `command` as a container of the pod runs: runAsUser, runAsGroup, and fsGroup and
    supplementalGroups as supplementary groups, no capabilities."""
    sc = pod_security_context
    groups = [*([sc["fsGroup"]] if "fsGroup" in sc else []), *sc.get("supplementalGroups", [])]
    prefix = ["setpriv", f"--reuid={sc['runAsUser']}", f"--regid={sc.get('runAsGroup', sc['runAsUser'])}",
              f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups",
              "--inh-caps=-all", "--bounding-set=-all"]
    return subprocess.run([*prefix, *command], capture_output=True, text=True)


def kubelet_mount(root: str, fs_group: int, policy: str | None, read_only: bool, squashed: bool) -> str | None:
    """kubelet_change_permissions as the server sees the kubelet (root, squashed or not)."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import storage_model as m; "
            f"print(repr(m.kubelet_change_permissions({root!r}, {fs_group}, {policy!r}, {read_only})))")
    done = as_server_sees([sys.executable, "-c", code], squashed)
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip())  # a repr of None or of a str
