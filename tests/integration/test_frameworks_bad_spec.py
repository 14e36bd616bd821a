"""task.framework through `alchemist run` (which starts its warm agent process at once): a bad
field is one line, exit 2, and nothing written."""

from __future__ import annotations

import pytest

from alchemist_jobs import cli
from tests.unit.test_frameworks import _write

BAD = [
    (
        "unknown framework",
        "name: t\ntask: {script: train.py, framework: pytorch}\n",
        ["task.framework", "pytorch", "one of torch, tensorflow or jax"],
    ),
    (
        "framework of a built-in task",
        "name: t\ntask: {builtin: digits, framework: jax}\n",
        ["task", "framework jax is for script and module tasks"],
    ),
    (
        "another algorithm",
        "name: t\ntask: {script: train.py, framework: tensorflow}\nalgorithm: {name: bmuf}\n",
        ["algorithm.name=bmuf needs torch", "accepted: sync"],
    ),
]


@pytest.mark.parametrize("case,text,must", BAD, ids=[b[0] for b in BAD])
def test_bad_framework_field_is_one_line_exit_2(case, text, must, tmp_path, home, capsys):
    code = cli.main(["run", str(_write(tmp_path, text))])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for s in must:
        assert s in err, (s, err)
    assert not home.exists() or not any(home.rglob("*"))
