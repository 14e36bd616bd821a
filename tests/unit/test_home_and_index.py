"""A damaged index of ended runs and a home that is no folder, through the real CLI (`list`,
`list --json`, `rm`) and the dashboard's start (issue 37, item 6).

The run directories always win: an index with any entry that fails full validation (a line
cut in half, a missing field, a wrong type, deep nesting, a huge line, a state or a run
directory that lies) is rebuilt from them, the listing is what the directories say, and the
damage does not outlive the listing. A home that is a file, a FIFO, /dev/null or a symlink
loop is one line naming it and exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from alchemist_jobs import cli, run_index
from alchemist_jobs.local_backend import LocalScheduler
from alchemist_jobs.rundir import read_json, runs_root, write_text_atomic
from tests.unit.test_run_listing import N, _run

LAST = f"digits-20260101-000000-{N - 1:08x}"


def _edit_doc(change):
    """Damage: the last run's document, decoded, changed by `change` and encoded again (its
    entry's head left as it was)."""

    def damage(text: str) -> str:
        lines = text.split("\n")
        doc = json.loads(lines[-2])
        change(doc)
        lines[-2] = json.dumps(doc)
        return "\n".join(lines)

    return damage


def _edit_head(i: int, value):
    """Damage: field `i` of the last run's head ([run_id, mtime, created, state])."""

    def damage(text: str) -> str:
        lines = text.split("\n")
        heads = json.loads(lines[1])
        heads[-1][i] = value
        lines[1] = json.dumps(heads)
        return "\n".join(lines)

    return damage


def _deep(n: int):
    doc: object = 1
    for _ in range(n):
        doc = [doc]
    return doc


