"""`alchemist monitor` with a real Prometheus over a real 2-worker local job (examples/digits.yaml).

One job serves every check, to keep CI lean: it trains 500 steps, then rank 0 stalls for 45 s
(the documented fault knob ALCHEMIST_FAULT_STALL_AT_STEP, runtime/faults.py), then it finishes.
While it runs, Prometheus (scrape and rule evaluation every second) finds its workers through
the monitor's file-based discovery; then every dashboard panel's query and every alert rule's
expression runs through the HTTP API, the stall trips AlchemistJobStalled for real, the
finished run's targets are dropped, TensorBoard's reader finds rank 0's scalars and
hyper-parameters, and SIGTERM to the monitor stops Prometheus and TensorBoard.

The monitor loads a generated copy of monitoring/rules/alchemist.rules.yaml in which only
every `for:` is shortened to 1s: the shipped durations are minutes. Expressions are the
shipped ones, unchanged (asserted below).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from alchemist_jobs.metric_contract import BY_NAME
from monitoring import rules as rules_mod
from monitoring.promql import label_values_metric, metric_names

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_RULES = ROOT / "monitoring" / "rules" / "alchemist.rules.yaml"
DASHBOARDS = ROOT / "monitoring" / "dashboards"
STALL_AT, STALL_S, STEPS = 500, 45, 600
HAVE_PROMETHEUS = bool(os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus"))
needs_prometheus = pytest.mark.skipif(
    not HAVE_PROMETHEUS, reason="no prometheus binary (apt-get install -y --no-install-recommends "
                                "prometheus, or set PROMETHEUS_BIN); CI installs it")


class Stack:
    """The monitor, the job, and what the tests learn about them."""

    def __init__(self, home: Path):
        self.home = home
        self.monitor: subprocess.Popen | None = None
        self.state: dict = {}
        self.job: subprocess.Popen | None = None
        self.run_id = ""
        self.eval_time: float | None = None  # a moment of the stall, for the queries

    @property
    def url(self) -> str:
        return self.state["prometheus_url"]

    @property
    def authorization(self) -> str:
        """The monitor's login, read where it says it keeps it (Prometheus and TensorBoard
        answer nothing without it)."""
        return _basic(self.state["username"], Path(self.state["password_file"]).read_text().strip())

    def api(self, path: str, **params) -> dict:
        query = urllib.parse.urlencode(params, doseq=True)
        req = urllib.request.Request(f"{self.url}/api/v1/{path}?{query}",
                                     headers={"Authorization": self.authorization})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:  # 400/422: the expression is invalid
            body = json.load(e)
        return body

    def query(self, expr: str, at: float | None = None) -> list:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        body = self.api("query", **params)
        assert body["status"] == "success", f"{expr!r}: {body.get('errorType')}: {body.get('error')}"
        return body["data"]["result"]


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "ALCHEMIST_HOME": str(home), "PYTHONUNBUFFERED": "1"}


def _wait(what: str, predicate, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    home = tmp_path_factory.mktemp("monitor-home")
    s = Stack(home)
    if HAVE_PROMETHEUS:
        # The shipped rules with every `for:` shortened to 1s and nothing else changed.
        test_rules = home.parent / f"{home.name}-rules"
        test_rules.mkdir()
        doc = rules_mod.with_for(yaml.safe_load(SHIPPED_RULES.read_text()), "1s")
        (test_rules / "alchemist.rules.yaml").write_text(rules_mod.render(doc))
        s.monitor = subprocess.Popen(
            [sys.executable, "-m", "alchemist_jobs", "monitor", "--home", str(home), "--port", "0",
             "--scrape-interval", "1s", "--rules", str(test_rules), "--tensorboard",
             "--tensorboard-port", "0"],
            cwd=ROOT, env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        state_file = home / "monitor" / "monitor.json"

        def started():
            if s.monitor.poll() is not None:
                raise AssertionError(f"alchemist monitor exited: {s.monitor.stdout.read()}")
            return state_file.exists() and json.loads(state_file.read_text())
        s.state = _wait("alchemist monitor to start Prometheus", started, 90)
    overrides = [f"hyper.steps={STEPS}", "checkpoint.every_steps=50"]
    hold = home.parent / f"{home.name}-go"
    if HAVE_PROMETHEUS:
        # The job holds after step 1 until Prometheus has scraped both workers (the fixture
        # then creates `hold`): on a loaded machine it could otherwise reach the stall
        # before the first scrape, and every rate would be zero.
        overrides += [f'env.ALCHEMIST_FAULT_STALL_AT_STEP="{STALL_AT}"',
                      f'env.ALCHEMIST_FAULT_STALL_SECONDS="{STALL_S}"',
                      f"env.ALCHEMIST_FAULT_HOLD_FILE={hold}"]
    s.job = subprocess.Popen(
        [sys.executable, "-m", "alchemist_jobs", "run", "examples/digits.yaml", "--quiet",
         "--home", str(home), *[a for o in overrides for a in ("--set", o)]],
        cwd=ROOT, env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runs = home / "runs"
    s.run_id = _wait("the run directory", lambda: runs.exists() and next(
        (p.name for p in runs.iterdir() if (p / "spec.yaml").exists()), None), 60)
    try:
        if HAVE_PROMETHEUS:
            _wait("Prometheus to scrape both workers at step 1", lambda: len(s.query(
                f'alchemist_steps_total{{run="{s.run_id}"}} >= 1')) == 2, 180)
        hold.touch()
        yield s
    finally:
        for proc in (s.job, s.monitor):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # both stop their children on SIGTERM
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _substitute(expr: str, values: dict[str, str]) -> str:
    """Grafana's variables, as Grafana would fill them for this run."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${name}", values[name])
    # `$1` is label_replace's capture group, not a variable: Grafana leaves `$<name>` as
    # written when no variable has that name, and no variable name here is a number.
    assert not re.search(r"\$(?!\d)", expr), f"unfilled Grafana variable in {expr!r}"
    return expr


