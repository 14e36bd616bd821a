"""The node's dataset cache shared by two accounts (issue 37, item 3): another account (uid
nobody) that holds a lock the victim's staging needs never makes it wait without limit. The
victim waits a bounded time, saying for whom, then stops with one line naming the lock file,
its holder (uid and pid) and what to do. A cache folder other accounts may change, but that
is not sticky, is refused in one line before anything is staged."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from alchemist_jobs.data.cache import FOREIGN_LOCK_WAIT_S, DataError, NodeCache
from alchemist_jobs.data.stage import stage
from tests import another_user
from tests.another_user import shared_dir  # noqa: F401
from tests.conftest import REPO
from tests.integration.test_data_two_users import node_spec, write_dataset

pytestmark = pytest.mark.timeout(240)

# As uid nobody: make the cache's folders as a first user would (sticky, world-writable), then
# hold the lock file `sys.argv[2]` under <cache>/locks until told to stop.
HOLD = textwrap.dedent("""
    import fcntl, os, sys
    locks = os.path.join(sys.argv[1], "locks")
    for sub in ("entries", "tmp", "locks", "index"):
        try:
            os.mkdir(os.path.join(sys.argv[1], sub)); os.chmod(os.path.join(sys.argv[1], sub), 0o1777)
        except FileExistsError:
            pass
    fd = os.open(os.path.join(locks, sys.argv[2]), os.O_RDONLY | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    sys.stdin.read()
""")

STAGE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from alchemist_jobs.data.cache import DataError
    from alchemist_jobs.data.stage import stage
    from alchemist_jobs.spec import parse_spec
    spec = parse_spec({"name": "ds", "task": {"builtin": "digits"},
                       "data": {"source": sys.argv[1], "cache": "node"}}, "victim")
    t0 = time.monotonic()
    try:
        entry = stage(spec, Path("/nonexistent"))
    except DataError as e:
        print(f"{time.monotonic() - t0:.1f}")
        print(e)
        sys.exit(3)
    print("staged", entry.path)
""")


@pytest.fixture
def shared_cache(shared_dir: Path) -> Path:
    """A node cache both accounts use, as documented: a sticky, world-writable folder."""
    if why := another_user.unavailable():
        pytest.skip(why)
    cache = shared_dir / "cache"
    cache.mkdir()
    cache.chmod(0o1777)
    return cache


def _victims_key(source: Path, tmp_path: Path, monkeypatch) -> str:
    """The key the victim's staging of `source` locks (learnt by staging it once elsewhere:
    the key names the user and the content, not the cache)."""
    monkeypatch.setenv("ALCHEMIST_DATA_CACHE", str(tmp_path / "elsewhere"))
    entry = stage(node_spec(source), Path("/nonexistent"))
    entry.release()
    return entry.path.parent.name


