"""The run page names a job's own packages (issue 38.4): a real local run with
`requirements:` (a wheel built here, reached through PIP_FIND_LINKS), then a real `alchemist
ui` in headless Chromium: the header shows the packages and the lock's hash the run recorded,
and the API gives the lock itself."""

from __future__ import annotations

import json
import os
import re
import urllib.request

from alchemist_jobs import job_env
from tests.integration.test_job_requirements import build_wheel, mirror, write_job
from tests.ui.conftest import UiServer, cli
from tests.ui.test_ui_browser import driver, fact, pytestmark, sign_in, wait  # noqa: F401


def packages(d) -> str | None:
    """The header's `packages`, once the page has drawn it."""
    try:
        return fact(d, "packages")
    except AssertionError:
        return None


def test_the_run_page_shows_the_packages_and_the_lock_hash(driver, tmp_path):  # noqa: F811
    home = tmp_path / "home"
    links = tmp_path / "links"
    build_wheel(links, "tinydep_alc", "1.3.0")
    job = write_job(tmp_path, "[tinydep_alc]")
    os.environ.update(mirror(links))
    try:
        r = cli("run", str(job), "--quiet", home=home)
    finally:
        for k in mirror(links):
            os.environ.pop(k)
    assert r.returncode == 0, r.stdout + r.stderr
    run_id = re.search(r"run (\S+): succeeded", r.stdout).group(1)
    lock = (home / "runs" / run_id / job_env.RUN_LOCK).read_text()
    server = UiServer(home)
    try:
        sign_in(driver, server)
        driver.get(server.url + f"#/run/local/{run_id}")
        shown = wait(driver, packages, "the run page named no packages")
        assert shown == f"tinydep-alc==1.3.0 (lock {job_env.lock_hash(lock)[:16]})"
        cookies = "; ".join(f"{c['name']}={c['value']}" for c in driver.get_cookies())
        req = urllib.request.Request(server.url + f"api/v1/stacks/local/runs/{run_id}",
                                     headers={"Cookie": cookies, "Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            detail = json.load(resp)
        assert detail["requirements"]["lock"] == lock
        assert detail["requirements"]["sha256"] == job_env.lock_hash(lock)
    finally:
        assert server.stop() == 0
