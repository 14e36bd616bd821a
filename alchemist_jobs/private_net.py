"""A local run's private network: every process of the job in one user and network namespace
of its own, so what the job listens on (gloo's pairs, a TensorFlow or JAX coordinator, the
parameter servers, each rank's /metrics) is reachable from the job alone.

On a shared machine loopback is not private: any account reaches 127.0.0.1, and a listener
on every interface (TensorFlow's gRPC servers) is reachable from other hosts too. A network
namespace has its own loopback and no other interface; the user namespace around it lets an
account without privileges make one. The run's uid and gid are mapped to themselves (not to
root), so ownership and permission checks inside stay what they are outside.

The launcher starts a small holder process in a new namespace (`unshare` in the child before
exec, where the process still holds the namespace's capabilities, so `lo` comes up there);
every agent and parameter server then joins it (`setns` before exec). The holder also

- makes the parameter servers' listening sockets inside the namespace and hands them to the
  launcher (which keeps them across a server's restarts, local_servers.py), and
- answers `GET /metrics/<worker>` on one loopback port of this machine's own network (the
  metrics bridge), by reading that worker's /metrics inside the namespace: the one way in,
  read-only, for the monitor's Prometheus and the dashboard (commands/monitor.py, ui/series.py).

Outbound, the job goes through `slirp4netns` (user-mode NAT, what rootless podman uses; no
privileges), started on the namespace once it exists and ended with the run: its --exit-fd
is a pipe only the launcher holds, so it exits when the run stops or the launcher dies. It
forwards nothing inward, so every listener of the job stays private. The host's 127.0.0.1
is 10.0.2.2 from inside (`HOST_LOOPBACK`): the S3 endpoint the workers are given
(AWS_ENDPOINT_URL[_S3]) is rewritten to it when it names loopback (`for_job`). Without
slirp4netns the job keeps its private network with no outbound, and one warning line.

Where user namespaces are unavailable (a kernel setting, a container without them, or
ALCHEMIST_LOCAL_NETNS=0) the job runs in this machine's network with one warning line.

    python -m alchemist_jobs.private_net CONTROL_FD BRIDGE_FD RUN_DIR LISTENERS   (the holder)

Standard library only: the CLI imports this before anything heavy (warm_agent.py).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
from typing import TYPE_CHECKING

from alchemist_jobs import environment as E
from alchemist_jobs.processes import popen_group, stop_groups

if TYPE_CHECKING:
    import http.server

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
START_TIMEOUT_S = 120.0  # the holder is a bare interpreter; a loaded machine may be slow

SLIRP = "slirp4netns"
HOST_LOOPBACK = "10.0.2.2"  # slirp4netns's gateway: the host's 127.0.0.1 seen from inside
SLIRP_DNS = "10.0.2.3"  # slirp4netns's forwarder to the host's own nameservers
# The endpoints a worker is given that it reaches on this machine's loopback (data/s3.py).
ENDPOINT_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
_LOOPBACK_NAMES = ("localhost", "::1")

_why_not: list[str | None] = []  # the probe's answer, once per process


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6", use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())  # the kernel takes a map in one write
    finally:
        os.close(fd)


def loopback_up() -> None:
    """Bring `lo` up in this process's network namespace (needs CAP_NET_ADMIN there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        got = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))
        flags = struct.unpack("16sH", got[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def enter_new(uid: int, gid: int, libc: ctypes.CDLL) -> None:
    """In a child before exec: a new user and network namespace, this uid and gid mapped to
    themselves, `lo` up. `libc` is loaded before the fork: never load a library between fork
    and exec (another thread of the parent may have held the loader's lock)."""
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare")
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/setgroups", "deny")  # required before an unprivileged gid_map
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    loopback_up()


def new_namespace_preexec(strict: bool = True):
    """A preexec_fn that puts the child in a new namespace (uid and gid read here, before
    the fork). Not `strict`: a child that cannot have one starts in this network (the
    launcher sees that: its namespace is ours, `ns_of`)."""
    uid, gid, libc = os.getuid(), os.getgid(), _libc()

    def pre() -> None:
        try:
            enter_new(uid, gid, libc)
        except OSError:
            if strict:
                raise

    return pre


def join(user_fd: int, net_fd: int, libc: ctypes.CDLL) -> None:
    """In a child before exec: join the namespace these /proc/PID/ns descriptors name."""
    _check(libc.setns(user_fd, CLONE_NEWUSER), "setns(user)")
    _check(libc.setns(net_fd, CLONE_NEWNET), "setns(net)")


def unavailable() -> str | None:
    """Why local jobs cannot have a private network here (None: they can). Checked once per
    process, by making one in a child that exits at once."""
    if not E.LOCAL_NETNS.get(default=True):
        return f"{E.LOCAL_NETNS.name}=0"
    if _why_not:
        return _why_not[0]
    why: str | None = None
    if not sys.platform.startswith("linux"):
        why = f"network namespaces are Linux only (this is {sys.platform})"
    else:
        uid, gid, libc = os.getuid(), os.getgid(), _libc()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: try it, report the error, exit without cleanup
            os.close(r)
            try:
                enter_new(uid, gid, libc)
                os._exit(0)
            except BaseException as e:  # noqa: BLE001 - anything here is the answer
                os.write(w, str(e).encode()[:300])
                os._exit(1)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            err = f.read().decode(errors="replace")
        _, status = os.waitpid(pid, 0)
        if status != 0:
            why = (
                f"user namespaces are unavailable ({err or 'status ' + str(status)}; "
                "kernel.unprivileged_userns_clone or user.max_user_namespaces may be 0)"
            )
    _why_not.append(why)
    return why


def no_outbound() -> str | None:
    """Why a job's private network would have no outbound here (None: slirp4netns gives it)."""
    if shutil.which(SLIRP) is None:
        return f"{SLIRP} is not installed"
    if not os.path.exists("/dev/net/tun"):
        return f"{SLIRP} needs /dev/net/tun, which this machine lacks"
    return None


def _is_loopback(host: str) -> bool:
    return host.lower() in _LOOPBACK_NAMES or host.startswith("127.")


def loopback_nameservers(resolv: str = "/etc/resolv.conf") -> list[str]:
    """The nameservers of `resolv` when every one of them is a loopback address (systemd-
    resolved's 127.0.0.53, Docker's 127.0.0.11): unreachable from the job's network, which
    shares this file. Empty when name resolution works inside (or the file names none)."""
    try:
        with open(resolv) as f:
            servers = [ln.split()[1] for ln in f if ln.split()[:1] == ["nameserver"] and len(ln.split()) > 1]
    except OSError:
        return []
    return servers if servers and all(_is_loopback(s) for s in servers) else []


def for_job(env: dict[str, str]) -> dict[str, str]:
    """`env` with each endpoint in ENDPOINT_VARS that names this machine's loopback made to
    name HOST_LOOPBACK, the same service seen from inside the job's network."""
    out = dict(env)
    for name in ENDPOINT_VARS:
        url = out.get(name)
        if not url:
            continue
        try:
            parts = urllib.parse.urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:  # not a URL botocore would take either; leave its error to it
            continue
        if host is None or not _is_loopback(host):
            continue
        netloc = parts.netloc.rpartition("@")[0]
        netloc = (netloc + "@" if netloc else "") + HOST_LOOPBACK + (f":{port}" if port else "")
        out[name] = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return out


def start_outbound(pid: int, log: str, timeout: float = START_TIMEOUT_S) -> subprocess.Popen:
    """slirp4netns on the namespace `pid` is in, configured (tap0 up, address and default
    route) when this returns. It ends when the write end of its exit pipe closes: `close`
    of the returned process's `exit_w`, or the death of this process, which alone holds it."""

    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()
    try:
        with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
            proc = popen_group(
                [
                    shutil.which(SLIRP) or SLIRP,
                    "--configure",
                    "--mtu=65520",
                    f"--ready-fd={ready_w}",
                    f"--exit-fd={exit_r}",
                    f"--userns-path=/proc/{pid}/ns/user",
                    "--netns-type=path",
                    f"/proc/{pid}/ns/net",
                    "tap0",
                ],
                pass_fds=(ready_w, exit_r),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
    except BaseException:
        for fd in (ready_r, exit_w):
            os.close(fd)
        raise
    finally:
        os.close(ready_w)
        os.close(exit_r)
    proc.exit_w = exit_w  # type: ignore[attr-defined]
    try:  # "1" once configured; end of file if it died first
        deadline = time.monotonic() + timeout
        got = b""
        while not got:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([ready_r], [], [], left)[0]:
                raise OSError(f"{SLIRP} did not configure the job's network in {timeout:.0f} s (see {log})")
            got = os.read(ready_r, 1)
            if not got:
                raise OSError(f"{SLIRP} exited before configuring the job's network (see {log})")
    except BaseException:
        stop_outbound(proc)
        raise
    finally:
        os.close(ready_r)
    return proc


def stop_outbound(proc: subprocess.Popen) -> None:

    exit_w = getattr(proc, "exit_w", -1)
    if exit_w >= 0:
        os.close(exit_w)  # slirp4netns exits on this
        proc.exit_w = -1  # type: ignore[attr-defined]
    stop_groups([proc], 5.0)


def ns_of(pid: int, kind: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return ""


class PrivateNet:
    """A running job's namespace: its holder process, descriptors of its namespaces (which
    keep them alive and let later processes join), the servers' listening sockets made in it,
    and the metrics bridge's port on this machine's loopback."""

    def __init__(
        self,
        run_dir: str,
        listeners: int,
        log: str,
        join_pid: int | None = None,
        env: dict[str, str] | None = None,
        outbound: bool = False,
    ):
        from alchemist_jobs.processes import popen_group  # stdlib only

        self.user_fd = self.net_fd = -1
        self.slirp: subprocess.Popen | None = None
        self.libc = _libc()  # loaded here, not in a child between fork and exec
        ours, theirs = socket.socketpair()
        bridge = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            bridge.bind(("127.0.0.1", 0))
            bridge.listen(64)
            self.bridge_port = bridge.getsockname()[1]
            if join_pid is not None:  # a process already in a namespace of its own
                self._open_ns(join_pid)
                user_fd, net_fd, libc = self.user_fd, self.net_fd, self.libc
                pre = lambda: join(user_fd, net_fd, libc)  # noqa: E731
            else:
                pre = new_namespace_preexec()
            with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
                self.proc = popen_group(
                    [
                        sys.executable,
                        "-m",
                        "alchemist_jobs.private_net",
                        str(theirs.fileno()),
                        str(bridge.fileno()),
                        run_dir,
                        str(listeners),
                    ],
                    preexec=pre,
                    pass_fds=(theirs.fileno(), bridge.fileno()),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
        finally:
            theirs.close()
            bridge.close()  # the holder has it now
        self.control = ours
        try:
            if join_pid is None:
                self._open_ns(self.proc.pid)
            ours.settimeout(START_TIMEOUT_S)
            msg, fds, _, _ = socket.recv_fds(ours, 16, max(listeners, 1))
            if msg != b"ok" or len(fds) != listeners:
                for fd in fds:
                    os.close(fd)
                raise OSError(f"the namespace holder did not start (see {log})")
            ours.settimeout(None)
            self.listeners = [socket.socket(fileno=fd) for fd in fds]
            if outbound:
                self.slirp = start_outbound(join_pid or self.proc.pid, log)
        except BaseException:
            self.close()
            raise

    def _open_ns(self, pid: int) -> None:
        self.user_fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        self.net_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)

    def preexec(self) -> None:
        """preexec_fn of every other process of the job: join this namespace."""
        join(self.user_fd, self.net_fd, self.libc)

    def close(self) -> None:

        if self.slirp is not None:
            stop_outbound(self.slirp)
        self.control.close()  # the holder exits on this
        stop_groups([self.proc], 5.0)
        for fd in (self.user_fd, self.net_fd):
            if fd >= 0:
                os.close(fd)
        self.user_fd = self.net_fd = -1


# --- the holder --------------------------------------------------------------------------------


def _bridge(sock: socket.socket, run_dir: str) -> http.server.ThreadingHTTPServer:
    """Serve GET /metrics/<worker record> from that worker's own /metrics in the namespace."""
    import http.client  # only the holder serves: every local run's CLI imports this module
    import http.server  # (the same)
    import json  # (the same)
    import re  # (the same)
    import threading  # (the same)

    workers = os.path.join(run_dir, "workers")
    name = re.compile(r"/metrics/((?:rank|server)-\d{1,6})")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            m = name.fullmatch(self.path)
            port = None
            if m:
                try:
                    with open(os.path.join(workers, m.group(1) + ".json")) as f:
                        port = json.load(f).get("metrics_port")
                except (OSError, ValueError, AttributeError):
                    port = None
            if not isinstance(port, int) or isinstance(port, bool):
                self.send_error(404, "no such worker endpoint")
                return
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", "/metrics")
                r = conn.getresponse()
                body, ctype = r.read(16 << 20), r.getheader("Content-Type", "text/plain")
                conn.close()
            except (OSError, http.client.HTTPException):
                self.send_error(502, "the worker's endpoint did not answer")
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:  # one line per scrape would fill the log
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.server_address = sock.getsockname()
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True, name="metrics-bridge").start()
    return server


def _hold(control_fd: int, bridge_fd: int, run_dir: str, n: int) -> None:
    control = socket.socket(fileno=control_fd)
    listeners = []
    for _ in range(n):  # the servers' sockets, made here so they are in the namespace
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        listeners.append(s)
    _bridge(socket.socket(fileno=bridge_fd), run_dir)
    socket.send_fds(control, [b"ok"], [s.fileno() for s in listeners])
    for s in listeners:
        s.close()
    while control.recv(64):  # until the launcher closes its end (or dies)
        pass


if __name__ == "__main__":
    _hold(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
