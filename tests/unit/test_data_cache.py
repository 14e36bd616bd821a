"""The node dataset cache: one fill per key, whole entries only, LRU eviction that spares entries in use."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from alchemist_jobs.data.cache import DataError, NodeCache, parse_size


def key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def writer(nbytes: int, name: str = "blob"):
    def fill(dest: Path) -> None:
        (dest / name).write_bytes(b"x" * nbytes)

    return fill


def test_fill_once_then_hit(tmp_path):
    cache = NodeCache(tmp_path)
    calls = []

    def fill(dest: Path) -> None:
        calls.append(dest)
        (dest / "a" / "b").mkdir(parents=True)
        (dest / "a" / "b" / "f.txt").write_text("hello")

    first = cache.acquire(key("d"), fill)
    second = cache.acquire(key("d"), fill)
    assert first.filled and not second.filled
    assert len(calls) == 1
    assert first.path == second.path
    assert (second.path / "a" / "b" / "f.txt").read_text() == "hello"
    assert cache.entries()[0][:2] == (key("d"), 5)


def test_failed_fill_leaves_nothing_and_the_next_caller_retries(tmp_path):
    cache = NodeCache(tmp_path)

    def broken(dest: Path) -> None:
        (dest / "half").write_bytes(b"partial")
        raise DataError("object truncated")

    with pytest.raises(DataError, match="truncated"):
        cache.acquire(key("d"), broken)
    assert list((tmp_path / "entries").iterdir()) == []
    assert list((tmp_path / "tmp").iterdir()) == []
    assert cache.acquire(key("d"), writer(3)).filled


def test_abandoned_fill_of_a_killed_process_is_removed(tmp_path):
    cache = NodeCache(tmp_path)
    stale = tmp_path / "tmp" / f"{key('d')}.99999.dead"
    (stale / "data").mkdir(parents=True)
    (stale / "data" / "blob").write_bytes(b"half")
    entry = cache.acquire(key("d"), writer(4))
    assert entry.filled and not stale.exists()


def test_lru_eviction_by_size_limit(tmp_path):
    cache = NodeCache(tmp_path, limit_bytes=250)
    for name in ("a", "b"):
        cache.acquire(key(name), writer(100)).release()
    # touch `a`: `b` is now the least recently used
    os.utime(tmp_path / "entries" / key("a") / "entry.json", (1, 1))
    os.utime(tmp_path / "entries" / key("b") / "entry.json", (0, 0))
    cache.acquire(key("a"), writer(100)).release()  # a hit makes `a` the most recent
    cache.acquire(key("c"), writer(100), size_hint=100).release()
    left = {k for k, _, _ in cache.entries()}
    assert left == {key("a"), key("c")}


def test_a_dataset_larger_than_the_cache_is_one_clear_error(tmp_path):
    cache = NodeCache(tmp_path, limit_bytes=10)
    with pytest.raises(DataError, match="exceeds the node cache limit of 10 bytes"):
        cache.acquire(key("big"), writer(100), size_hint=100)


@pytest.mark.parametrize(
    "text,expected", [("100", 100), ("2Ki", 2048), ("3G", 3 * 10**9), ("50Gi", 50 * 2**30)]
)
def test_parse_size(text, expected):
    assert parse_size(text, "X") == expected


def test_parse_size_rejects_junk():
    with pytest.raises(DataError, match="X: '12 parsecs' is not a size"):
        parse_size("12 parsecs", "X")


@pytest.mark.parametrize(
    "mode,env_cache,where",
    [
        ("node", None, "home/cache/datasets"),
        ("node", "nodecache", "nodecache"),
        ("shared", "nodecache", "home/cache/datasets"),
        ("none", "nodecache", "run/data"),
    ],
)
def test_cache_modes_put_the_staged_copy_where_documented(tmp_path, monkeypatch, mode, env_cache, where):
    from alchemist_jobs.data.stage import stage
    from alchemist_jobs.spec import parse_spec

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.npz").write_bytes(b"abc")
    if env_cache:
        monkeypatch.setenv("ALCHEMIST_DATA_CACHE", str(tmp_path / env_cache))
    else:
        monkeypatch.delenv("ALCHEMIST_DATA_CACHE", raising=False)
    monkeypatch.delenv("ALCHEMIST_DATA_CACHE_LIMIT", raising=False)
    spec = parse_spec(
        {"name": "j", "task": {"builtin": "digits"}, "data": {"source": str(src), "cache": mode}}, "t"
    )
    entry = stage(spec, tmp_path / "home", tmp_path / "run")
    assert entry.path.is_relative_to(tmp_path / where)
    assert (entry.path / "train.npz").read_bytes() == b"abc"
