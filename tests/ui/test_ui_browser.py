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
from alchemist_jobs.rundir import RunDir
from alchemist_jobs.ui.series import MAX_POINTS
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
            By.CSS_SELECTOR, f"#runs-table tr[data-run='{run_id}'] td[data-col=progress]").text,
            "the run's progress never showed")
        shot(driver, "runs.png")

        # A chart holds at most MAX_POINTS points, older ones thinned: past that its count
        # stays put while its newest step moves on. On a loaded machine the page opened that
        # late and a count that had to grow never did; so the page opens past the cap, always.
        run_dir = home / "runs" / run_id
        wait(driver, lambda d: ((RunDir(run_dir).progress() or {}).get("step") or 0) > MAX_POINTS,
             f"the run never passed step {MAX_POINTS}")
        wait(driver, lambda d: d.find_element(
            By.CSS_SELECTOR, f"#runs-table tr[data-run='{run_id}'] a").click() or True,
            "could not open the run")
        loss = lambda d: d.find_element(By.ID, "chart-loss")
        newest = lambda d: float(loss(d).get_attribute("data-last-step") or -1)
        first = wait(driver, lambda d: newest(d) > MAX_POINTS and newest(d), "no loss points came")
        assert int(loss(driver).get_attribute("data-points")) == MAX_POINTS  # thinned
        wait(driver, lambda d: newest(d) > first, "the loss chart never gained a point")
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


# --- issue 35.3: reported metrics in the runs table and the run's charts ---------------------

SCRIPT_STEPS = 24
# A user's torch script: every step's loss and accuracy reported, f1 every sixth step. With
# FAIL_AT, rank 1 raises there (on every attempt, or on the first only with FIRST_ONLY).
SCRIPT = """
import os
import torch
import torch.distributed as dist
from alchemist_jobs.report import report

FAIL_AT, FIRST_ONLY = {fail_at}, {first_only}
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
x = torch.randn(128, 4)
y = (x[:, 0] > 0).long()
for step in range(1, {steps} + 1):
    if rank == 1 and step == FAIL_AT and not (FIRST_ONLY and attempt > 0):
        raise ValueError(f"bad batch at step {{step}}")
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    extra = dict(f1=step / 100) if step % 6 == 0 else {{}}
    report(step=step, loss=loss.item(), total_steps={steps}, samples=128, accuracy=accuracy,
           **extra)
dist.destroy_process_group()
"""


