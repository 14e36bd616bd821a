"""Rank 0's TensorBoard event writer, in a fresh interpreter, leaves TensorFlow unimported and
still writes events TensorBoard reads."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_rank_0s_event_writer_leaves_tensorflow_unimported(tmp_path: Path):
    """torch's SummaryWriter imported TensorFlow whenever it was installed: 9 s of rank 0's
    start on a loaded machine, during which its peers' first collective waited. The events
    must still be written and readable by TensorBoard."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed here: nothing to keep unimported")
    code = (
        "import sys\n"
        "from types import SimpleNamespace as N\n"
        "from alchemist_jobs.runtime.trainer import Trainer\n"
        f"w = Trainer._tensorboard(N(run=N(tensorboard={str(tmp_path)!r})))\n"
        "w.add_scalar('train/loss', 0.5, 3); w.close()\n"
        "print('tensorflow' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    assert out.strip().splitlines()[-1] == "False", out
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(3, 0.5)]
