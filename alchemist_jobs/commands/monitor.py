"""`alchemist monitor`: a real Prometheus (and optionally TensorBoard) following local runs.

Prometheus comes from the system (`prometheus` on PATH, or $PROMETHEUS_BIN). Its config is
generated from monitoring/prometheus/local.yml.tmpl: file-based service discovery reads a
targets file that this command rewrites every second from the run directories
(`<home>/runs/<run>/workers/*.json`), so running runs' workers appear and finished runs'
disappear; the alert rules come from monitoring/rules/. Everything listens on 127.0.0.1 only,
and since every account of the machine reaches loopback, both ask for a login: Prometheus
through its --web.config.file (a bcrypt hash), TensorBoard through alchemist_jobs.monitor_tensorboard;
the password is kept in <home>/monitor/password (0600). The state folder is the owner's alone
(0700, files 0600, whatever the umask). Ctrl-C (or SIGTERM) stops Prometheus and TensorBoard
with it; they also die if it is killed.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

import alchemist_jobs
from alchemist_jobs import environment as E
from alchemist_jobs.commands import command
from alchemist_jobs.errors import JobFailed, UserError
from alchemist_jobs.processes import alive, popen_group, stop_groups
from alchemist_jobs.rundir import (
    RunDir,
    default_root,
    read_json,
    runs_root,
    write_json_atomic,
    write_text_atomic,
)


def _importable_path() -> str:
    """PYTHONPATH for a child that runs `-m alchemist_jobs...`: this package's parent first
    (a checkout run without installing), then whatever the caller had."""
    here = str(Path(alchemist_jobs.__file__).resolve().parent.parent)
    return os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)


def _monitoring_dir() -> Path:
    """The checkout's monitoring/ folder: installed as alchemist_jobs.monitoring_data (a wheel,
    or an editable install; pyproject.toml maps the folder), or found beside alchemist_jobs."""
    try:
        found = importlib.util.find_spec("alchemist_jobs.monitoring_data")
    except (ImportError, ValueError):
        found = None
    if found is not None and found.submodule_search_locations:
        return Path(next(iter(found.submodule_search_locations)))
    return Path(alchemist_jobs.__file__).resolve().parent.parent / "monitoring"


MONITORING_DIR = _monitoring_dir()
INSTALL_HINT = (
    "install it with `sudo apt-get install -y --no-install-recommends prometheus` "
    "(Debian/Ubuntu), or download it from https://prometheus.io/download/ and set "
    "PROMETHEUS_BIN=/path/to/prometheus"
)
POLL_S = 1.0
USERNAME = "alchemist"  # the login of the monitor's Prometheus and TensorBoard
BCRYPT_ROUNDS = 10  # the password is 32 random bytes: the hash need not be slow to be safe
STOP_GRACE_S = 10.0
_DURATION = re.compile(r"^([0-9]+)(ms|s|m|h)$")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "monitor",
        "run a local Prometheus (and TensorBoard) over local runs",
        ["alchemist monitor", "alchemist monitor --port 0"],
    )
    p.add_argument(
        "--home",
        type=Path,
        default=None,
        help=f"local stack's shared-file-system root (default: ${E.HOME.name} or ~/.alchemist)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=9090,
        help="Prometheus port on 127.0.0.1 (default 9090; 0 picks a free one)",
    )
    p.add_argument(
        "--scrape-interval",
        default="5s",
        help="how often workers are scraped and rules evaluated (default 5s)",
    )
    p.add_argument("--retention", default="7d", help="how long Prometheus keeps samples (default 7d)")
    p.add_argument(
        "--rules",
        type=Path,
        default=None,
        help="a rule file or a directory of *.yaml rule files (default: monitoring/rules of this checkout)",
    )
    p.add_argument("--tensorboard", action="store_true", help="also start TensorBoard over <home>/runs")
    p.add_argument(
        "--tensorboard-port",
        type=int,
        default=6006,
        help="TensorBoard port on 127.0.0.1 (default 6006; 0 picks a free one)",
    )
    p.set_defaults(func=cmd_monitor)


# --- pure parts: which binary, which targets, which config -------------------------------------


def find_prometheus(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    given = env.get("PROMETHEUS_BIN")
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return given
        raise UserError(
            f"PROMETHEUS_BIN={given!r} is not an executable file; accepted: the path "
            f"of a prometheus binary, or unset it to use `prometheus` from PATH; "
            f"{INSTALL_HINT}"
        )
    found = shutil.which("prometheus", path=env.get("PATH", os.defpath))
    if found is None:
        raise UserError(
            f"alchemist monitor: no Prometheus binary found (no `prometheus` on PATH, "
            f"PROMETHEUS_BIN unset); {INSTALL_HINT}"
        )
    return found


def rule_files(given: Path | None) -> str:
    """The `rule_files` glob for the config; a bad --rules is a UserError."""
    if given is None:
        rules = MONITORING_DIR / "rules"
        if not rules.is_dir():
            raise UserError(
                f"alchemist monitor: no alert rules at {rules} (monitoring/ sits next to "
                "the alchemist_jobs package in a checkout); accepted: run from a checkout "
                "of the repository, or pass --rules DIR"
            )
        return str(rules / "*.yaml")
    path = given.resolve()
    if path.is_file():
        return str(path)
    if path.is_dir() and any(path.glob("*.yaml")):
        return str(path / "*.yaml")
    raise UserError(
        f"--rules {str(given)!r}: no such rule file or directory with *.yaml files; "
        "accepted: a Prometheus rule file or a directory of them"
    )


def parse_interval(text: str, flag: str = "--scrape-interval") -> float:
    m = _DURATION.match(text)
    if not m or int(m.group(1)) == 0:
        raise UserError(f"{flag} {text!r}: accepted: a Prometheus duration such as 500ms, 1s, 15s, 1m")
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def render_config(
    *,
    scrape_interval: str,
    rule_glob: str,
    targets_file: Path,
    self_address: str,
    password_file: Path,
    username: str = USERNAME,
    template: Path | None = None,
) -> str:
    """The Prometheus config from monitoring/prometheus/local.yml.tmpl (Prometheus scrapes
    itself with the login it asks of everyone)."""
    template = template or MONITORING_DIR / "prometheus" / "local.yml.tmpl"
    try:
        text = template.read_text()
    except FileNotFoundError:
        raise UserError(
            f"alchemist monitor: {template} is missing; accepted: run from a checkout of the repository"
        ) from None
    seconds = parse_interval(scrape_interval)
    timeout = scrape_interval if seconds <= 10 else "10s"  # a timeout may not exceed the interval
    q = json.dumps  # a JSON string is a YAML string: paths with any character stay one value
    return string.Template(text).substitute(
        scrape_interval=scrape_interval,
        scrape_timeout=timeout,
        evaluation_interval=scrape_interval,
        rule_files=q(rule_glob),
        targets_file=q(str(targets_file)),
        self_address=q(self_address),
        username=q(username),
        password_file=q(str(password_file)),
    )


def web_config(password: str, username: str = USERNAME) -> str:
    """Prometheus's --web.config.file: basic auth for every endpoint (the UI, the API,
    /metrics, /-/ready), with the password as a bcrypt hash, the format 2.42 reads
    (exporter-toolkit's `basic_auth_users`)."""
    import bcrypt  # lazily: only `alchemist monitor` needs it

    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS)).decode()
    return (
        "# Written by `alchemist monitor`: the login of its Prometheus.\n"
        f"basic_auth_users:\n  {json.dumps(username)}: {json.dumps(hashed)}\n"
    )


