"""Code snapshots never ship secrets the file-name list misses: detect-secrets reads what a snapshot
would ship, each file held back is one warning line, and `ship_secrets` releases a file knowingly."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from alchemist_jobs.kubernetes.code_assets import pack
from alchemist_jobs.local_backend import code_of
from alchemist_jobs.spec import parse_spec

# Fake credentials in the formats real ones have (the five files, and one whose name
# says nothing: only its content gives it away).
SECRETS = {
    ".htpasswd": "admin:$apr1$ZjTqBB3f$IF9gdYAGlMrs2fuINjHsz.\n",
    "conf/service-account.json": (
        '{\n  "type": "service_account",\n  "project_id": "demo",\n'
        '  "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n'
        '-----END PRIVATE KEY-----\\n",\n  "client_email": "t@demo.iam.gserviceaccount.com"\n}\n'),
    "conf/token.txt": "ghp_8fK2mQ9xZ1vB7nL3pR5tY6wE4sA0dC2hJ9kU\n",
    "prod.env.bak": ("DATABASE_URL=postgres://app:Wq8vN2xL9pZr4Tk1@db.internal:5432/prod\n"
                     "STRIPE_KEY=sk_live_51H8xYzAbCdEfGhIjKlMnOpQr\n"),
    "terraform.tfvars": 'region = "us-west-2"\ndb_password = "Wq8vN2xL9pZr4Tk1mB7c"\n',
    "lib/settings_local.py": 'AWS_ACCESS_KEY_ID = "AKIAZ7Q3XK5LMN2P4R6T"\n',
}
CODE = {
    "train.py": "import lib.model\nprint('train')\n",
    "lib/model.py": "HIDDEN = 64\n",
    "README.md": "Set the password in secret_env, never here.\n",
}


def project(root: Path) -> Path:
    for rel, text in {**SECRETS, **CODE}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def spec(**extra):
    return parse_spec({"name": "s", "task": {"module": "train"}, **extra}, "job.yaml")


def shipped_in(tarball: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_a_cluster_snapshot_ships_none_of_them_and_names_each(tmp_path, capsys):
    """Finding 6 (cluster stacks): the ConfigMap's tarball."""
    snap = pack(project(tmp_path / "p"))
    assert sorted(shipped_in(snap.tarball)) == sorted(CODE)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == len(SECRETS)
    for rel in SECRETS:
        line = next(x for x in err if f" {rel} is not shipped" in x)
        assert "ship_secrets" in line
    for text in SECRETS.values():  # a warning names a file, never what it holds
        assert text.strip().splitlines()[-1][-12:] not in "\n".join(err)


def test_a_local_runs_copy_ships_none_of_them(tmp_path, capsys):
    """Finding 6 (local stack): the files copied to the run's own code/."""
    root = project(tmp_path / "p")
    _, files = code_of(spec(), root, tmp_path / "home")
    assert sorted(files) == sorted(CODE)
    assert len(capsys.readouterr().err.strip().splitlines()) == len(SECRETS)


def test_ship_secrets_releases_a_file_knowingly(tmp_path, capsys):
    root = project(tmp_path / "p")
    _, files = code_of(spec(ship_secrets=["conf/token.txt", ".htpasswd"]), root, tmp_path / "h")
    assert "conf/token.txt" in files and ".htpasswd" in files
    assert "prod.env.bak" not in files
    err = capsys.readouterr().err
    assert "conf/token.txt" not in err and ".htpasswd" not in err and "prod.env.bak" in err


def test_a_line_marked_for_detect_secrets_is_shipped(tmp_path, capsys):
    """detect-secrets' own inline marker releases one line, not the file."""
    (tmp_path / "fixture.py").write_text(
        'TEST_KEY = "AKIAZ7Q3XK5LMN2P4R6T"  # pragma: allowlist secret\n')
    (tmp_path / "leak.py").write_text('TEST_KEY = "AKIAZ7Q3XK5LMN2P4R6T"\n')
    assert sorted(shipped_in(pack(tmp_path).tarball)) == ["fixture.py"]


def test_ordinary_code_about_passwords_ships(tmp_path, capsys):
    """No false alarm on code that names secrets without holding one."""
    (tmp_path / "auth.py").write_text(
        "import os\npassword = os.environ['DB_PASSWORD']\nsecret = read_secret(path)\n"
        "API_KEY = None\nmodel = 'bert-base-uncased'\nsha = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4'\n")
    assert sorted(shipped_in(pack(tmp_path).tarball)) == ["auth.py"]
    assert capsys.readouterr().err == ""


def test_ship_secrets_not_a_list_is_one_line():
    from alchemist_jobs.errors import UserError

    with pytest.raises(UserError, match=r"ship_secrets: 'token.txt' is invalid"):
        spec(ship_secrets="token.txt")
