"""secret_env on the local stack: read at launch from a file or the launching environment,
passed to the workers, and never written anywhere: not in --dry-run, not in any file of
the run directory (spec.yaml, logs, state, checkpoints). Run files are private."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

from tests.another_user import as_other, shared_dir  # noqa: F401
from tests.conftest import cli

FROM_FILE, FROM_ENV = "s3cr3t-from-file-7f3a", "s3cr3t-from-env-91bc"

# The worker compares digests, so the values appear nowhere in the code it runs from.
SCRIPT = f"""
import hashlib, os, sys
h = lambda v: hashlib.sha256((v or "").encode()).hexdigest()
ok = h(os.environ.get("API_TOKEN")) == {hashlib.sha256(FROM_FILE.encode()).hexdigest()!r} \\
    and h(os.environ.get("DB_PASS")) == {hashlib.sha256(FROM_ENV.encode()).hexdigest()!r}
print("secrets reached the worker" if ok else "secrets missing", flush=True)
sys.exit(0 if ok else 3)
"""


def test_secret_env_reaches_workers_and_no_file_holds_it(home: Path, tmp_path: Path):
    (tmp_path / "token").write_text(FROM_FILE + "\n")
    (tmp_path / "token").chmod(0o600)  # as ssh asks of a key: a secret only its owner reads
    (tmp_path / "check.py").write_text(SCRIPT)
    (tmp_path / "job.yaml").write_text(
        "name: secrets\ntask: {script: check.py}\nprocs_per_node: 2\nmax_restarts: 0\n"
        f"secret_env:\n  API_TOKEN: {{file: {tmp_path / 'token'}}}\n"
        "  DB_PASS: {from_env: LAUNCHER_DB_PASS}\n")
    dry = cli("run", str(tmp_path / "job.yaml"), "--dry-run", home=home,
              env_extra={"LAUNCHER_DB_PASS": FROM_ENV})
    assert dry.returncode == 0, dry.stderr
    assert FROM_FILE not in dry.stdout + dry.stderr and FROM_ENV not in dry.stdout + dry.stderr
    assert "API_TOKEN" in dry.stdout  # the reference is shown, the value is not
    r = cli("run", str(tmp_path / "job.yaml"), home=home,
            env_extra={"LAUNCHER_DB_PASS": FROM_ENV})
    assert r.returncode == 0, r.stdout + r.stderr
    assert FROM_FILE not in r.stdout + r.stderr and FROM_ENV not in r.stdout + r.stderr
    run_dir = next((home / "runs").iterdir())
    assert "secrets reached the worker" in (run_dir / "logs" / "rank-1.log").read_text()
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert files
    for p in files:
        data = p.read_bytes()
        assert FROM_FILE.encode() not in data and FROM_ENV.encode() not in data, p
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    for p in [home, home / "runs", run_dir, *[d for d in run_dir.rglob("*") if d.is_dir()]]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p


def test_a_missing_secret_is_one_line_and_starts_nothing(home: Path, tmp_path: Path):
    (tmp_path / "check.py").write_text(SCRIPT)
    (tmp_path / "job.yaml").write_text(
        "name: secrets\ntask: {script: check.py}\n"
        "secret_env:\n  DB_PASS: {from_env: LAUNCHER_DB_PASS_UNSET}\n")
    r = cli("run", str(tmp_path / "job.yaml"), home=home)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "secret_env.DB_PASS" in r.stderr, r.stderr
    assert "LAUNCHER_DB_PASS_UNSET" in r.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    (tmp_path / "job.yaml").write_text(
        "name: secrets\ntask: {script: check.py}\n"
        "secret_env:\n  DB_PASS: {secret: db, key: password}\n")
    r = cli("run", str(tmp_path / "job.yaml"), home=home)
    assert r.returncode == 2 and "secret_env.DB_PASS" in r.stderr and "from_env" in r.stderr, \
        r.stderr


def test_a_script_runs_from_its_own_copy_of_the_code(home: Path, tmp_path: Path):
    """The run's code/ holds the spec directory as it was at launch (minus secret files):
    editing the source tree afterwards changes nothing in the run."""
    (tmp_path / "token").write_text(FROM_FILE)
    (tmp_path / "token").chmod(0o600)
    (tmp_path / "helper.py").write_text("VALUE = 'at launch'\n")
    (tmp_path / "main.py").write_text(
        "import os, helper\nprint('helper says', helper.VALUE, 'in', os.getcwd(), flush=True)\n")
    (tmp_path / "job.yaml").write_text(
        "name: snap\ntask: {script: main.py}\n"
        f"secret_env:\n  API_TOKEN: {{file: token}}\n")
    r = cli("run", str(tmp_path / "job.yaml"), home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = next((home / "runs").iterdir())
    code = run_dir / "code"
    assert sorted(p.name for p in code.iterdir()) == ["helper.py", "job.yaml", "main.py"]
    log = (run_dir / "logs" / "rank-0.log").read_text()
    assert f"helper says at launch in {code}" in log, log
    (tmp_path / "helper.py").write_text("VALUE = 'edited'\n")
    assert "at launch" in (code / "helper.py").read_text()


def test_a_secret_file_every_account_can_read_is_refused(home: Path, shared_dir: Path):
    """Finding 8: a world-readable secret_env file, read by another account (the attack), is
    refused as ssh refuses an unprotected private key: one line naming the file and its mode,
    exit 2, nothing started; owner-only (0600) runs, group-readable (0640) warns."""
    token = shared_dir / "token"
    token.write_text(FROM_FILE)
    token.chmod(0o644)
    stolen = as_other(["cat", str(token)])
    assert stolen.returncode == 0 and stolen.stdout == FROM_FILE  # the exposure is real
    (shared_dir / "job.yaml").write_text(
        "name: secrets\ntask: {builtin: digits}\nsecret_env:\n  API_TOKEN: {file: token}\n")
    r = cli("run", str(shared_dir / "job.yaml"), "--dry-run", home=home)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "secret_env.API_TOKEN" in r.stderr and str(token) in r.stderr and "0644" in r.stderr
    assert FROM_FILE not in r.stdout + r.stderr
    r = cli("run", str(shared_dir / "job.yaml"), "--set", "hyper.steps=1", home=home)
    assert r.returncode == 2, r.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    token.chmod(0o640)
    r = cli("run", str(shared_dir / "job.yaml"), "--dry-run", home=home)
    assert r.returncode == 0 and "warning: secret_env.API_TOKEN" in r.stderr and "0640" in r.stderr
    assert as_other(["cat", str(token)]).returncode != 0
    token.chmod(0o600)
    r = cli("run", str(shared_dir / "job.yaml"), "--dry-run", home=home)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
