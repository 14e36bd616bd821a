"""The node dataset cache across processes: an entry another process holds is never evicted,
and concurrent processes fill a key once."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from alchemist_jobs.data.cache import NodeCache
from tests.unit.test_data_cache import key, writer


def test_an_entry_in_use_is_never_evicted(tmp_path):
    cache = NodeCache(tmp_path, limit_bytes=150)
    held = cache.acquire(key("a"), writer(100))  # a job is reading `a`
    # another process on the node wants room for `b`
    code = textwrap.dedent(f"""
        from pathlib import Path
        from alchemist_jobs.data.cache import NodeCache
        c = NodeCache(Path({str(tmp_path)!r}), limit_bytes=150)
        print(c.make_room(100))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert (held.path / "blob").exists()
    held.release()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"[{key('a')!r}]"
    assert not held.path.exists()


def _fill_in_child(root: str, k: str, log: str) -> None:
    def fill(dest: Path) -> None:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        (dest / "blob").write_bytes(os.urandom(1 << 20))

    entry = NodeCache(Path(root)).acquire(k, fill)
    assert (entry.path / "blob").stat().st_size == 1 << 20


def test_concurrent_processes_fill_once(tmp_path):
    log = tmp_path / "fills.log"
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_fill_in_child, args=(str(tmp_path / "c"), key("d"), str(log))) for _ in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert len(log.read_text().split()) == 1
