"""A user's working directory as it really is: a kubeconfig beside the code, a docker login, a
gcloud login, tokens pasted into notes, old backups (zip, tar.gz) holding credentials, a key saved
with an image's name. None of them ships with a run (the cluster ConfigMap's tarball, the local
run's `code/`), each is one warning line naming the file, why (for an archive, the file inside
that holds it) and `ship_secrets`, and the code around them ships, with the user's own model
(a torch checkpoint, a numpy `.npz`: zip archives holding no credential)."""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
import zipfile
from functools import lru_cache
from pathlib import Path

import pytest

from alchemist_jobs import secret_scan
from alchemist_jobs.kubernetes.code_assets import pack
from alchemist_jobs.local_backend import code_of
from alchemist_jobs.spec import parse_spec

B64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
CA = B64(b"-----BEGIN CERTIFICATE-----\nMIIC5zCCAc+gAwIBAgIBADANBgkqhkiG9w0BAQsFADAVMRMw\n"
         b"-----END CERTIFICATE-----\n")
CLIENT_KEY = B64(b"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAyW0lTqE5Zr8mQ4vX2pL9\n"
                 b"-----END RSA PRIVATE KEY-----\n")

# A kubeconfig as `kind get kubeconfig` / kubeadm's admin.conf writes it (client-go's
# clientcmd v1 Config: clusters, contexts, users with client-key-data), under a name that
# says nothing.
ADMIN_CONF = f"""apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: {CA}
    server: https://10.0.0.1:6443
  name: prod
contexts:
- context:
    cluster: prod
    user: kubernetes-admin
  name: kubernetes-admin@prod
current-context: kubernetes-admin@prod
kind: Config
preferences: {{}}
users:
- name: kubernetes-admin
  user:
    client-certificate-data: {CA}
    client-key-data: {CLIENT_KEY}
"""
# A CI kubeconfig holding a service account's bearer token (clientcmd's `token` field).
CI_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: ci
  cluster: {server: "https://ci.example.com:6443"}
users:
- name: ci-bot
  user:
    token: 7bQ2kLm9XzR4tY8wP1vN6sJ3hD5fG0aE
contexts:
- name: ci
  context: {cluster: ci, user: ci-bot}
current-context: ci
"""
# kubectl's OIDC auth-provider keeps the id and refresh tokens in the kubeconfig itself.
OIDC_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: corp
  cluster: {server: "https://k8s.corp.example:443"}
users:
- name: alice
  user:
    auth-provider:
      name: oidc
      config:
        client-id: kubernetes
        idp-issuer-url: https://sso.corp.example
        id-token: eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9
        refresh-token: Cg1hbGljZS1yZWZyZXNoEgZzc28tMDE
contexts:
- name: corp
  context: {cluster: corp, user: alice}
current-context: corp
"""
# `docker login` writes ~/.docker/config.json: "auths" -> registry -> base64(user:password).
DOCKER_CONFIG = json.dumps(
    {"auths": {"ghcr.io": {"auth": B64(b"alice:Zr8mQ4vX2pL9wQ7e")}}}, indent="\t") + "\n"
# `gcloud auth application-default login` writes an authorized_user JSON with a refresh token.
GCLOUD_ADC = json.dumps({
    "account": "", "client_id": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps"
    ".googleusercontent.com", "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty",
    "quota_project_id": "demo", "refresh_token": "1//0gXq7YvLm2TkCgYIARAAGBASNwF-L9IrWq8vN2xL9p"
    "Zr4Tk1mB7cQ", "type": "authorized_user", "universe_domain": "googleapis.com"})
# GitHub's fine-grained personal access token and a Hugging Face user access token.
GITHUB_PAT = ("github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuV"
              "wXyZ01234")
HF_TOKEN = "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567"
OPENSSH_KEY = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAA"
               "AAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----\n")
AWS_ENV = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"


PEM_KEY = base64.b64decode(CLIENT_KEY).decode()