class TargetFinder:
    """File-SD target groups for every metrics endpoint of every running local run."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._algorithms: dict[str, str] = {}
        self._done: set[str] = set()

    def _algorithm(self, run) -> str:
        if run.run_id not in self._algorithms:
            import yaml

            try:
                spec = yaml.safe_load(run.spec.read_text()) or {}
                algo = (spec.get("algorithm") or {}).get("name", "sync")
            except (OSError, yaml.YAMLError, AttributeError):
                algo = ""
            self._algorithms[run.run_id] = str(algo)
        return self._algorithms[run.run_id]

    def groups(self) -> list[dict]:
        from alchemist_jobs.scheduler import FINAL_STATES, RUNNING
        from alchemist_jobs.stacks import local_scheduler

        base = runs_root(self.root)
        if not base.is_dir():
            return []
        sched = local_scheduler(self.root)
        out = []
        for path in sorted(base.iterdir()):
            if path.name in self._done:
                continue  # a finished run never runs again: not even its state is read
            run = RunDir(path)
            st = run.state()
            if st.get("state") in FINAL_STATES:
                self._done.add(path.name)
                continue
            # status() tells a live run from one whose launcher died without a word.
            if st.get("state") != RUNNING or sched.status(run.run_id).state != RUNNING:
                continue
            bridge = st.get("metrics_bridge")  # the run's own network: the one way in
            for rec_path in sorted(run.workers.glob("*.json")):
                rec = read_json(rec_path)
                if not rec or not rec.get("metrics_port") or rec.get("finished"):
                    continue  # no endpoint (user scripts), or a worker that is done
                where = {"targets": [f"127.0.0.1:{int(rec['metrics_port'])}"]}
                if isinstance(bridge, int) and not isinstance(bridge, bool):
                    where = {"targets": [f"127.0.0.1:{bridge}"]}
                    metrics_path = {"__metrics_path__": f"/metrics/{rec_path.stem}"}
                else:
                    metrics_path = {}
                out.append(
                    {
                        **where,
                        "labels": {
                            **metrics_path,
                            "job": st.get("name") or run.run_id.rsplit("-", 3)[0],
                            "run": run.run_id,
                            "rank": str(rec.get("rank", rec_path.stem)),
                            "node": str(rec.get("node") or ""),
                            "algorithm": self._algorithm(run),
                        },
                    }
                )
        return out


# --- the command -------------------------------------------------------------------------------


def _port(port: int, flag: str) -> int:
    """A free 127.0.0.1 port: the given one if free, any free one for 0."""
    if not 0 <= port <= 65535:
        raise UserError(f"{flag} {port}: accepted: a port number 0..65535 (0 picks a free one)")
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise UserError(
                f"{flag} {port}: 127.0.0.1:{port} is in use; accepted: a free port, or 0 to pick one"
            ) from None
        return s.getsockname()[1]


def _private_dir(path: Path) -> None:
    """`path` as a folder only this account can enter (0700), whatever the umask: made
    exclusively, or, if it exists, checked to be this account's own real folder. One another
    account could write to may hold what it planted there, and is refused; one that others
    could only read is made 0700."""
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # mkdir's mode is cut by the umask, never widened
        return
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        what = (
            "a link"
            if stat.S_ISLNK(st.st_mode)
            else ("not a folder" if not stat.S_ISDIR(st.st_mode) else f"owned by uid {st.st_uid}")
        )
        raise UserError(
            f"alchemist monitor: {path} is {what}; accepted: a folder of your own "
            f"(uid {os.geteuid()}): remove it, or --home another"
        )
    if stat.S_IMODE(st.st_mode) & 0o022:
        raise UserError(
            f"alchemist monitor: {path} has mode {stat.S_IMODE(st.st_mode):04o}: "
            "other accounts could have planted files in it; accepted: a folder only "
            f"you can write: check its contents and `chmod 700 {path}`, or remove it"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)


def _private_file(path: Path, flags: int) -> int:
    """A descriptor on `path` (created 0600 if missing), never through a link, checked to be
    this account's regular file and made 0600 (a file an older version wrote 0664)."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise UserError(f"alchemist monitor: {path} is not a file of your own; accepted: remove it")
    if stat.S_IMODE(st.st_mode) != 0o600:
        os.fchmod(fd, 0o600)
    return fd