def test_a_fill_lock_another_account_holds_is_a_bounded_wait_and_one_line(
        shared_cache, shared_dir, tmp_path, monkeypatch):
    source = shared_dir / "mine"
    write_dataset(source, b"G")
    key = _victims_key(source, tmp_path, monkeypatch)
    holder = subprocess.Popen([*another_user.prefix(), sys.executable, "-c", HOLD,
                               str(shared_cache), f"{key}.fill"], cwd="/", text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        victim = subprocess.run([sys.executable, "-c", STAGE, str(source)], cwd=REPO,
                                env=dict(os.environ, PYTHONPATH=str(REPO),
                                         ALCHEMIST_DATA_CACHE=str(shared_cache)),
                                capture_output=True, text=True, timeout=FOREIGN_LOCK_WAIT_S + 90)
        took = time.monotonic() - t0
    finally:
        holder.communicate("", timeout=30)
    assert victim.returncode == 3, victim.stdout + victim.stderr
    waited, line = victim.stdout.strip().splitlines()
    assert FOREIGN_LOCK_WAIT_S <= float(waited) < FOREIGN_LOCK_WAIT_S + 30 and took < 120
    lock = shared_cache / "locks" / f"{key}.fill"
    assert str(lock) in line and f"uid {another_user.NOBODY}" in line, line
    assert f"pid {holder.pid}" in line or "pid " in line, line
    assert "accepted:" in line, line
    # While it waited it said for whom, on stderr, and no traceback anywhere.
    assert f"uid {another_user.NOBODY}" in victim.stderr and "Traceback" not in victim.stderr
    # Nothing half-made is left: no entry, no fill folder of the victim's.
    assert not (shared_cache / "entries" / key).exists()
    assert not list((shared_cache / "tmp").glob(f"{key}.*"))


def test_the_eviction_lock_another_account_holds_does_not_stop_staging(
        shared_cache, shared_dir, monkeypatch):
    """Eviction is per account in a shared cache (an account may only evict its own entries
    there), so another account holding its eviction lock leaves the victim's fill alone."""
    source = shared_dir / "mine"
    write_dataset(source, b"G")
    holder = subprocess.Popen([*another_user.prefix(), sys.executable, "-c", HOLD,
                               str(shared_cache), "cache.evict"], cwd="/", text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    try:
        assert holder.stdout.readline().strip() == "held"
        victim = subprocess.run([sys.executable, "-c", STAGE, str(source)], cwd=REPO,
                                env=dict(os.environ, PYTHONPATH=str(REPO),
                                         ALCHEMIST_DATA_CACHE=str(shared_cache),
                                         ALCHEMIST_DATA_CACHE_LIMIT="1Mi"),
                                capture_output=True, text=True, timeout=FOREIGN_LOCK_WAIT_S + 90)
    finally:
        holder.communicate("", timeout=30)
    assert victim.returncode == 0 and "staged" in victim.stdout, victim.stdout + victim.stderr


# Take the lock, leave it to a child that outlives us, and exit: the lock's holder is gone.
LEAVE_BEHIND = textwrap.dedent("""
    import fcntl, os, subprocess, sys
    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             pass_fds=[fd], stdin=open(sys.argv[2]), start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(child.pid, flush=True)
""")


def test_a_lock_left_to_the_child_of_an_exited_process_is_a_bounded_wait(tmp_path):
    cache = NodeCache(tmp_path / "cache")
    key = "ab" * 32
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    keep = os.open(fifo, os.O_RDWR)  # the child reads until this closes
    try:
        left = subprocess.run([sys.executable, "-c", LEAVE_BEHIND,
                               str(cache.root / "locks" / f"{key}.fill"), str(fifo)],
                              capture_output=True, text=True, timeout=60)
        assert left.returncode == 0, left.stderr
        t0 = time.monotonic()
        with pytest.raises(DataError) as e:
            cache.acquire(key, lambda dest: None)
        waited = time.monotonic() - t0
    finally:
        os.close(keep)
    line = str(e.value)
    assert FOREIGN_LOCK_WAIT_S <= waited < FOREIGN_LOCK_WAIT_S + 30
    assert "has exited" in line and str(cache.root / "locks" / f"{key}.fill") in line, line
    assert len(line.splitlines()) == 1 and "accepted:" in line


PLANT = textwrap.dedent("""
    import os, sys
    locks = os.path.join(sys.argv[1], "locks")
    os.mkdir(locks); os.chmod(locks, 0o1777)
    target = os.path.join(locks, sys.argv[2])
    if sys.argv[3] == "fifo":
        os.mkfifo(target, 0o666)
    else:
        os.symlink("/etc/hostname", target)
""")


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_fifo_or_link_planted_as_the_victims_lock_file_is_one_line(
        shared_cache, tmp_path, kind):
    """A FIFO under the lock's name would block its open forever; a link would lead the open
    elsewhere. Either is refused in one line, as uid nobody planted it."""
    key = "cd" * 32
    planted = another_user.run_python(PLANT, str(shared_cache), f"{key}.fill", kind)
    assert planted.returncode == 0, planted.stderr
    victim = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from alchemist_jobs.data.cache import DataError, NodeCache
        try:
            NodeCache({str(shared_cache)!r}).acquire({key!r}, lambda dest: None)
        except DataError as e:
            print(e)
            sys.exit(3)
    """)], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
        timeout=60)
    assert victim.returncode == 3, victim.stdout + victim.stderr
    line = victim.stdout.strip()
    assert len(line.splitlines()) == 1 and f"{key}.fill" in line and "uid 65534" in line, line
    assert "accepted:" in line


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_cache_folder_others_may_change_without_the_sticky_bit_is_refused(tmp_path, mode):
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(mode)
    with pytest.raises(DataError) as e:
        NodeCache(root)
    line = str(e.value)
    assert len(line.splitlines()) == 1 and str(root) in line and f"{mode:04o}" in line
    assert "chmod" in line and "accepted" in line
    assert not (root / "entries").exists()


def test_a_cache_the_user_creates_is_private_whatever_the_umask(tmp_path):
    old = os.umask(0o002)
    try:
        cache = NodeCache(tmp_path / "home" / "cache" / "datasets")
    finally:
        os.umask(old)
    for path in (cache.root, *(cache.root / s for s in ("entries", "tmp", "locks", "index"))):
        assert path.stat().st_mode & 0o777 == 0o700, (path, oct(path.stat().st_mode))
