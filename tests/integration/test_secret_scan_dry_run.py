"""Through the CLI a user runs: `alchemist run job.yaml --dry-run` in a working directory that
holds a kubeconfig, a docker login, a gcloud login, tokens in notes, archives holding credentials
and a key named like an image beside the code and the user's own model (a torch checkpoint and
a numpy .npz, both zip archives), and an `env:` with HF_TOKEN and a github_pat_ value. Each file
held back is one warning line naming it, why (for an archive, the file inside) and
ship_secrets; each variable one warning pointing at secret_env (and the spec, now holding
tokens, is held back too); no secret is printed; the run's copy counts the code and the model."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import cli
from tests.unit.test_secret_scan_formats import GITHUB_PAT, HELD, HF_TOKEN, project, shipped


def test_the_dry_run_names_each_held_back_file_and_secret_looking_variable(home: Path,
                                                                          tmp_path: Path):
    root = project(tmp_path / "work")
    (root / "job.yaml").write_text(
        "name: scan\ntask: {script: train.py}\n"
        f"env:\n  HF_TOKEN: {HF_TOKEN}\n  GITHUB_TOKEN: {GITHUB_PAT}\n  NCCL_DEBUG: INFO\n")
    r = cli("run", str(root / "job.yaml"), "--dry-run", home=home)
    assert r.returncode == 0, r.stderr
    warnings = [x for x in r.stderr.splitlines() if x.startswith("warning:")]
    # The spec itself holds the tokens now, so it is held back from the copy as well.
    assert len(warnings) == len(HELD) + 1 + 2, r.stderr
    for rel, (_, why) in {**HELD, "job.yaml": ("", "Hugging Face")}.items():
        line = next(x for x in warnings if f" {rel} is not shipped" in x)
        assert why in line and "ship_secrets" in line
    for name in ("HF_TOKEN", "GITHUB_TOKEN"):
        assert any(f"env.{name}:" in x and f"secret_env.{name}" in x for x in warnings)
    assert HF_TOKEN not in r.stderr and GITHUB_PAT not in r.stderr
    copied = re.search(r"# code: (\d+) file\(s\)", r.stdout)
    assert copied and int(copied.group(1)) == len(shipped()), r.stdout