def _password(path: Path) -> str:
    """The monitor's password: the one kept in `path` (0600, this account's), or a new one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        fd = None
    if fd is not None:
        with open(fd) as f:
            st = os.fstat(f.fileno())
            kept = f.read(256).strip() if stat.S_ISREG(st.st_mode) else ""
        if (
            kept
            and st.st_uid == os.geteuid()
            and not stat.S_IMODE(st.st_mode) & 0o077
            and re.fullmatch(r"[A-Za-z0-9_-]{32,}", kept)
        ):
            return kept  # the owner's browsers keep their login across restarts
    password = secrets.token_urlsafe(32)
    write_text_atomic(path, password + "\n")
    return password


def _start(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    fd = _private_file(log, os.O_WRONLY | os.O_APPEND)
    with open(fd, "ab") as out:
        # Own session: a terminal's Ctrl-C reaches only this command, which stops them in order.
        return popen_group(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)


def _basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def _answers(url: str, authorization: str | None = None) -> bool:
    try:
        import urllib.request  # lazily: every `alchemist` command imports this module's parser

        req = urllib.request.Request(url)
        if authorization:
            req.add_header("Authorization", authorization)
        with urllib.request.urlopen(req, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def _tail(path: Path, n: int = 8) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-n:])
    except OSError:
        return "(no log)"


def _stop(procs: list[subprocess.Popen]) -> None:
    stop_groups(procs, STOP_GRACE_S)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _wait_ready(prom: subprocess.Popen, prom_url: str, prom_log: Path, authorization: str) -> None:
    deadline = time.monotonic() + 60
    while not _answers(f"{prom_url}/-/ready", authorization):
        if prom.poll() is not None:
            raise JobFailed(
                f"Prometheus exited at start (code {prom.returncode}); {prom_log}: {_tail(prom_log)}"
            )
        if time.monotonic() > deadline:
            raise JobFailed(f"Prometheus did not become ready in 60 s; {prom_log}: {_tail(prom_log)}")
        time.sleep(0.2)


def _follow_targets(
    finder: TargetFinder,
    last: list,
    targets_file: Path,
    prom: subprocess.Popen,
    prom_log: Path,
    tb: subprocess.Popen | None,
    state_dir: Path,
) -> NoReturn:
    """Until interrupted: keep the targets file in step with the running runs."""
    tb_reported = False
    while True:
        time.sleep(POLL_S)
        if prom.poll() is not None:
            raise JobFailed(f"Prometheus exited (code {prom.returncode}); {prom_log}: {_tail(prom_log)}")
        if tb is not None and tb.poll() is not None and not tb_reported:
            tb_reported = True
            print(
                f"warning: TensorBoard exited (code {tb.returncode}); see {state_dir / 'tensorboard.log'}",
                file=sys.stderr,
                flush=True,
            )
        groups = finder.groups()
        if groups != last:  # Prometheus re-reads the file when it changes
            write_json_atomic(targets_file, groups)
            last = groups


def _one_per_home(root: Path, state_dir: Path, state_file: Path) -> int:
    """An exclusive lock on the home's monitor (a descriptor to keep open): two monitors
    would share one Prometheus data directory. Taken before anything is written, so a second
    monitor started while the first is still starting Prometheus is refused too."""
    fd = _private_file(state_dir / "monitor.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        other = read_json(state_file) or {}
        pid = f" (pid {other['pid']})" if alive(other.get("pid")) else ""
        url = f" at {other['prometheus_url']}" if pid and other.get("prometheus_url") else ""
        raise UserError(
            f"alchemist monitor: another monitor{pid} already serves {root}{url}; "
            "accepted: one monitor per home: stop it first, or --home another"
        ) from None
    return fd


def _claim_state(root: Path, state_dir: Path, state_file: Path, password_file: Path) -> tuple[int, str, Path]:
    """The home's private monitor folder, held by this monitor (the lock's fd, held until the
    command ends), with the login's password and Prometheus's web config written."""
    root.mkdir(parents=True, exist_ok=True)
    _private_dir(state_dir)
    lock = _one_per_home(root, state_dir, state_file)
    try:
        if (state_dir / "data").exists():
            _private_dir(state_dir / "data")  # Prometheus's, from an older, looser monitor
        password = _password(password_file)
        web_file = state_dir / "web.yml"
        write_text_atomic(web_file, web_config(password))
    except BaseException:
        os.close(lock)
        raise
    return lock, password, web_file


def cmd_monitor(args: argparse.Namespace) -> int:
    # Everything is checked before anything starts or is written.
    prom_bin = find_prometheus()
    rule_glob = rule_files(args.rules)
    parse_interval(args.scrape_interval)
    if not re.fullmatch(r"[0-9]+(ms|s|m|h|d|w|y)", args.retention):
        raise UserError(f"--retention {args.retention!r}: accepted: a Prometheus duration such as 7d")
    root = Path(args.home) if args.home else default_root()
    state_dir = root / "monitor"
    state_file = state_dir / "monitor.json"
    other = read_json(state_file)
    if other and alive(other.get("pid")) and other.get("pid") != os.getpid():
        raise UserError(
            f"alchemist monitor: another monitor (pid {other['pid']}) already serves "
            f"{root} at {other.get('prometheus_url')}; stop it first"
        )
    port = _port(args.port, "--port")
    tb_port = _port(args.tensorboard_port, "--tensorboard-port") if args.tensorboard else None

    targets_file = state_dir / "targets.json"
    password_file = state_dir / "password"
    config_text = render_config(
        scrape_interval=args.scrape_interval,
        rule_glob=rule_glob,
        targets_file=targets_file,
        self_address=f"127.0.0.1:{port}",
        password_file=password_file,
    )

    lock, password, web_file = _claim_state(root, state_dir, state_file, password_file)
    runs_root(root).mkdir(mode=0o700, parents=True, exist_ok=True)
    finder = TargetFinder(root)
    groups = finder.groups()
    write_json_atomic(targets_file, groups)
    config = state_dir / "prometheus.yml"
    write_text_atomic(config, config_text)

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in handled}
    for sig in (signal.SIGTERM, signal.SIGHUP):  # stop like Ctrl-C does
        signal.signal(sig, _raise_interrupt)
    procs: list[subprocess.Popen] = []
    prom_url = f"http://127.0.0.1:{port}"
    tb_url = f"http://127.0.0.1:{tb_port}" if tb_port else None
    try:
        prom_log = state_dir / "prometheus.log"
        prom = _start(
            [
                prom_bin,
                f"--config.file={config}",
                f"--storage.tsdb.path={state_dir / 'data'}",
                f"--storage.tsdb.retention.time={args.retention}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--web.config.file={web_file}",
            ],
            prom_log,
        )
        procs.append(prom)
        tb = None
        if tb_port:
            tb = _start(
                [
                    sys.executable,
                    "-m",
                    "alchemist_jobs.monitor_tensorboard",
                    "--logdir",
                    str(runs_root(root)),
                    "--port",
                    str(tb_port),
                    "--username",
                    USERNAME,
                    "--password-file",
                    str(password_file),
                ],
                state_dir / "tensorboard.log",
                env=dict(os.environ, PYTHONPATH=_importable_path()),
            )
            procs.append(tb)
        _wait_ready(prom, prom_url, prom_log, _basic(USERNAME, password))
        write_json_atomic(
            state_file,
            dict(
                pid=os.getpid(),
                prometheus_pid=prom.pid,
                prometheus_url=prom_url,
                tensorboard_pid=tb.pid if tb else None,
                tensorboard_url=tb_url,
                username=USERNAME,
                password_file=str(password_file),
                web_config=str(web_file),
                config=str(config),
                targets_file=str(targets_file),
                rules=rule_glob,
                started=time.time(),
            ),
        )
        print(
            f"Prometheus  {prom_url}  (scraping local runs under {runs_root(root)} every "
            f"{args.scrape_interval}; alert rules {rule_glob})",
            flush=True,
        )
        if tb_url:
            print(f"TensorBoard {tb_url}  (over {runs_root(root)})", flush=True)
        # Where the password is, never the password: this output may end in a shared log.
        print(f"Log in as {USERNAME!r} with the password in {password_file} (yours alone).", flush=True)
        print("Ctrl-C stops them.", flush=True)
        _follow_targets(finder, groups, targets_file, prom, prom_log, tb, state_dir)
    except KeyboardInterrupt:
        print("stopping ...", file=sys.stderr, flush=True)
        return 0
    finally:
        for sig in handled:
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        _stop(procs)
        if (read_json(state_file) or {}).get("pid") == os.getpid():
            state_file.unlink(missing_ok=True)
        os.close(lock)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
