"""Staging a local data directory, in a fresh process, leaves boto3 unimported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_staging_a_local_directory_does_not_import_boto3(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.npz").write_bytes(b"x")
    code = f"""
import sys
from pathlib import Path
from alchemist_jobs.spec import parse_spec
from alchemist_jobs.data.stage import stage
import alchemist_jobs.runtime.tasks, alchemist_jobs.commands.data
s = parse_spec({{"name": "j", "task": {{"builtin": "digits"}}, "data": {{"source": {str(tmp_path / "d")!r}}}}}, "t")
e = stage(s, Path({str(tmp_path / "home")!r}))
assert (e.path / "train.npz").read_bytes() == b"x"
print(sorted(m for m in ("boto3", "botocore", "s3transfer") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
