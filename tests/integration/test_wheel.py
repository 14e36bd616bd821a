"""An installed wheel is self-contained: it carries the job package and the monitoring data
`alchemist monitor` reads (alert rules, the local Prometheus template, dashboards), and
nothing of infra/ or tests/."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(600)


def test_the_wheel_carries_the_monitoring_data(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    # A copy of the tracked tree: building writes build/ and *.egg-info into its source.
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            (src / f).write_bytes((REPO / f).read_bytes())
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path / "dist"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("alchemist-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("alchemist_jobs/cli.py", "alchemist_jobs/store_bind.py",
                   "monitoring/rules/alchemist.rules.yaml", "monitoring/prometheus/local.yml.tmpl",
                   "monitoring/dashboards/training-overview.json"):
        assert needed in names, needed
    assert not any(n.startswith(("infra/", "tests/")) for n in names)
