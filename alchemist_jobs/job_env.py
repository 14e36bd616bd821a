"""A job's own Python packages (`requirements:`): resolved once against the platform's lock,
installed once per resolved lock, and layered after the platform's site-packages.

* Resolution (`resolve`): pip's own resolver (`pip install --dry-run --report`) with every pin
  of the platform's lock (requirements.lock) as a constraint, so the platform's packages never
  move; the result is a hash-pinned lock of the job's packages (those the platform's runtime
  image lacks), cached under the home by the requirement text, the platform lock's hash, the
  Python and the index settings (PIP_INDEX_URL, PIP_FIND_LINKS...), so an unchanged job is not
  resolved again.
* The environment (`ensure_site`): `pip install --no-deps --require-hashes --target` into
  `<root>/deps/envs/<lock hash>/site`, built once per lock (a file lock: concurrent runs with
  one lock build it once), in a temporary directory renamed into place (never seen half
  built), the least recently used pruned beyond a size limit (`alchemist cache`). The local
  stack's root is the home; a cluster's is its shared file system, where the pods' init
  container runs this same code (`python -m alchemist_jobs.job_env install`).
* The worker (`activate`, from the bootstrap): `site.addsitedir(ALCHEMIST_JOB_SITE)`, which
  appends the directory after the platform's site-packages: a platform package always wins.

No pip import here: pip is run as a program, as a user would run it, and reads its own
configuration (a mirror, credentials in the index URL) from the environment.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

from alchemist_jobs import environment as E
from alchemist_jobs.errors import UserError, shown

RUN_LOCK = "requirements.lock"  # the resolved lock, in the run directory (and the ConfigMap)
SHORT = 16  # hex digits of the lock's sha256 that name its environment
DEPS = "deps"  # <root>/deps/{resolved,envs}
DEFAULT_CACHE_GIB = 10.0
# pip settings that change what a resolution finds: part of the resolution's cache key.
INDEX_SETTINGS = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "PIP_NO_INDEX",
    "PIP_PRE",
    "PIP_ONLY_BINARY",
    "PIP_NO_BINARY",
)
# The section of the platform's lock that every worker has (the training image).
RUNTIME = "runtime"
_REPO_LOCK = Path(__file__).resolve().parent.parent / "requirements.lock"


def canonical(name: str) -> str:
    """PEP 503's normalised name: `Tinydep_ALC` and `tinydep-alc` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


# --- the platform's lock -------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    block: str  # the lock's lines for it: `name==version \` and its `--hash=` lines
    sections: frozenset[str]


@dataclass(frozen=True)
class PlatformLock:
    sha256: str
    pins: dict[str, Pin]  # by canonical name

    def constraints(self) -> str:
        return "".join(f"{p.name}=={p.version}\n" for p in self.pins.values())


_PLATFORM: dict[Path, PlatformLock] = {}


def platform_lock(path: Path | None = None) -> PlatformLock:
    """The platform's lock: requirements.lock beside the package (a checkout, the images),
    else, for an installed wheel, the distributions this Python has, pinned as they are."""
    path = path or _REPO_LOCK
    if path in _PLATFORM:
        return _PLATFORM[path]
    try:
        text = path.read_text()
    except FileNotFoundError:
        from importlib import metadata  # start-up: a lock file is normally there

        text = "# --- section: runtime ---\n" + "".join(
            sorted(
                f"{d.metadata['Name']}=={d.version}\n" for d in metadata.distributions() if d.metadata["Name"]
            )
        )
    pins: dict[str, Pin] = {}
    section, current = "", None
    for line in text.splitlines():
        m = re.match(r"# --- section: (\S+) ---", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"([A-Za-z0-9_.!-]+)==([^ \\]+)", line)
        if m:
            key = canonical(m.group(1))
            old = pins.get(key)
            current = key
            block = line + "\n" if old is None else old.block
            pins[key] = Pin(m.group(1), m.group(2), block, (old.sections if old else frozenset()) | {section})
            continue
        if current and line.startswith("    --hash=") and current in pins:
            p = pins[current]
            if len(p.sections) == 1:  # the first section's lines; later ones repeat them
                pins[current] = Pin(p.name, p.version, p.block + line + "\n", p.sections)
        else:
            current = None
    lock = PlatformLock(hashlib.sha256(text.encode()).hexdigest(), pins)
    _PLATFORM[path] = lock
    return lock


# --- the job's lock -------------------------------------------------------------------------


