"""Job spec through `alchemist run` (which starts its warm agent interpreter at once): every class
of bad input is one line naming file, field, value and what is accepted, exit code 2, no
traceback, nothing written to disk and no process left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from alchemist_jobs import cli
from alchemist_jobs.errors import UserError
from tests.conftest import cli as run_cli
from tests.unit.test_spec import GOOD, write


def warm_agents_of_this_process() -> list[int]:
    """Live children running alchemist_jobs.warm_agent (the CLI must kill its own)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and stat[0] != "Z" and b"alchemist_jobs.warm_agent" in cmd:
            found.append(int(d.name))
    return found


# (case, spec text or None for GOOD, extra CLI args, substrings the one line must hold)
BAD = [
    ("unknown top-level field", GOOD + "epochz: 3\n", [], ["epochz", "3", "no such field"]),
    (
        "unknown nested field",
        GOOD.replace("epochs: 1", "epochs: 1, lrr: 0.1"),
        [],
        ["hyper.lrr", "0.1", "no such field"],
    ),
    (
        "wrong type",
        GOOD.replace("batch_size: 16", "batch_size: lots"),
        [],
        ["hyper.batch_size", "'lots'", "integer"],
    ),
    ("out of range", GOOD + "nodes: 0\n", [], ["nodes", "0", ">= 1"]),
    (
        "bad choice",
        GOOD.replace("epochs: 1", "epochs: 1, optimizer: adagrad"),
        [],
        ["hyper.optimizer", "adagrad", "sgd"],
    ),
    ("duplicate key", GOOD + "hyper: {optimizer: adam}\n", [], ["line 5", "'hyper'", "appears twice"]),
    (
        "unknown algorithm",
        GOOD + "algorithm: {name: gossip}\n",
        [],
        ["algorithm", "gossip", "sync, async, bmuf, easgd"],
    ),
    (
        "algorithm parameter out of range",
        GOOD + "algorithm: {name: bmuf, tau: 0}\n",
        [],
        ["algorithm.tau", "0", ">= 1"],
    ),
    (
        "two task kinds",
        GOOD.replace("task: {builtin: digits}", "task: {builtin: digits, script: x.py}"),
        [],
        ["task", "exactly one of builtin"],
    ),
    ("no task", "name: t\n", [], ["task", "(missing)", "required"]),
    (
        "batch larger than the data set",
        GOOD.replace("batch_size: 16", "batch_size: 1000"),
        [],
        ["hyper.batch_size", "1000", "1437", "batch_size <= 718"],
    ),
    (
        "missing script",
        GOOD.replace("task: {builtin: digits}", "task: {script: nope.py}"),
        [],
        ["task.script", "nope.py", "not found"],
    ),
    ("bad name", GOOD.replace("name: t", "name: My_Job"), [], ["name", "My_Job", "matching"]),
    ("not YAML", "name: [unclosed\n", [], ["line", "YAML"]),
    ("not a mapping", "- a\n- b\n", [], ["mapping"]),
    ("bad env key", GOOD + "env: {'1BAD': x}\n", [], ["1BAD", "environment variable"]),
    ("bad --set path", None, ["--set", "hyper.nope=3"], ["hyper.nope", "no such field"]),
    ("bad --set form", None, ["--set", "hyper.lr"], ["--set", "KEY.PATH=VALUE"]),
    ("bad --set value", None, ["--set", "hyper.lr=-1"], ["hyper.lr", "-1", "> 0"]),
    ("infinite cpu", None, ["--set", "resources.cpu=1e309"], ["resources.cpu", "1e309", "finite"]),
    (
        "bad stall limit",
        None,
        ["--set", "checkpoint.stall_timeout_s=soon"],
        ["checkpoint.stall_timeout_s", "'soon'", "'auto' or null"],
    ),
    (
        "negative stall limit",
        None,
        ["--set", "checkpoint.stall_timeout_s=-5"],
        ["checkpoint.stall_timeout_s", "-5", "> 0"],
    ),
    ("unknown stack", None, ["--stack", "mars"], ["--stack", "mars", "accepted"]),
    ("unknown flag", None, ["--bogus"], ["--bogus"]),
]


@pytest.mark.parametrize("case,text,extra,must", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, text, extra, must, tmp_path, home, capsys):
    spec = write(tmp_path, text if text is not None else GOOD)
    code = cli.main(["run", str(spec), *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    assert "Traceback" not in err
    for s in must:
        assert s in lines[0], f"{s!r} missing from: {lines[0]}"
    if not extra or extra[0] == "--set":
        # the file, named by its last 77 characters where its path is longer (spec.py)
        assert str(spec)[-77:] in lines[0] or extra[:1] == ["--set"], lines[0]
    assert not home.exists() or not any(home.rglob("*")), "bad input left files behind"
    assert warm_agents_of_this_process() == [], "bad input left a process behind"


def test_missing_spec_file(tmp_path, home, capsys):
    assert cli.main(["run", str(tmp_path / "absent.yaml")]) == 2
    err = capsys.readouterr().err
    assert "absent.yaml" in err and "no such job spec file" in err


def test_bad_input_through_the_real_command(tmp_path, home):
    """The installed entry point: exit 2, one line on stderr, no traceback."""
    spec = write(tmp_path, GOOD + "nodes: -1\n")
    r = run_cli("run", str(spec), home=home, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "nodes" in r.stderr and "-1" in r.stderr
    assert "Traceback" not in r.stderr
    assert not home.exists()


def test_debug_shows_the_traceback(tmp_path, home, capsys):
    spec = write(tmp_path, GOOD + "nodes: 0\n")
    with pytest.raises(UserError):
        cli.main(["--debug", "run", str(spec)])
