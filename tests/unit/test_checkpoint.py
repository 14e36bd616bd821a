"""Checkpoints: atomic, pruned to the newest K, never corrupt (a writer SIGKILLed in the middle
of a write: tests/integration/test_checkpoint_kill.py)."""

from __future__ import annotations

import torch

from alchemist_jobs.runtime.checkpoint import Checkpointer


def test_round_trip_and_keep_newest(tmp_path):
    ck = Checkpointer(tmp_path, keep=2)
    for step in (10, 20, 30):
        path, size, secs = ck.save(step, {"step": step, "w": torch.full((4,), float(step))})
        assert path.exists() and size == path.stat().st_size and secs >= 0
    assert [s for s, _ in ck.complete()] == [30, 20]  # step 10 pruned
    step, payload = ck.latest()
    assert step == 30 and torch.equal(payload["w"], torch.full((4,), 30.0))
    assert not list(tmp_path.glob(".*tmp"))


def test_unreadable_newest_falls_back_to_the_previous(tmp_path, capsys):
    ck = Checkpointer(tmp_path, keep=3)
    ck.save(1, {"v": torch.ones(2)})
    ck.save(2, {"v": torch.ones(2) * 2})
    ck.path_for(2).write_bytes(b"damaged")  # e.g. a disk fault after the rename
    step, payload = ck.latest()
    assert step == 1 and torch.equal(payload["v"], torch.ones(2))
    assert "unreadable" in capsys.readouterr().err


def test_prefixes_do_not_mix(tmp_path):
    Checkpointer(tmp_path, prefix="step").save(5, {"a": 1})
    Checkpointer(tmp_path, prefix="server").save(9, {"b": 2})
    assert Checkpointer(tmp_path, prefix="step").latest()[0] == 5
    assert Checkpointer(tmp_path, prefix="server").latest()[0] == 9


def test_flipped_bytes_in_the_newest_fall_back_to_the_previous_with_one_line(tmp_path, capsys):
    """4 KiB flipped inside the newest checkpoint, size unchanged: torch.load may still read
    it (the damage lands in tensor data), so only a checksum can tell."""
    ck = Checkpointer(tmp_path, keep=3)
    ck.save(1, {"w": torch.ones(50_000)})
    ck.save(2, {"w": torch.full((50_000,), 2.0)})
    path = ck.path_for(2)
    data = bytearray(path.read_bytes())
    size = len(data)
    mid = size // 2
    data[mid : mid + 4096] = bytes(b ^ 0xFF for b in data[mid : mid + 4096])
    path.write_bytes(bytes(data))
    assert path.stat().st_size == size
    torch.load(path, weights_only=True)  # the damage is invisible to the loader itself
    step, payload = ck.latest()
    assert step == 1 and torch.equal(payload["w"], torch.ones(50_000))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checksum" in err[0] and path.name in err[0]


def test_checksum_files_are_pruned_with_their_checkpoints(tmp_path):
    ck = Checkpointer(tmp_path, keep=1)
    ck.save(1, {"v": torch.ones(2)})
    ck.save(2, {"v": torch.ones(2)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000002.pt", "step-000000002.pt.sha256"]