@dataclass(frozen=True)
class JobLock:
    """The resolved, hash-pinned lock of a job's own packages."""

    text: str
    requested: tuple[str, ...] = field(default=())

    @property
    def sha256(self) -> str:
        return lock_hash(self.text)

    @property
    def short(self) -> str:
        return self.sha256[:SHORT]

    def packages(self) -> list[str]:
        """`name==version` of each package, in the lock's order."""
        return re.findall(r"^([A-Za-z0-9_.!-]+==[^ \\\n]+)", self.text, re.M)

    def as_json(self) -> dict:
        """What `status --json`, the dashboard and `--dry-run --json` show."""
        return {"sha256": self.sha256, "packages": self.packages(), "lock": self.text}


def lock_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def check_requirement(text: str, where: str) -> str:
    """One requirement as the spec gives it: PEP 508, a name from the index (no URL, no
    option); a UserError line naming it otherwise. Returns it stripped."""
    text = text.strip()
    accepted = "a PEP 508 requirement from the package index, e.g. tomli-w==1.2.0"
    if text.startswith("-"):
        raise UserError(
            f"{where}: {shown(text)}: options do not go in requirements; accepted: "
            f"{accepted} (point pip at a mirror with PIP_INDEX_URL or PIP_FIND_LINKS)"
        )
    # packaging and importlib.metadata are imported where used: every worker's bootstrap and
    # the CLI import this module, and a job without requirements never needs them.
    from packaging.requirements import InvalidRequirement, Requirement  # start-up: see above

    try:
        req = Requirement(text)
    except InvalidRequirement:
        raise UserError(f"{where}: {shown(text)} is not a requirement; accepted: {accepted}") from None
    if req.url:
        raise UserError(
            f"{where}: {shown(text)} names a URL, which a hash-pinned lock cannot take; accepted: {accepted}"
        )
    return text


def _moves_a_pin(requirements: list[str], platform: PlatformLock) -> None:
    """A requirement on a platform package that its pin does not satisfy: one line, no pip."""
    from packaging.requirements import Requirement  # start-up: only a job with requirements

    for text in requirements:
        req = Requirement(text)
        pin = platform.pins.get(canonical(req.name))
        if pin is not None and not req.specifier.contains(pin.version, prereleases=True):
            raise UserError(
                f"requirements: {shown(text)} would move the platform's pin "
                f"{pin.name}=={pin.version} (requirements.lock); accepted: a version the pin "
                f"satisfies, or {req.name} alone (the platform's is used)"
            )


