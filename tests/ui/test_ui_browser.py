"""The dashboard in a real browser (Debian's headless Chromium driven by selenium) over a real
`alchemist ui` and a real 2-worker local job: the run appears, its loss chart gains points,
cancel from the page stops every process, a bad pasted spec shows the CLI's one-line error.
Screenshots land in tests/ui/artifacts/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alchemist_jobs.processes import alive
from tests.ui.conftest import ARTIFACTS, EXAMPLES, REPO, UiServer, cli

CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
pytestmark = pytest.mark.skipif(
    not (Path(CHROMEDRIVER).exists() and shutil.which("chromium")),
    reason="needs Debian's chromium and chromium-driver (scripts/setup installs them)")
# Deadlines for things that must happen, generous for a loaded 2-core machine: a test
# waits for the event and fails only if it never comes.
DEADLINE_S = 300


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--disable-gpu", "--window-size=1400,1100",
                "--disable-dev-shm-usage", "--no-first-run"):
        opts.add_argument(arg)
    if os.geteuid() == 0:  # Chromium refuses to run as root with its sandbox
        opts.add_argument("--no-sandbox")
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


@pytest.fixture
def driver():
    d = browser()
    yield d
    d.quit()


def wait(driver, predicate, what: str):
    from selenium.common.exceptions import (NoSuchElementException,
                                            StaleElementReferenceException)
    from selenium.webdriver.support.ui import WebDriverWait

    # The page re-renders its tables on every refresh: an element found a moment ago may be
    # gone; look again.
    return WebDriverWait(driver, DEADLINE_S, poll_frequency=0.2, ignored_exceptions=(
        NoSuchElementException, StaleElementReferenceException)).until(
        lambda d: predicate(d), message=what)


def shot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    return path


def test_a_live_run_appears_charts_grow_and_cancel_stops_every_process(driver, tmp_path):
    from selenium.webdriver.common.by import By

    home = tmp_path / "home"
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home))
    job = subprocess.Popen(
        [sys.executable, "-m", "alchemist_jobs", "run", "examples/digits.yaml", "--quiet",
         "--set", "hyper.epochs=400", "--home", str(home)], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    server = UiServer(home)
    try:
        driver.get(server.login_url)  # the one-time URL `alchemist ui` printed
        run_id = wait(driver, lambda d: (rows := d.find_elements(
            By.CSS_SELECTOR, "#runs-table tr[data-state=running]")) and
            rows[0].get_attribute("data-run"), "the running job never appeared on the runs page")
        wait(driver, lambda d: "/" in d.find_element(
            By.CSS_SELECTOR, f"#runs-table tr[data-run='{run_id}'] td:nth-child(4)").text,
            "the run's progress never showed")
        shot(driver, "runs.png")

        wait(driver, lambda d: d.find_element(
            By.CSS_SELECTOR, f"#runs-table tr[data-run='{run_id}'] a").click() or True,
            "could not open the run")
        chart = lambda d: int(d.find_element(By.ID, "chart-loss").get_attribute("data-points")
                              or 0)
        first = wait(driver, lambda d: chart(d) >= 2 and chart(d), "no loss points came")
        wait(driver, lambda d: chart(d) > first, "the loss chart never gained a point")
        wait(driver, lambda d: "alchemist:" in d.find_element(By.ID, "log").text or
             "epoch" in d.find_element(By.ID, "log").text or
             len(d.find_element(By.ID, "log").text) > 0, "rank 0's log never showed")
        assert len(driver.find_elements(By.CSS_SELECTOR, "#ranks tbody tr")) == 2
        shot(driver, "run.png")

        run_dir = home / "runs" / run_id
        state = json.loads((run_dir / "run.json").read_text())
        pids = state["agents"] + [json.loads(p.read_text())["pid"]
                                  for p in (run_dir / "workers").glob("rank-*.json")]
        assert len(pids) == 3 and all(alive(p) for p in pids)

        driver.find_element(By.ID, "cancel").click()
        driver.switch_to.alert.accept()
        wait(driver, lambda d: d.find_element(By.ID, "run-state").text == "cancelled",
             "the page never showed the run cancelled")
        shot(driver, "run-cancelled.png")
        out, _ = job.communicate(timeout=DEADLINE_S)  # the launcher ends with its run
        assert job.returncode == 1 and "cancelled" in out, out
        assert [p for p in pids if alive(p)] == []
        assert json.loads((run_dir / "run.json").read_text())["state"] == "cancelled"
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        assert server.stop() == 0


def test_a_bad_pasted_spec_shows_the_clis_one_line_error(driver, tmp_path):
    from selenium.webdriver.common.by import By

    home = tmp_path / "home"
    bad = (EXAMPLES / "digits.yaml").read_text().replace("name: sync", "name: ring")
    spec_file = tmp_path / "spec"
    spec_file.write_text(bad)
    proc = cli("run", str(spec_file), "--dry-run", home=home)
    assert proc.returncode == 2
    expected = proc.stderr.strip().removeprefix("error: ").replace(str(spec_file), "spec")

    server = UiServer(home)
    try:
        driver.get(server.login_url)  # the page keeps the token for this tab
        driver.get(server.url + "#/submit")
        box = wait(driver, lambda d: d.find_element(By.ID, "spec-text"), "no spec box")
        # Typed through the page as a paste would land (send_keys would auto-indent nothing,
        # but is slow for a whole file).
        driver.execute_script("arguments[0].value = arguments[1];"
                              "arguments[0].dispatchEvent(new Event('input'));", box, bad)
        driver.find_element(By.ID, "start").click()
        error = wait(driver, lambda d: (e := d.find_element(By.ID, "submit-error")).is_displayed()
                     and e, "no error shown")
        assert error.text == expected and "\n" not in error.text
        assert "algorithm.name" in error.text
        shot(driver, "submit-error.png")
        assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    finally:
        assert server.stop() == 0


def test_a_finished_run_shows_its_charts_and_a_missing_run_says_so_and_stops_asking(
        driver, finished_home):
    """Issue 24.13: a finished run's page draws its charts on one step axis, the loss has a
    log scale, the page has an icon, and a run that does not exist says so once and is no
    longer polled."""
    import urllib.request

    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    home, run_id = finished_home
    server = UiServer(home)
    try:
        driver.get(server.login_url)
        driver.get(server.url + f"#/run/local/{run_id}")
        points = lambda d, k: int(d.find_element(By.ID, f"chart-{k}").get_attribute(
            "data-points") or 0)
        wait(driver, lambda d: all(points(d, k) > 0 for k in ("loss", "accuracy", "throughput")),
             "a finished run's charts stayed empty")
        assert driver.find_element(By.ID, "remove").is_displayed()
        assert not driver.find_element(By.ID, "cancel").is_displayed()
        first_step = lambda d, k: [t.text for t in d.find_elements(
            By.CSS_SELECTOR, f"#chart-{k} text") if t.text.startswith("step ")][0]
        starts = {first_step(driver, k) for k in ("loss", "accuracy", "throughput")}
        assert len(starts) == 1, starts
        loss = driver.find_element(By.ID, "chart-loss")
        assert loss.get_attribute("data-scale") == "linear"
        driver.find_element(By.ID, "loss-log").click()
        wait(driver, lambda d: d.find_element(By.ID, "chart-loss").get_attribute("data-scale")
             == "log", "the loss chart never switched to a log scale")
        shot(driver, "run-finished-log-loss.png")

        icon = driver.find_element(By.CSS_SELECTOR, "link[rel=icon]").get_attribute("href")
        with urllib.request.urlopen(icon, timeout=30) as resp:
            assert resp.status == 200 and resp.headers["content-type"].startswith("image/svg")

        missing = "nope-20260101-000000-00000000"
        driver.get(server.url + f"#/run/local/{missing}")
        wait(driver, lambda d: "no such run" in d.find_element(By.ID, "run-title").text,
             "a missing run's page never said so")
        asked = lambda d: d.execute_script(
            "return performance.getEntriesByType('resource')"
            f".filter((e) => e.name.includes('/runs/{missing}')).length")
        before = asked(driver)
        with pytest.raises(TimeoutException):  # three polling periods: no new request
            WebDriverWait(driver, 4.5, poll_frequency=0.3).until(lambda d: asked(d) > before)
    finally:
        assert server.stop() == 0
