"""The dashboard in a real browser (Debian's headless Chromium driven by selenium) over a real
`alchemist ui` and a real 2-worker local job: the run appears, its loss chart gains points,
cancel from the page stops every process, a bad pasted spec shows the CLI's one-line error.
Screenshots land in tests/ui/artifacts/."""

from __future__ import annotations

import json
import os
import re
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


def fact(driver, name: str) -> str:
    """A value of the run page's header (`accuracy`, `loss`...)."""
    from selenium.webdriver.common.by import By

    for item in driver.find_elements(By.CSS_SELECTOR, "#run-facts > div"):
        label = item.find_element(By.TAG_NAME, "b").text
        if label == name:
            return item.text[len(label):].strip()
    raise AssertionError(f"no {name} in the header")


def sign_in(driver, server) -> None:
    """Open the one-time URL `alchemist ui` printed; back once the page has traded its token
    for the session cookie and listed the runs with it."""
    from selenium.webdriver.common.by import By

    driver.get(server.login_url)
    wait(driver, lambda d: d.find_element(By.ID, "runs-count").text,
         "the one-time URL never signed the browser in")


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
        sign_in(driver, server)  # the one-time URL `alchemist ui` printed
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
        # The header's accuracy is the chart's, while the run goes on (it said `-`).
        wait(driver, lambda d: int(d.find_element(By.ID, "chart-accuracy").get_attribute(
            "data-points") or 0) > 0, "the accuracy chart never got a point")
        wait(driver, lambda d: re.fullmatch(r"0\.\d{4}", fact(d, "accuracy")),
             "the header never showed the accuracy its chart shows")
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
        sign_in(driver, server)  # a session cookie for this browser
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
        sign_in(driver, server)
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


def test_the_url_signs_this_browser_in_for_every_tab_and_no_other_browser(driver, finished_home):
    """Issue 35.4: a run opened in a new tab asked for the token again, and the "one-time" URL
    worked in every browser profile. Now the first browser gets a session cookie (HttpOnly,
    SameSite=Strict) that its new tabs and shared links use; the URL is then spent."""
    from selenium.webdriver.common.by import By

    home, run_id = finished_home
    server = UiServer(home)
    other = None
    try:
        sign_in(driver, server)
        assert "token=" not in driver.current_url
        # Nothing of a token is left to the page's scripts: no storage, no readable cookie.
        assert driver.execute_script("return sessionStorage.length + localStorage.length") == 0
        assert driver.execute_script("return document.cookie") == ""
        port = server.url.rstrip("/").rsplit(":", 1)[1]
        (cookie,) = [c for c in driver.get_cookies() if c["name"].startswith("alchemist")]
        assert cookie["name"] == f"alchemist-session-{port}"
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and "expiry" not in cookie

        driver.switch_to.new_window("tab")  # a new tab, a link someone shared to the run
        driver.get(server.url + f"#/run/local/{run_id}")
        wait(driver, lambda d: d.find_element(By.ID, "run-state").text == "succeeded",
             "a new tab of the signed-in browser never showed the run")
        assert not driver.find_element(By.ID, "token-form").is_displayed()
        shot(driver, "run-new-tab.png")

        other = browser()  # another browser profile opens the same URL: it is spent
        other.get(server.login_url)
        form = wait(other, lambda d: (f := d.find_element(By.ID, "token-form")).is_displayed()
                    and f, "another browser was not asked for the token")
        assert "once" in other.find_element(By.ID, "token-why").text
        assert other.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr") == []
        shot(other, "spent-url.png")
        # The owner may still sign it in with the scripts' token.
        other.find_element(By.ID, "token-input").send_keys(server.token)
        form.find_element(By.TAG_NAME, "button").click()
        wait(other, lambda d: d.find_elements(
            By.CSS_SELECTOR, f"#runs-table tr[data-run='{run_id}']"),
            "the scripts' token never signed another browser in")
        assert other.execute_script("return sessionStorage.length + localStorage.length") == 0
    finally:
        if other is not None:
            other.quit()
        assert server.stop() == 0


def test_an_async_runs_page_lists_its_servers_and_checkpoints_and_agrees_with_its_charts(
        driver, async_home):
    """Issue 35.4: the parameter servers among the ranks, every rank's and server's
    checkpoints, the header's accuracy that of the charts, the communication chart drawn."""
    from selenium.webdriver.common.by import By

    home, run_id = async_home
    run_dir = home / "runs" / run_id
    result = json.loads((run_dir / "result.json").read_text())
    server = UiServer(home)
    try:
        sign_in(driver, server)
        driver.get(server.url + f"#/run/local/{run_id}")
        rows = lambda d, role: [r.find_element(By.TAG_NAME, "td").text for r in d.find_elements(
            By.CSS_SELECTOR, f"#ranks tbody tr[data-role={role}]")]
        wait(driver, lambda d: rows(d, "server") == ["server 0"],
             "the parameter server never showed among the ranks")
        assert rows(driver, "worker") == ["0", "1"]
        on_disk = sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt"))
        listed = lambda d: sorted(r.find_element(By.TAG_NAME, "td").text for r in
                                  d.find_elements(By.CSS_SELECTOR, "#checkpoints tbody tr"))
        wait(driver, lambda d: listed(d) == on_disk, "the checkpoints listed are not the files")
        holders = {r.find_elements(By.TAG_NAME, "td")[1].text for r in
                   driver.find_elements(By.CSS_SELECTOR, "#checkpoints tbody tr")}
        assert holders == {"rank 0", "rank 1", "server 0"}
        points = lambda d, k: int(d.find_element(By.ID, f"chart-{k}").get_attribute(
            "data-points") or 0)
        wait(driver, lambda d: points(d, "accuracy") > 0 and points(d, "communication") > 0,
             "an ended run's accuracy or communication chart stayed empty")
        last = float(driver.find_element(By.ID, "chart-accuracy").get_attribute("data-last"))
        assert fact(driver, "accuracy") == f"{result['test_accuracy']:.4f}" == f"{last:.4f}"
        shot(driver, "run-async.png")
    finally:
        assert server.stop() == 0