def _panels(dashboard: dict):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _needs_data(expr: str) -> bool:
    """A query must return data here when it reads only metrics every built-in CPU worker of a
    sync run exports. Exempt, but still run for validity: GPU metrics (NVML, DCGM: no GPU
    here), parameter-server metrics (this run is sync), Kueue's (no Kueue on the local stack)."""
    bases = set()
    for name in metric_names(expr):
        base = next((b for b in (name, *(name.removesuffix(s) for s in ("_bucket", "_sum", "_count")))
                     if b in BY_NAME), None)
        if base is None:
            return False  # another exporter's metric
        bases.add(base)
    return bool(bases) and all(BY_NAME[b].when == "always" for b in bases)


@needs_prometheus
def test_generated_prometheus_config_passes_promtool(stack):
    out = subprocess.run(["promtool", "check", "config", stack.state["config"]],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_prometheus
def test_test_rules_differ_from_shipped_rules_only_in_for(stack):
    def without_for(doc):
        return [{k: v for k, v in r.items() if k != "for"} for g in doc["groups"] for r in g["rules"]]
    shipped = yaml.safe_load(SHIPPED_RULES.read_text())
    copy = yaml.safe_load(Path(stack.state["rules"]).parent.joinpath("alchemist.rules.yaml").read_text())
    assert without_for(copy) == without_for(shipped)
    loaded = {r["name"]: r for g in stack.api("rules")["data"]["groups"] for r in g["rules"]}
    assert set(loaded) == {r["alert"] for r in without_for(shipped)}
    assert {r["duration"] for r in loaded.values()} == {1}


@needs_prometheus
def test_dashboards_and_rules_run_against_the_scraped_job(stack):
    run = stack.run_id
    # Both workers found through file-based discovery, with the contract's labels.
    up = _wait("Prometheus to scrape both workers", lambda: len(stack.query(
        f'up{{run="{run}"}} == 1')) == 2 and stack.query(f'up{{run="{run}"}} == 1'), 90)
    assert {r["metric"]["rank"] for r in up} == {"0", "1"}
    assert {r["metric"]["job"] for r in up} == {"digits"}
    assert {r["metric"]["algorithm"] for r in up} == {"sync"}

    # Wait for the stall: progress reached step STALL_AT and stopped a few seconds ago. (Right
    # after the fixture releases the hold at step 1, the newest scrape still shows the held
    # job, whose last step is also seconds old: that is not the stall.)
    def stalled():
        reached = stack.query(f'max(alchemist_steps_total{{run="{run}"}}) >= {STALL_AT}')
        r = stack.query(f'time() - max(alchemist_last_step_timestamp_seconds{{run="{run}"}} > 0)')
        return reached and r and float(r[0]["value"][1]) > 3 and float(r[0]["value"][0])
    stack.eval_time = at = _wait("the injected stall", stalled, 120)
    steps = stack.query(f'alchemist_steps_total{{run="{run}"}}', at)
    assert sorted(float(r["value"][1]) for r in steps) == [STALL_AT, STALL_AT]
    # Prometheus saw the run while it was still stepping (else rates would all be zero).
    first = stack.query(f'min_over_time(alchemist_steps_total{{run="{run}"}}[5m])', at)
    assert first and max(float(r["value"][1]) for r in first) < STALL_AT, first

    values = {"__rate_interval": "1m", "job": "digits", "run": run, "rank": ".*", "host": ".*",
              "cluster_queue": ".*"}
    checked = with_data = 0
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        must_have_data = path.stem in ("training-overview", "job-drilldown")
        for var in board["templating"]["list"]:
            if var["type"] != "query":
                continue
            selector = _substitute(label_values_metric(var["query"]), values)
            body = stack.api(f"label/{var['name']}/values", **{"match[]": selector})
            assert body["status"] == "success", f"{path.name} variable {var['name']}: {body}"
            if must_have_data:
                want = {"job": "digits", "run": run, "rank": "1"}[var["name"]]
                assert want in body["data"], f"{path.name} variable {var['name']}: {body['data']}"
        for panel in _panels(board):
            for target in panel.get("targets", []):
                expr = _substitute(target["expr"], values)
                result = stack.query(expr, at)  # asserts the expression is valid
                checked += 1
                if must_have_data and _needs_data(target["expr"]):
                    finite = [r for r in result if math.isfinite(float(r["value"][1]))]
                    assert finite, f"{path.name} panel {panel['title']!r}: no data for {expr}"
                    with_data += 1
    assert checked >= 60 and with_data >= 40, (checked, with_data)

    for rule in (r for g in yaml.safe_load(SHIPPED_RULES.read_text())["groups"] for r in g["rules"]):
        stack.query(rule["expr"], at)


@needs_prometheus
def test_the_stall_fires_the_stalled_alert(stack):
    run = stack.run_id
    firing = f'ALERTS{{alertname="AlchemistJobStalled", alertstate="firing", run="{run}"}}'
    fired = _wait("AlchemistJobStalled to fire", lambda: stack.query(f"max_over_time({firing}[10m])"),
                  120, every=1)
    assert fired[0]["metric"]["job"] == "digits" and fired[0]["metric"]["severity"] == "critical"
    # It fired because of the stall, not before: the first firing evaluation came at least
    # STALL_IDLE_S after the last step.
    now = time.time()
    series = stack.api("query_range", query=firing, start=now - 600, end=now, step=1)
    first = min(float(t) for t, _ in series["data"]["result"][0]["values"])
    last_step = float(stack.query(
        f'max(alchemist_last_step_timestamp_seconds{{run="{run}"}})', first)[0]["value"][1])
    assert first - last_step >= rules_mod.STALL_IDLE_S
    # No other alert fired on this healthy-but-for-the-stall run.
    others = stack.query(f'max_over_time(ALERTS{{alertstate="firing", run="{run}", '
                         f'alertname!="AlchemistJobStalled"}}[10m])')
    assert others == [], others


def test_job_finishes_and_its_targets_are_dropped(stack):
    out, _ = stack.job.communicate(timeout=240)
    assert stack.job.returncode == 0, out
    assert "succeeded" in out
    if HAVE_PROMETHEUS:
        targets = Path(stack.state["targets_file"])
        _wait("the finished run's targets to be dropped",
              lambda: stack.run_id not in targets.read_text(), 15)


def test_tensorboard_has_rank0_scalars_and_hparams(stack):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    if stack.job.poll() is None:
        stack.job.communicate(timeout=240)
    tb_dir = stack.home / "runs" / stack.run_id / "tensorboard"
    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    scalars = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/samples_per_s", "test/accuracy",
            "hparam/test_accuracy", "hparam/final_loss"} <= scalars, scalars
    loss = [e.value for e in acc.Scalars("train/loss")]
    assert len(loss) >= 2 and all(math.isfinite(x) for x in loss) and loss[-1] < loss[0]
    assert acc.Scalars("train/loss")[-1].step == STEPS
    assert acc.Scalars("test/accuracy")[-1].value > 0.8
    assert all(e.value == pytest.approx(0.05) for e in acc.Scalars("train/lr"))
    assert all(e.value > 0 for e in acc.Scalars("train/samples_per_s"))

    content = acc.PluginTagToContent("hparams")
    infos = [plugin_data_pb2.HParamsPluginData.FromString(b) for b in content.values()]
    start = next(i.session_start_info for i in infos if i.HasField("session_start_info"))
    hp = {k: (v.string_value or v.number_value) for k, v in start.hparams.items()}
    assert hp["algorithm"] == "sync" and hp["world_size"] == 2 and hp["batch_size"] == 32
    assert hp["lr"] == pytest.approx(0.05) and hp["global_batch"] == 64
    experiment = next(i.experiment for i in infos if i.HasField("experiment"))
    assert {m.name.tag for m in experiment.metric_infos} == {"hparam/test_accuracy",
                                                             "hparam/final_loss"}


@needs_prometheus
def test_sigterm_stops_prometheus_and_tensorboard(stack):
    tb = stack.state["tensorboard_url"]
    _wait("TensorBoard to answer", lambda: _answers(tb, stack.authorization), 60)
    children = [stack.state["prometheus_pid"], stack.state["tensorboard_pid"]]
    stack.monitor.send_signal(signal.SIGTERM)
    stack.monitor.wait(timeout=30)
    assert stack.monitor.returncode == 0, stack.monitor.stdout.read()
    assert not any(_alive(pid) for pid in children)
    assert not (stack.home / "monitor" / "monitor.json").exists()


def _basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def _answers(url: str, authorization: str) -> bool:
    try:
        req = urllib.request.Request(url, headers={"Authorization": authorization})
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purposes
        return f.read().split(")")[-1].split()[0] != "Z"
