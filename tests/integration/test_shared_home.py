"""A home in a directory other accounts can write to (issue 37, item 3): another account
pre-creates `runs/` world-writable, plants a run and links named like the temp files, or
plants the home itself as a link; the victim's `alchemist list`, `status` and `run` refuse in
one line, list nothing planted and write through no link.

The victim is this process's user; the attacker is the account `alc-other`
(tests/another_user.py), acting in a sticky world-writable folder as /tmp is."""

from __future__ import annotations

import os

import pytest

from tests import another_user
from tests.another_user import python_as_other, shared_dir  # noqa: F401  (a fixture)
from alchemist_jobs.rundir import RunDir, runs_root
from tests.conftest import cli

pytestmark = pytest.mark.timeout(300)

PLANT = r"""
import json, os, sys
home, victim = sys.argv[1], sys.argv[2]
runs = os.path.join(home, "runs")
os.mkdir(home, 0o777); os.chmod(home, 0o777)
os.mkdir(runs, 0o777); os.chmod(runs, 0o777)
run = os.path.join(runs, "planted-20260101-000000-0badc0de")
os.mkdir(run, 0o777)
open(os.path.join(run, "spec.yaml"), "w").write("name: planted\n")
json.dump({"run_id": "planted-20260101-000000-0badc0de", "name": "planted",
           "state": "succeeded", "created": 1.0, "ended": 2.0, "message": "planted"},
          open(os.path.join(run, "run.json"), "w"))
# links under every name a listing's temp file could have for the next pids
last = int(open("/proc/sys/kernel/ns_last_pid").read())
for pid in range(last, last + 400):
    for name in (".ended-runs.jsonl", ".ended-runs.json"):
        try:
            os.symlink(victim, os.path.join(runs, f".{name}.{pid}.tmp"))
        except FileExistsError:
            pass
print("planted")
"""


@pytest.fixture
def sticky(shared_dir):  # noqa: F811
    """A folder every account may create entries in (sticky, as /tmp)."""
    d = shared_dir / "shared"
    d.mkdir()
    d.chmod(0o1777)
    return d


def _victim_file(tmp_path):
    f = tmp_path / "victim-0600"
    f.write_text("the victim's own file\n")
    f.chmod(0o600)
    return f


def test_a_runs_folder_another_account_made_is_refused_and_nothing_is_written_through(
        sticky, tmp_path):
    victim = _victim_file(tmp_path)
    home = sticky / "home"
    planted = python_as_other(PLANT, str(home), str(victim))
    assert planted.returncode == 0 and "planted" in planted.stdout, planted.stderr
    for argv in (["list"], ["list", "--json"], ["status", "planted"], ["rm", "--state",
                                                                      "succeeded"]):
        r = cli(*argv, "--home", str(home))
        assert r.returncode == 2, (argv, r.stdout, r.stderr)
        assert "planted" not in r.stdout
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert str(home) in lines[0] and "alc-other" in lines[0] and "accepted" in lines[0]
    assert victim.read_text() == "the victim's own file\n"
    assert not (home / "runs" / ".ended-runs.jsonl").exists()


def test_a_run_refuses_a_runs_folder_another_account_made(sticky, tmp_path):
    """`run` checks the home before anything starts: no run directory goes where another
    account could rename it or redirect its state file."""
    victim = _victim_file(tmp_path)
    home = sticky / "home"
    assert python_as_other(PLANT, str(home), str(victim)).returncode == 0
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    r = cli("run", str(script), "--home", str(home), "--quiet")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "ran" not in r.stdout and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "accepted" in r.stderr
    assert sorted(p.name for p in (home / "runs").iterdir() if not p.name.startswith(".")) == \
        ["planted-20260101-000000-0badc0de"]


def test_a_home_that_is_another_accounts_link_is_not_followed(sticky, tmp_path):
    """The home named in a shared folder is a link another account planted, to a folder it
    controls: refused, never followed."""
    code = ("import os, sys; os.mkdir(sys.argv[2], 0o777); os.chmod(sys.argv[2], 0o777); "
            "os.symlink(sys.argv[2], sys.argv[1])")
    target = sticky / "theirs"
    assert python_as_other(code, str(sticky / "home"), str(target)).returncode == 0
    r = cli("list", "--home", str(sticky / "home"))
    assert r.returncode == 2 and "symlink owned by alc-other" in r.stderr, r.stderr
    assert list(target.iterdir()) == []  # nothing made in their folder


def test_a_home_the_victim_made_in_a_shared_folder_is_its_own(sticky):
    """The same shared folder, with the home made first by its owner: it works, runs/ is
    private, and the other account can neither list, rename nor plant in it."""
    home = sticky / "mine"
    r = cli("list", "--home", str(home))
    assert r.returncode == 0, r.stderr
    script = ("import os, sys; runs = os.path.join(sys.argv[1], 'runs')\n"
              "for act in (lambda: os.listdir(runs), lambda: os.rename(runs, runs + '.x'),\n"
              "            lambda: os.mkdir(os.path.join(runs, 'x-1'))):\n"
              "    try:\n        act(); print('done')\n"
              "    except PermissionError:\n        print('refused')\n")
    RunDir(runs_root(home) / "mine-20260101-000000-00000001").create(exclusive=True)
    out = python_as_other(script, str(home))
    assert out.stdout.split() == ["refused"] * 3, out.stdout + out.stderr


def test_state_files_another_account_owns_are_not_read(tmp_path):
    """A state file in a run directory that is not this account's (root's excepted) reads as
    missing: it cannot speak for the run."""
    from alchemist_jobs.rundir import read_json

    uid, gid = another_user.other_account()
    f = tmp_path / "run.json"
    f.write_text('{"state": "succeeded"}')
    os.chown(f, uid, gid)
    assert read_json(f) is None
    os.chown(f, os.geteuid(), os.getegid())
    assert read_json(f) == {"state": "succeeded"}
