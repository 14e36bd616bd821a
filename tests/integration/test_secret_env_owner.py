"""A `secret_env` file another account can plant or change is not a secret of the user's: the
value would be the other account's choice (a token for the attacker's own hub, a password of
their database). Another account (`alc-other`) plants the file the victim's spec names in a
directory both reach, or a link to its own file; the victim's run is refused with one line,
exit 2, nothing started, and the planted value appears nowhere."""

from __future__ import annotations

import os
from pathlib import Path

from tests.another_user import as_other, shared_dir  # noqa: F401
from tests.conftest import cli

PLANTED = "attacker-chosen-token-5e1d"
SPEC = "name: secrets\ntask: {builtin: digits}\nsecret_env:\n  HF_TOKEN: {file: token}\n"


def refused(home: Path, spec: Path, *words: str) -> None:
    r = cli("run", str(spec), "--dry-run", home=home)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "secret_env.HF_TOKEN" in r.stderr and all(w in r.stderr for w in words), r.stderr
    assert PLANTED not in r.stdout + r.stderr
    r = cli("run", str(spec), "--set", "hyper.steps=1", home=home)
    assert r.returncode == 2, r.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_a_secret_file_another_account_planted_is_refused(home: Path, shared_dir: Path):
    """The other account writes `token` first, 0600 as a careful user would: owner-only, but
    the owner is not the user who runs."""
    shared_dir.chmod(0o1777)  # a shared scratch directory, as /tmp
    (shared_dir / "job.yaml").write_text(SPEC)
    planted = as_other(["sh", "-c", f"umask 077; printf %s {PLANTED} > {shared_dir}/token"])
    assert planted.returncode == 0, planted.stderr
    refused(home, shared_dir / "job.yaml", str(shared_dir / "token"), "alc-other")


def test_a_link_another_account_planted_is_refused(home: Path, shared_dir: Path):
    """The other account plants `token` as a link to a file of its own, private to it."""
    shared_dir.chmod(0o1777)
    (shared_dir / "job.yaml").write_text(SPEC)
    planted = as_other(["sh", "-c", f"umask 077; mkdir {shared_dir}/mine; printf %s {PLANTED} "
                                    f"> {shared_dir}/mine/t; ln -s mine/t {shared_dir}/token"])
    assert planted.returncode == 0, planted.stderr
    assert (shared_dir / "token").is_symlink()
    refused(home, shared_dir / "job.yaml", "alc-other")


def test_a_secret_file_its_group_may_change_is_refused(home: Path, shared_dir: Path):
    """The user's own file, but group-writable (0660): whoever shares the group sets the value."""
    (shared_dir / "job.yaml").write_text(SPEC)
    token = shared_dir / "token"
    token.write_text("mine\n")
    token.chmod(0o660)
    refused(home, shared_dir / "job.yaml", str(token), "0660")
    token.chmod(0o600)
    r = cli("run", str(shared_dir / "job.yaml"), "--dry-run", home=home)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert os.stat(token).st_uid == os.geteuid()
