"""An installed wheel is self-contained: it carries the job package and the monitoring data
`alchemist monitor` reads (alert rules, the local Prometheus template, dashboards) inside
alchemist_jobs, installs no top-level package but alchemist_jobs (a `monitoring` would shadow
anyone's own), nothing of infra/ or tests/; outside a checkout, `stack` commands take the
repository with --root and say so without it (issue 24.10)."""

from __future__ import annotations

import os
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
    data = "alchemist_jobs/monitoring_data/"
    for needed in ("alchemist_jobs/cli.py", "alchemist_jobs/store_bind.py",
                   "alchemist_jobs/ui/static/app.js", data + "rules/alchemist.rules.yaml",
                   data + "prometheus/local.yml.tmpl", data + "dashboards/training-overview.json"):
        assert needed in names, needed
    assert {n.split("/")[0] for n in names} == {"alchemist_jobs", wheel.name.split("-py3")[0]
                                                 + ".dist-info"}, sorted(names)[:20]

    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        str(site), str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]

    def installed(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=elsewhere, capture_output=True,
                              text=True, env=dict(os.environ, PYTHONPATH=str(site)), timeout=300)

    r = installed("-c", "import importlib.util, alchemist_jobs\n"
                        "from alchemist_jobs.commands.monitor import MONITORING_DIR as d\n"
                        "print(alchemist_jobs.__file__, d, (d / 'rules').is_dir(),"
                        " importlib.util.find_spec('monitoring'))")
    assert r.returncode == 0, r.stderr
    module, folder, rules, shadow = r.stdout.split()
    assert module.startswith(str(site)) and folder.startswith(str(site)) and rules == "True"
    assert shadow == "None"
    r = installed("-m", "alchemist_jobs", "stack", "list", "--root", str(REPO))
    assert r.returncode == 0 and r.stdout.split()[:2] == ["STACK", "PROVIDER"], r.stderr
    # Outside a checkout the built-in stack is still there, with one line on finding others.
    r = installed("-m", "alchemist_jobs", "stack", "list")
    assert r.returncode == 0 and "local" in r.stdout.split(), r.stdout
    assert "--root" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