def _cache_key(requirements: list[str], platform: PlatformLock) -> str:
    doc = {
        "requirements": requirements,
        "platform": platform.sha256,
        "python": list(sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "machine": os.uname().machine,
        "index": {k: os.environ.get(k, "") for k in INDEX_SETTINGS},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def resolved_root(root: Path) -> Path:
    return Path(root) / DEPS / "resolved"


def envs_root(root: Path) -> Path:
    return Path(root) / DEPS / "envs"


def resolve(requirements: list[str], root: Path, platform: PlatformLock | None = None) -> JobLock:
    """The job's lock for `requirements` (each already checked): from the cache under `root`
    when this text was resolved before against this platform lock, Python and index; else
    by pip, once. A UserError line when it cannot be resolved or would move a platform pin."""
    platform = platform or platform_lock()
    requirements = list(requirements)
    _moves_a_pin(requirements, platform)
    cache = resolved_root(root) / f"{_cache_key(requirements, platform)}.lock"
    try:
        return JobLock(cache.read_text(), tuple(requirements))
    except FileNotFoundError:
        pass
    text = _resolve_with_pip(requirements, platform)
    cache.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write_atomic(cache, text)
    return JobLock(text, tuple(requirements))


def _resolve_with_pip(requirements: list[str], platform: PlatformLock) -> str:
    with tempfile.TemporaryDirectory(prefix="alchemist-resolve-") as tmp:
        constraints, report = Path(tmp) / "platform.txt", Path(tmp) / "report.json"
        constraints.write_text(platform.constraints())
        # Without --ignore-installed: what this Python has at the platform's pins satisfies
        # the resolver, and the report lists only what the job adds.
        argv = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--report",
            str(report),
            "--disable-pip-version-check",
            "--no-input",
            "--no-color",
            "-c",
            str(constraints),
            *requirements,
        ]
        p = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise UserError(_pip_failure(requirements, p.stdout + p.stderr, platform))
        installs = json.loads(report.read_text()).get("install", [])
    return lock_text(requirements, platform, installs)


def lock_text(requirements: list[str], platform: PlatformLock, installs: list[dict]) -> str:
    """The hash-pinned lock from pip's report: each package pip would add, with the sha256 of
    the file it chose, plus the platform packages those need that the runtime image lacks
    (their blocks, every hash, from the platform's lock), sorted by name."""
    blocks: dict[str, str] = {}
    for item in installs:
        meta, info = item["metadata"], item.get("download_info") or {}
        digest = ((info.get("archive_info") or {}).get("hashes") or {}).get("sha256")
        if digest is None and str(info.get("url", "")).startswith("file://"):
            digest = hashlib.sha256(Path(info["url"][7:]).read_bytes()).hexdigest()
        if digest is None:
            raise UserError(
                f"requirements: {meta['name']} {meta['version']} comes without a "
                "sha256 from the index; accepted: a package from an index or "
                "find-links directory"
            )
        blocks[canonical(meta["name"])] = (
            f"{canonical(meta['name'])}=={meta['version']} \\\n    --hash=sha256:{digest}\n"
        )
    for key in _beyond_runtime(installs, platform):
        blocks.setdefault(key, platform.pins[key].block)
    head = (
        f"# The job's own packages, resolved by pip for {', '.join(requirements)}\n"
        f"# against the platform's lock sha256:{platform.sha256[:SHORT]} on "
        f"{sys.implementation.name} {sys.version_info[0]}.{sys.version_info[1]} "
        f"{sys.platform} {os.uname().machine}; install with\n"
        "#   pip install --no-deps --require-hashes --target DIR -r requirements.lock\n"
    )
    return head + "".join(blocks[k] for k in sorted(blocks))


def _beyond_runtime(installs: list[dict], platform: PlatformLock) -> list[str]:
    """Platform packages the job's packages need, directly or through each other, that are
    pinned outside the runtime section: this Python has them, a training image does not."""
    from importlib import metadata  # start-up: only a job with requirements

    from packaging.requirements import Requirement  # start-up: only a job with requirements

    env = {"extra": ""}
    todo = [r for item in installs for r in item["metadata"].get("requires_dist") or []]
    seen: set[str] = {canonical(i["metadata"]["name"]) for i in installs}
    out: list[str] = []
    while todo:
        req = Requirement(todo.pop())
        key = canonical(req.name)
        if key in seen or (req.marker is not None and not req.marker.evaluate(env)):
            continue
        seen.add(key)
        pin = platform.pins.get(key)
        if pin is None or RUNTIME in pin.sections:
            continue
        out.append(key)
        try:
            todo += metadata.distribution(pin.name).requires or []
        except metadata.PackageNotFoundError:
            pass
    return out


_SECRET_URL = re.compile(r"(//)[^/@\s]+@")


def _pip_failure(requirements: list[str], output: str, platform: PlatformLock) -> str:
    """pip's refusal as one line: what needs what, and which platform pin stands in the way
    (pip says the cause on stdout, the verdict on stderr)."""
    text = _SECRET_URL.sub(r"\1***@", output)
    lines = [ln.strip() for ln in text.splitlines()]
    if "The conflict is caused by:" in lines:
        cause = lines[lines.index("The conflict is caused by:") + 1 :]
        cause = cause[: cause.index("")] if "" in cause else cause
        pins = [ln.rsplit(" ", 1)[-1] for ln in cause if "(constraint)" in ln]
        needs = [ln.removeprefix("The user requested ") for ln in cause if "(constraint)" not in ln]
        what = "; ".join(needs) or ", ".join(requirements)
        if pins:
            return (
                f"requirements: {what[:300]}: would move the platform's pin "
                f"{', '.join(pins)} (requirements.lock); accepted: versions that keep the "
                "platform's pins"
            )
        return (
            f"requirements: {what[:300]}: conflicting versions; accepted: requirements "
            "that agree with each other"
        )
    errors = [ln.removeprefix("ERROR: ") for ln in lines if ln.startswith("ERROR: ")]
    said = errors[0] if errors else (lines[-1] if lines else "pip failed")
    return (
        f"requirements: {', '.join(requirements)[:200]}: cannot be resolved: {said[:300]}; "
        "accepted: packages the index offers (PIP_INDEX_URL, PIP_FIND_LINKS)"
    )


# --- the environment ------------------------------------------------------------------------


def site_dir(lock: JobLock, root: Path) -> Path:
    """Where the lock's packages are, once built: the workers' ALCHEMIST_JOB_SITE."""
    return envs_root(root) / lock.short / "site"


def ensure_site(lock: JobLock, root: Path, max_bytes: int | None = None) -> tuple[Path, bool]:
    """The lock's environment under `root`, built if it is not there yet: (site dir, built
    now). Concurrent callers with one lock build it once; a failed build leaves nothing."""
    envs = envs_root(root)
    env = envs / lock.short
    if env.is_dir():
        os.utime(env)  # last used: what pruning goes by
        return env / "site", False
    envs.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(envs / f".{lock.short}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if env.is_dir():  # another run built it while this one waited
            return env / "site", False
        tmp = envs / f".build-{lock.short}-{secrets.token_hex(4)}"
        try:
            tmp.mkdir(mode=0o700)
            (tmp / RUN_LOCK).write_text(lock.text)
            argv = [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--require-hashes",
                "--disable-pip-version-check",
                "--no-input",
                "--no-color",
                "-q",
                "--target",
                str(tmp / "site"),
                "-r",
                str(tmp / RUN_LOCK),
            ]
            p = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if p.returncode != 0:
                said = [
                    ln.removeprefix("ERROR: ")
                    for ln in _SECRET_URL.sub(r"\1***@", p.stderr).splitlines()
                    if ln.startswith("ERROR: ")
                ]
                raise UserError(
                    f"requirements: installing lock {lock.short} failed: "
                    f"{(said[0] if said else 'pip exited ' + str(p.returncode))[:300]}"
                    "; accepted: a lock whose files the index still offers"
                )
            os.rename(tmp, env)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    prune(root, max_bytes if max_bytes is not None else cache_limit(), keep={lock.short})
    return env / "site", True


def activate(environ: dict[str, str] | None = None) -> Path | None:
    """In a worker: the job's packages after the platform's (site.addsitedir appends, and
    runs the directory's .pth files as site-packages would)."""
    path = E.JOB_SITE.get(environ)
    if path is not None:
        site.addsitedir(str(path))
    return path


def record(run_dir: Path, lock: JobLock) -> None:
    """The run directory keeps the lock it ran with: `pip install -r` repeats the software."""
    path = Path(run_dir) / RUN_LOCK
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(lock.text)


def recorded(run_dir: Path | str | None) -> dict | None:
    """The lock a run recorded, as `status --json` shows it; None for a run without one."""
    if run_dir is None:
        return None
    try:
        return JobLock(Path(run_dir, RUN_LOCK).read_text()).as_json()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None


# --- the cache ------------------------------------------------------------------------------


def cache_limit() -> int:
    gib = E.DEPS_CACHE_GIB.get(default=DEFAULT_CACHE_GIB)
    return int(gib * 2**30)


@dataclass(frozen=True)
class CachedEnv:
    short: str
    path: Path
    size: int
    last_used: float
    packages: list[str]


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def cached(root: Path) -> list[CachedEnv]:
    """The environments under `root`, most recently used first."""
    envs = envs_root(root)
    out = []
    for env in envs.iterdir() if envs.is_dir() else []:
        if env.name.startswith(".") or not env.is_dir():
            continue
        try:
            packages = JobLock((env / RUN_LOCK).read_text()).packages()
        except OSError:
            packages = []
        out.append(CachedEnv(env.name, env, _size(env), env.stat().st_mtime, packages))
    return sorted(out, key=lambda e: -e.last_used)


def remove(env: CachedEnv) -> None:
    """Out of the way first (a rename), then deleted: a run never sees half of one."""
    gone = env.path.with_name(f".gone-{env.short}-{secrets.token_hex(4)}")
    os.rename(env.path, gone)
    shutil.rmtree(gone, ignore_errors=True)


def prune(
    root: Path, max_bytes: int, keep: AbstractSet[str] = frozenset(), older_than_s: float | None = None
) -> list[CachedEnv]:
    """Remove the least recently used environments until the rest fit `max_bytes` (and any
    unused for `older_than_s`); those in `keep` stay. Returns what was removed."""
    envs = cached(root)
    total, removed = sum(e.size for e in envs), []
    for env in reversed(envs):  # least recently used first
        stale = older_than_s is not None and time.time() - env.last_used > older_than_s
        if env.short in keep or not (total > max_bytes or stale):
            continue
        remove(env)
        total -= env.size
        removed.append(env)
    return removed


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# --- a pod's init container -----------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """`python -m alchemist_jobs.job_env install --lock FILE --root DIR`: a cluster pod's
    init container builds the lock's environment on the shared file system, once per lock."""
    p = argparse.ArgumentParser(prog="job_env", description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["install"])
    p.add_argument("--lock", type=Path, required=True)
    p.add_argument("--root", type=Path, required=True)
    args = p.parse_args(argv)
    lock = JobLock(args.lock.read_text())
    try:
        path, built = ensure_site(lock, args.root)
    except UserError as e:
        raise SystemExit(f"job_env: {e}") from None
    print(f"job_env: {lock.short} {'installed into' if built else 'already in'} {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