def zip_of(files: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in files.items():
            z.writestr(name, content)
    return buf.getvalue()


def tar_of(files: dict, mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, content in files.items():
            data = content if isinstance(content, bytes) else content.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@lru_cache(maxsize=1)
def model_files() -> dict[str, bytes]:
    """A team's own model beside its code, as torch and numpy write them (both are zip
    archives): the state dict its script loads, and arrays saved with numpy.savez."""
    import numpy as np
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    pt, npz = io.BytesIO(), io.BytesIO()
    torch.save(model.state_dict(), pt)
    rng = np.random.default_rng(0)
    np.savez(npz, embedding=rng.standard_normal((100, 16)).astype(np.float32),
             vocab=np.array(["the", "a", "model"]))
    return {"pretrained.pt": pt.getvalue(), "data/weights.npz": npz.getvalue()}


def shipped() -> list[str]:
    """What ships of project(): the code and the model."""
    return sorted([*CODE, *model_files()])


# path in the user's directory -> (content, a word the warning's reason holds)
HELD = {
    "deploy/admin.conf": (ADMIN_CONF, "kubeconfig"),
    "deploy/ci.yaml": (CI_KUBECONFIG, "kubeconfig"),
    "deploy/corp.yaml": (OIDC_KUBECONFIG, "kubeconfig"),
    "registry/config.json": (DOCKER_CONFIG, "docker"),
    "gcp/adc.json": (GCLOUD_ADC, "Google"),
    "notes/github.md": (f"CI pushes with {GITHUB_PAT}\n", "GitHub"),
    "notes/hub.md": (f"my hub token: {HF_TOKEN}\n", "Hugging Face"),
    # Archives: held back for what a file inside holds, named in the reason.
    "backup.zip": (zip_of({"old/.env": AWS_ENV}), "in old/.env inside the zip archive"),
    "old/site.tar.gz": (tar_of({"creds.txt": AWS_ENV}, "w:gz"),
                        "in creds.txt inside the gzip archive"),
    "old/site.tar": (tar_of({"creds.txt": AWS_ENV}), "in creds.txt inside the tar archive"),
    "deploy/clusters.zip": (
        zip_of({"README.md": "# clusters\n", "clusters/prod.yaml": ADMIN_CONF}),
        "kubeconfig's credentials in clusters/prod.yaml inside the zip archive"),
    "backup/home.tar.gz": (
        tar_of({"notes.txt": "todo\n", "secrets/creds.json": json.dumps({"hub": HF_TOKEN})},
               "w:gz"),
        "it holds a Hugging Face token in secrets/creds.json inside the gzip archive"),
    "release/bundle.zip": (zip_of({"app.py": "print(1)\n",
                                   "inner/keys.zip": zip_of({"deploy.pem": PEM_KEY})}),
                           "Private Key in deploy.pem in inner/keys.zip inside the zip archive"),
    "assets/logo.png": (OPENSSH_KEY, "Private Key"),
}
CODE = {
    "train.py": "import lib.model\nprint('train')\n",
    "lib/model.py": "HIDDEN = 64\n",
    # Code and configuration that talk about these formats without holding a credential.
    "lib/k8s.py": "from kubernetes import config\nconfig.load_kube_config()  # reads token: from it\n",
    "conf/model.yaml": "kind: Config\nmodel: bert-base-uncased\ntokenizer: hf_internal_testing\n",
    "conf/registry.json": '{"auths": {}, "credsStore": "desktop"}\n',
}


def write(root: Path, files: dict) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def project(root: Path) -> Path:
    return write(root, {**{rel: c for rel, (c, _) in HELD.items()}, **CODE, **model_files()})


def shipped_in(tarball: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        return sorted(m.name for m in tar.getmembers() if m.isfile())


@pytest.mark.parametrize("rel", sorted(HELD))
def test_the_scan_holds_back_each_by_its_content(tmp_path, rel):
    content, why = HELD[rel]
    write(tmp_path, {rel: content})
    found = secret_scan.flagged_files(tmp_path, [rel])
    assert rel in found, f"{rel} would ship"
    assert why in found[rel]


@pytest.mark.parametrize("rel", sorted(CODE))
def test_code_that_names_these_formats_is_not_held_back(tmp_path, rel):
    write(tmp_path, {rel: CODE[rel]})
    assert secret_scan.flagged_files(tmp_path, [rel]) == {}


def test_a_cluster_snapshot_ships_only_the_code_and_names_each_file_once(tmp_path, capsys):
    snap = pack(project(tmp_path / "p"))
    assert shipped_in(snap.tarball) == shipped()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == len(HELD), err
    for rel, (_, why) in HELD.items():
        line = next(x for x in err if x.startswith(f"warning: task: {rel} is not shipped"))
        assert why in line and f"list {rel!r} in ship_secrets" in line
    shown = "\n".join(err)
    for secret in (CLIENT_KEY, GITHUB_PAT, HF_TOKEN, "1//0gXq7YvLm2TkC", "wJalrXUtnFEMI"):
        assert secret[-20:] not in shown


def test_a_local_runs_copy_ships_only_the_code(tmp_path, capsys):
    spec = parse_spec({"name": "s", "task": {"module": "train"}}, "job.yaml")
    _, files = code_of(spec, project(tmp_path / "p"), tmp_path / "home")
    assert sorted(files) == shipped()
    assert len(capsys.readouterr().err.strip().splitlines()) == len(HELD)


def test_an_archive_the_spec_lists_in_ship_secrets_ships(tmp_path, capsys):
    """An archive held back for what it holds ships when the spec lists it."""
    root = project(tmp_path / "p")
    spec = parse_spec({"name": "s", "task": {"module": "train"},
                       "ship_secrets": ["backup.zip", "old/*.tar"]}, "job.yaml")
    _, files = code_of(spec, root, tmp_path / "home")
    assert "backup.zip" in files and "old/site.tar" in files
    assert "old/site.tar.gz" not in files
    err = capsys.readouterr().err
    assert "backup.zip" not in err and " old/site.tar is" not in err and "old/site.tar.gz" in err


def test_an_image_is_judged_by_its_content_and_ships(tmp_path):
    """A real PNG (binary, with its own signature) is not an archive nor a key."""
    png = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00"
           b"\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05"
           b"\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")
    write(tmp_path, {"assets/real.png": png, "data.bin": gzip.compress(b"x")[:1]})
    assert secret_scan.flagged_files(tmp_path, ["assets/real.png", "data.bin"]) == {}


@pytest.mark.parametrize("rel", sorted(["pretrained.pt", "data/weights.npz"]))
def test_the_users_own_model_is_not_held_back(tmp_path, rel):
    """torch.save and numpy.savez write zip archives: what is inside is judged, not the format."""
    write(tmp_path, {rel: model_files()[rel]})
    assert secret_scan.flagged_files(tmp_path, [rel]) == {}