DAMAGE = {
    "line cut in half": lambda t: t[: len(t) - len(t.split("\n")[-2]) // 2 - 1],
    "last line without newline": lambda t: t[:-1],
    "step missing": _edit_doc(lambda d: d.pop("step")),
    "state missing": _edit_doc(lambda d: d.pop("state")),
    "run_id missing": _edit_doc(lambda d: d.pop("run_id")),
    "step a string": _edit_doc(lambda d: d.update(step="12")),
    "total_steps a list": _edit_doc(lambda d: d.update(total_steps=[40])),
    "created a string": _edit_doc(lambda d: d.update(created="yesterday")),
    "workers null": _edit_doc(lambda d: d.update(workers=None)),
    "progress a string": _edit_doc(lambda d: d.update(progress="fast")),
    "progress.step a string": _edit_doc(lambda d: d["progress"].update(step="x")),
    "result a list": _edit_doc(lambda d: d.update(result=[1, 2])),
    "metrics a list": _edit_doc(lambda d: d.update(metrics=[0.5])),
    "message a number": _edit_doc(lambda d: d.update(message=7)),
    "exit_codes a dict": _edit_doc(lambda d: d.update(exit_codes={"0": 0})),
    "deep nesting (parses)": _edit_doc(lambda d: d["progress"].update(extra=_deep(900))),
    "deep nesting (recursion)": lambda t: t[:-1] + "[" * 100000 + "]" * 100000 + "\n",
    "huge line": _edit_doc(lambda d: d.update(message="x" * (2 << 20))),
    "document state lies": _edit_doc(lambda d: d.update(state="failed")),
    "head state lies": _edit_head(3, "failed"),
    "head state not ended": _edit_head(3, "running"),
    "state unknown": lambda t: _edit_head(3, "exploded")(_edit_doc(lambda d: d.update(state="exploded"))(t)),
    "run_dir lies": _edit_doc(lambda d: d.update(run_dir="/etc")),
    "created lies": _edit_head(2, 1.0),
    "head mtime a string": _edit_head(1, "1"),
    "run_id of another run": _edit_doc(lambda d: d.update(run_id=f"digits-20260101-000000-{0:08x}")),
    "header only": lambda t: t.split("\n")[0] + "\n",
    "binary": lambda t: "\x00\xff" * 100,
}


@pytest.fixture
def indexed(tmp_path):
    """40 ended runs and the index a first listing wrote, with the listing it gave."""
    for i in range(N):
        _run(tmp_path, i)
    want = [r.as_json() for r in LocalScheduler(tmp_path).list()]
    path = runs_root(tmp_path) / run_index.INDEX
    assert len(run_index.load(runs_root(tmp_path))) == N
    return tmp_path, path, want


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_index_gives_what_the_run_directories_say(indexed, case, capsys):
    root, path, want = indexed
    path.write_text(DAMAGE[case](path.read_text()))
    home = ["--home", str(root)]
    assert cli.main(["list", "--json", *home]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(listed, key=lambda d: d["run_id"]) == sorted(want, key=lambda d: d["run_id"])
    # the damage is gone: the index holds the directories' word again
    assert len(run_index.load(runs_root(root))) == N
    assert all(e.state == "succeeded" for e in run_index.load(runs_root(root)).values())
    assert "/etc" not in path.read_text() and "failed" not in path.read_text()
    path.write_text(DAMAGE[case](path.read_text()))
    assert cli.main(["list", "--columns", "run,state,step,loss,accuracy,duration", *home]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == N and {r.split()[1] for r in rows} == {"succeeded"}
    path.write_text(DAMAGE[case](path.read_text()))
    # the dashboard's start reads every local run once (through the index: over 32 runs)
    from alchemist_jobs.ui.backends import Backends

    b = Backends(["local"], home=root)
    b.warm()
    assert {r.run_id: r.state for r in b.runs("local")} == {d["run_id"]: "succeeded" for d in want}
    path.write_text(DAMAGE[case](path.read_text()))
    assert cli.main(["rm", "--state", "failed", *home]) == 0  # the index lies: none has failed
    assert "no run matched" in capsys.readouterr().err
    path.write_text(DAMAGE[case](path.read_text()))
    assert cli.main(["rm", LAST, *home]) == 0
    assert capsys.readouterr().out == f"removed {LAST} (succeeded)\n"
    assert LAST not in {r.run_id for r in LocalScheduler(root).list()}


@pytest.fixture
def special(tmp_path, request):
    kind = request.param
    p = tmp_path / "home"
    if kind == "a file":
        p.write_text("not a folder")
    elif kind == "a FIFO":
        os.mkfifo(p)
    elif kind == "/dev/null":
        return kind, Path("/dev/null")
    elif kind == "a symlink loop":
        p.symlink_to(tmp_path / "loop")
        (tmp_path / "loop").symlink_to(p)
    elif kind == "a dangling symlink":
        p.symlink_to(tmp_path / "nowhere" / "at-all")
        (tmp_path / "nowhere").write_text("a file on the way")
    elif kind == "runs a file":
        p.mkdir()
        (p / "runs").write_text("not a folder")
    return kind, p


SPECIAL = ["a file", "a FIFO", "/dev/null", "a symlink loop", "a dangling symlink", "runs a file"]


@pytest.mark.parametrize("special", SPECIAL, indirect=True)
@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["list", "--json"],
        ["status", "abc"],
        ["rm", "abc"],
        ["rm", "--state", "failed"],
        ["cancel", "abc"],
        ["logs", "abc"],
    ],
)
def test_a_home_that_is_no_folder_is_one_line(special, argv, capsys):
    kind, home = special
    assert cli.main([*argv, "--home", str(home)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert str(home) in err and "accepted" in err and "Traceback" not in err


@pytest.mark.parametrize("special", SPECIAL, indirect=True)
def test_the_dashboard_refuses_a_home_that_is_no_folder_in_one_line(special):
    from alchemist_jobs.errors import UserError
    from alchemist_jobs.ui.backends import Backends

    kind, home = special
    with pytest.raises(UserError) as e:
        Backends(["local"], home=home).warm()
    assert "accepted" in str(e.value) and len(str(e.value).splitlines()) == 1


def test_a_state_file_that_is_a_symlink_is_not_followed(tmp_path):
    """Reading a run's state never follows a link out of its directory."""
    secret = tmp_path / "elsewhere.json"
    secret.write_text('{"state": "succeeded", "planted": true}')
    link = tmp_path / "run.json"
    link.symlink_to(secret)
    assert read_json(link) is None


def test_a_temp_file_name_planted_as_a_symlink_is_never_written_through(tmp_path):
    """The temp file an atomic write starts with is created exclusively, without following
    links: a link planted under the name the writer's pid gives (the old name) must not
    lead the write to the file it points at."""
    victim = tmp_path / "victim-0600"
    victim.write_text("the victim's own file")
    folder = tmp_path / "runs"
    folder.mkdir(mode=0o700)
    (folder / f".{run_index.INDEX}.{os.getpid()}.tmp").symlink_to(victim)
    write_text_atomic(folder / run_index.INDEX, "new index\n")
    assert victim.read_text() == "the victim's own file"
    assert (folder / run_index.INDEX).read_text() == "new index\n"


def test_a_consistent_lie_written_by_the_index_writer_itself_is_not_believed(indexed, capsys):
    """An entry whose head and document agree, written by run_index.save itself with the
    run directory's own mtime, still cannot claim a state run.json does not hold."""
    root, path, want = indexed
    entries = run_index.load(runs_root(root))
    doc = dict(json.loads(entries[LAST].text), state="failed", message="planted")
    entries[LAST] = entries[LAST]._replace(state="failed", text=json.dumps(doc))
    run_index.save(runs_root(root), entries)
    assert cli.main(["list", "--json", "--state", "failed", "--home", str(root)]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert cli.main(["list", "--json", "--home", str(root)]) == 0
    assert "planted" not in capsys.readouterr().out


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o777])
def test_a_runs_folder_others_can_write_is_refused_with_the_fix(tmp_path, capsys, mode):
    """Even the user's own runs/ (made under umask 002, say) is refused while others may
    write to it: they could rename a run away or plant one; the line says how to mend it."""
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(mode)
    assert cli.main(["list", "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"mode {mode:04o}" in err and "chmod 700" in err
    assert f"home {tmp_path}: runs/ is writable by others" in err
    runs.chmod(0o700)
    assert cli.main(["list", "--home", str(tmp_path)]) == 0


@pytest.mark.parametrize("special", SPECIAL, indirect=True)
def test_completion_offers_no_run_of_a_home_the_commands_refuse(special):
    """Shell completion never fails: a home the commands refuse offers no run ids."""
    import argparse

    from alchemist_jobs.commands.jobs import complete_run

    kind, home = special
    assert complete_run("", argparse.Namespace(stack="local", home=home)) == []