def script_job(folder: Path, name: str, fail_at: int = 0, first_only: bool = False,
               max_restarts: int = 0) -> Path:
    """A script job (2 workers, sync) in `folder`; its spec's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(SCRIPT.format(fail_at=fail_at, first_only=first_only,
                                                   steps=SCRIPT_STEPS))
    spec = folder / "job.yaml"
    spec.write_text(f"name: {name}\ntask: {{script: train.py}}\nprocs_per_node: 2\n"
                    f"max_restarts: {max_restarts}\nalgorithm: {{name: sync}}\n")
    return spec


def run_id_of(proc: subprocess.CompletedProcess, state: str) -> str:
    found = re.search(rf"run (\S+): {state}", proc.stdout)
    assert found, proc.stdout + proc.stderr
    return found.group(1)


@pytest.fixture(scope="module")
def metrics_home(tmp_path_factory) -> dict:
    """A home of three real runs the CLI made, of different kinds: a 230-step digits run under
    bmuf (its accuracy the final evaluation's), a sync script that reported loss, accuracy and
    f1, and a script whose rank 1 failed. {home, digits, script, failed: run ids}."""
    base = tmp_path_factory.mktemp("metrics")
    home = base / "home"
    digits = cli("run", "examples/digits.yaml", "--set", "algorithm.name=bmuf", "--quiet",
                 "--home", str(home), home=home)
    assert digits.returncode == 0, digits.stdout + digits.stderr
    script = cli("run", str(script_job(base / "mine", "mine")), "--quiet", "--home", str(home),
                 home=home)
    assert script.returncode == 0, script.stdout + script.stderr
    failed = cli("run", str(script_job(base / "broken", "broken", fail_at=5)), "--quiet",
                 "--home", str(home), home=home)
    assert failed.returncode != 0, failed.stdout + failed.stderr
    return dict(home=home, digits=run_id_of(digits, "succeeded"),
                script=run_id_of(script, "succeeded"), failed=run_id_of(failed, "failed"))


def cell(driver, run_id: str, column: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(
        By.CSS_SELECTOR, f"#runs-table tr[data-run='{run_id}'] td[data-col={column}]").text


def test_the_runs_table_tells_runs_apart_and_a_runs_page_charts_what_its_script_reported(
        driver, metrics_home):
    """Issue 35.3: the runs table had no algorithm, accuracy, duration or failure-reason
    column (ten runs of different algorithms looked identical); a run's page charted no metric
    a script reported; an ended 230-step run's loss chart had 4 points."""
    from selenium.webdriver.common.by import By

    home = metrics_home["home"]
    runs = {k: api_row(home, metrics_home[k]) for k in ("digits", "script", "failed")}
    server = UiServer(home)
    try:
        sign_in(driver, server)
        wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr"))
             == 3, "the three runs never showed")
        heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#runs-table thead th")]
        for head in ("Algorithm", "Accuracy", "Duration", "Reason"):
            assert head in heads, heads
        digits, script, failed = (metrics_home[k] for k in ("digits", "script", "failed"))
        assert cell(driver, digits, "algorithm") == "bmuf"
        assert cell(driver, script, "algorithm") == "sync"
        # The final evaluation's accuracy, and the one the script reported last.
        result = json.loads((home / "runs" / digits / "result.json").read_text())
        assert cell(driver, digits, "accuracy") == f"{result['test_accuracy']:.4f}"
        assert cell(driver, script, "accuracy") == f"{runs['script'].accuracy:.4f}"
        assert runs["script"].accuracy == runs["script"].metrics["accuracy"]
        for row in runs.values():
            assert cell(driver, row.run_id, "duration") == duration_text(row.duration_s)
        reason = cell(driver, failed, "reason")
        assert "rank 1" in reason and "ValueError" in reason, reason
        assert cell(driver, script, "reason") == "" and cell(driver, digits, "reason") == ""
        shot(driver, "runs-metrics.png")

        points = lambda d, k: int(d.find_element(By.ID, f"chart-{k}").get_attribute(
            "data-points") or 0)
        # The ended 230-step digits run: one loss point per step of its series.jsonl.
        lines = (home / "runs" / digits / "series.jsonl").read_text().splitlines()
        assert len(lines) == 230
        driver.get(server.url + f"#/run/local/{digits}")
        wait(driver, lambda d: points(d, "loss") == 230,
             "the ended digits run's loss chart does not have one point per step")
        assert fact(driver, "algorithm") == "bmuf"

        # The script's run: each metric it reported has a chart, at step resolution.
        driver.get(server.url + f"#/run/local/{script}")
        metric = lambda d, name: d.find_element(
            By.CSS_SELECTOR, f"#metric-charts svg[data-metric='{name}']")
        wait(driver, lambda d: int(metric(d, "f1").get_attribute("data-points") or 0) == 4,
             "the f1 the script reported every sixth step has no chart of 4 points")
        assert float(metric(driver, "f1").get_attribute("data-last")) == pytest.approx(0.24)
        caption = metric(driver, "f1").find_element(By.XPATH, "..").find_element(
            By.TAG_NAME, "figcaption").text
        assert caption == "f1"
        assert points(driver, "loss") == SCRIPT_STEPS
        assert points(driver, "accuracy") == SCRIPT_STEPS
        last = float(driver.find_element(By.ID, "chart-accuracy").get_attribute("data-last"))
        assert fact(driver, "accuracy") == f"{last:.4f}" == f"{runs['script'].accuracy:.4f}"
        assert fact(driver, "f1") == "0.2400"
        # The metric charts share the other charts' step axis.
        first_step = lambda svg: [t.text for t in svg.find_elements(By.TAG_NAME, "text")
                                  if t.text.startswith("step ")]
        assert first_step(metric(driver, "f1")) == first_step(
            driver.find_element(By.ID, "chart-loss")) == ["step 1", f"step {SCRIPT_STEPS}"]
        shot(driver, "run-script-metrics.png")
    finally:
        assert server.stop() == 0


