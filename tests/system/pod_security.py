"""Pod Security Admission's `restricted` level (which includes `baseline`), as the API server evaluates a pod spec.

Ported from kubernetes v1.35.0 staging/src/k8s.io/pod-security-admission/policy/, the checks
a namespace labelled `pod-security.kubernetes.io/enforce: restricted` (enforce-version
`latest`) runs on every pod and pod template; every check visits containers, initContainers
and ephemeralContainers (visitor.go visitContainers). One function per upstream file, named
after it; each returns the reason the check forbids the pod, or None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

# check_capabilities_baseline.go: capabilities a container may add at baseline
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
# check_restrictedVolumes.go: the only volume sources at restricted
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
# check_sysctls.go (1.32+ list): the safe sysctls
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
# check_seLinuxOptions.go: the types a pod may ask for
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def _containers(spec: dict) -> Iterator[dict]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(c: dict) -> dict:
    return c.get("securityContext") or {}


def host_namespaces(meta: dict, spec: dict) -> str | None:
    bad = [k for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    return f"host namespaces ({', '.join(bad)})" if bad else None


def privileged(meta: dict, spec: dict) -> str | None:
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("privileged")]
    return f"privileged ({bad})" if bad else None


def capabilities_baseline(meta: dict, spec: dict) -> str | None:
    bad = [c["name"] for c in _containers(spec)
           if set((_sc(c).get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES]
    return f"non-default capabilities ({bad})" if bad else None


def host_path_volumes(meta: dict, spec: dict) -> str | None:
    bad = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    return f"hostPath volumes ({bad})" if bad else None


def host_ports(meta: dict, spec: dict) -> str | None:
    bad = [c["name"] for c in _containers(spec) for p in c.get("ports") or [] if p.get("hostPort")]
    return f"hostPort ({bad})" if bad else None


def app_armor_profile(meta: dict, spec: dict) -> str | None:
    profiles = [(spec.get("securityContext") or {}).get("appArmorProfile")]
    profiles += [_sc(c).get("appArmorProfile") for c in _containers(spec)]
    bad = [p for p in profiles if p and p.get("type") not in ("RuntimeDefault", "Localhost")]
    bad += [v for k, v in (meta.get("annotations") or {}).items()
            if k.startswith("container.apparmor.security.beta.kubernetes.io/")
            and v != "runtime/default" and not v.startswith("localhost/")]
    return f"forbidden AppArmor profile ({bad})" if bad else None


def selinux_options(meta: dict, spec: dict) -> str | None:
    options = [(spec.get("securityContext") or {}).get("seLinuxOptions")] + [_sc(c).get("seLinuxOptions")
                                                                             for c in _containers(spec)]
    bad = [o for o in options if o and (o.get("type", "") not in SELINUX_TYPES or o.get("user") or o.get("role"))]
    return f"seLinuxOptions ({bad})" if bad else None


def proc_mount(meta: dict, spec: dict) -> str | None:
    if spec.get("hostUsers") is False:  # relaxed for user-namespaced pods
        return None
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("procMount", "Default") != "Default"]
    return f"procMount ({bad})" if bad else None


def seccomp_profile_baseline(meta: dict, spec: dict) -> str | None:
    profiles = [(spec.get("securityContext") or {}).get("seccompProfile")]
    profiles += [_sc(c).get("seccompProfile") for c in _containers(spec)]
    bad = [p for p in profiles if p and p.get("type") == "Unconfined"]
    return "seccompProfile type Unconfined" if bad else None


def sysctls(meta: dict, spec: dict) -> str | None:
    bad = [s["name"] for s in (spec.get("securityContext") or {}).get("sysctls") or [] if s["name"] not in SAFE_SYSCTLS]
    return f"forbidden sysctls ({bad})" if bad else None


def windows_host_process(meta: dict, spec: dict) -> str | None:
    options = [(spec.get("securityContext") or {}).get("windowsOptions")] + [_sc(c).get("windowsOptions")
                                                                             for c in _containers(spec)]
    return "hostProcess" if any(o and o.get("hostProcess") for o in options) else None


def restricted_volumes(meta: dict, spec: dict) -> str | None:
    bad = [v["name"] for v in spec.get("volumes") or [] if not (set(v) - {"name"}) <= RESTRICTED_VOLUMES]
    return f"restricted volume types ({bad})" if bad else None


def allow_privilege_escalation(meta: dict, spec: dict) -> str | None:
    if (spec.get("os") or {}).get("name") == "windows":
        return None
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    return f"allowPrivilegeEscalation != false ({bad})" if bad else None


def run_as_non_root(meta: dict, spec: dict) -> str | None:
    if spec.get("hostUsers") is False:
        return None
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    if pod is False:
        return "runAsNonRoot != true (pod)"
    explicit = [c["name"] for c in _containers(spec) if _sc(c).get("runAsNonRoot") is False]
    implicit = [c["name"] for c in _containers(spec) if _sc(c).get("runAsNonRoot") is None and pod is not True]
    return f"runAsNonRoot != true ({explicit or implicit})" if explicit or implicit else None


def run_as_user(meta: dict, spec: dict) -> str | None:
    if spec.get("hostUsers") is False:
        return None
    users = [(spec.get("securityContext") or {}).get("runAsUser")] + [_sc(c).get("runAsUser") for c in _containers(spec)]
    return "runAsUser=0" if 0 in users else None


def seccomp_profile_restricted(meta: dict, spec: dict) -> str | None:
    ok = ("RuntimeDefault", "Localhost")
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    if pod is not None and pod not in ok:
        return f"seccompProfile (pod type {pod})"
    bad = []
    for c in _containers(spec):
        kind = (_sc(c).get("seccompProfile") or {}).get("type")
        if (kind is None and pod is None) or (kind is not None and kind not in ok):
            bad.append(c["name"])
    return f"seccompProfile ({bad} must set type RuntimeDefault or Localhost)" if bad else None


def capabilities_restricted(meta: dict, spec: dict) -> str | None:
    if (spec.get("os") or {}).get("name") == "windows":
        return None
    bad = []
    for c in _containers(spec):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            bad.append(c["name"])
    return f"unrestricted capabilities ({bad} must drop ALL and add only NET_BIND_SERVICE)" if bad else None


BASELINE: tuple[Callable[[dict, dict], str | None], ...] = (
    host_namespaces, privileged, capabilities_baseline, host_path_volumes, host_ports, app_armor_profile,
    selinux_options, proc_mount, seccomp_profile_baseline, sysctls, windows_host_process)
RESTRICTED = (*BASELINE, restricted_volumes, allow_privilege_escalation, run_as_non_root, run_as_user,
              seccomp_profile_restricted, capabilities_restricted)


def violations(template: dict[str, Any], level: str = "restricted") -> list[str]:
    """What `level` forbids in a pod or pod template ({metadata, spec}); [] when it is admitted."""
    checks = {"restricted": RESTRICTED, "baseline": BASELINE, "privileged": ()}[level]
    meta, spec = template.get("metadata") or {}, template["spec"]
    return [r for check in checks if (r := check(meta, spec))]