def api_row(home: Path, run_id: str):
    """The run's row as the API gives it (what the page must show)."""
    from alchemist_jobs.ui.backends import Backends

    return next(r for r in Backends(["local"], home=home).runs("local") if r.run_id == run_id)


def duration_text(seconds: float) -> str:
    """The page's way of writing a duration."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


# Held by the test, so that a restart's new attempt waits until the page was seen to show it:
# rank 1 of the second attempt starts only once the gate file exists (in the worker's own
# interpreter, before anything of the job runs, as a slow container start would).
GATE = """
import os, time
if os.environ.get("RANK") == "1" and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "1":
    parent, deadline = os.getppid(), time.monotonic() + {deadline}
    while not os.path.exists({gate!r}) and os.getppid() == parent and \\
            time.monotonic() < deadline:
        time.sleep(0.1)
"""


def test_a_restarting_run_shows_a_restarting_badge_and_its_reason(driver, tmp_path):
    """Issue 35.2 on the page: a run whose rank 1 failed is `restarting` (a badge like the
    other states, with the failure and the attempt) until its new attempt's workers start."""
    from selenium.webdriver.common.by import By

    home = tmp_path / "home"
    gate = tmp_path / "open"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(GATE.format(gate=str(gate), deadline=DEADLINE_S))
    spec = script_job(tmp_path / "flaky", "flaky", fail_at=3, first_only=True, max_restarts=1)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(hook)]),
               ALCHEMIST_HOME=str(home))
    job = subprocess.Popen(
        [sys.executable, "-m", "alchemist_jobs", "run", str(spec), "--quiet", "--home",
         str(home)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    server = UiServer(home)
    try:
        sign_in(driver, server)
        row = "#runs-table tr[data-state=restarting]"
        run_id = wait(driver, lambda d: (rows := d.find_elements(By.CSS_SELECTOR, row)) and
                      rows[0].get_attribute("data-run"), "the run never showed restarting")
        badge = driver.find_element(By.CSS_SELECTOR, f"{row} td[data-col=state] .state")
        assert badge.text == "restarting"
        assert badge.get_attribute("class").split() == ["state", "restarting"]
        grey = driver.execute_script(
            "const s = document.createElement('span'); s.className = 'state';"
            "document.body.append(s); const c = getComputedStyle(s).backgroundColor;"
            "s.remove(); return c;")
        assert badge.value_of_css_property("background-color") != grey  # coloured, as others
        reason = cell(driver, run_id, "reason")
        assert "rank 1 failed" in reason and "ValueError" in reason and \
            "restarting 1/1" in reason, reason
        shot(driver, "runs-restarting.png")

        driver.get(server.url + f"#/run/local/{run_id}")
        wait(driver, lambda d: d.find_element(By.ID, "run-state").text == "restarting",
             "the run's page never showed it restarting")
        assert "restarting 1/1" in driver.find_element(By.ID, "run-reason").text
        assert fact(driver, "restarts") == "1"
        shot(driver, "run-restarting.png")

        gate.touch()  # the new attempt may start now
        wait(driver, lambda d: d.find_element(By.ID, "run-state").text == "succeeded",
             "the restarted run never succeeded")
        out, _ = job.communicate(timeout=DEADLINE_S)
        assert job.returncode == 0, out
    finally:
        gate.touch()
        if job.poll() is None:
            job.kill()
            job.wait()
        assert server.stop() == 0
