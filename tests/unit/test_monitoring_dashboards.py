"""Dashboards and rules as code: the committed files are what the code generates, they load as
Grafana dashboards through the SDK's own models, and they name only contract metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from alchemist_jobs.metric_contract import BY_NAME, METRICS, known_series
from monitoring import dashboards, generate, rules
from monitoring.promql import label_values_metric, metric_names

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "monitoring" / "dashboards").glob("*.json"))
RULES = ROOT / "monitoring" / "rules" / rules.FILE_NAME


def _panels(board: dict):
    for p in board["panels"]:
        yield p
        yield from p.get("panels", [])


def _exprs(board: dict):
    for p in _panels(board):
        for t in p.get("targets", []):
            yield p, t["expr"]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            yield var, label_values_metric(var["query"])


def _rule_exprs():
    return [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_generated_files_are_up_to_date_with_the_code():
    assert generate.stale() == [], "run `python -m monitoring.generate` and commit the result"
    assert [p.name for p in FILES] == sorted(f"{n}.json" for n in dashboards.DASHBOARDS)


def test_an_edited_or_orphaned_file_is_reported_as_stale(tmp_path):
    for path, text in generate.expected(tmp_path).items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert generate.stale(tmp_path) == []
    (tmp_path / "dashboards" / "queue.json").write_text("{}")
    (tmp_path / "dashboards" / "old.json").write_text("{}")
    (tmp_path / "rules" / rules.FILE_NAME).unlink()
    assert generate.stale(tmp_path) == ["dashboards/queue.json", f"rules/{rules.FILE_NAME}",
                                        "dashboards/old.json"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_dashboard_round_trips_through_the_sdk_models(path):
    plugins.register_default_plugins()  # so targets decode as Prometheus queries, panels by type
    raw = json.loads(path.read_text())
    model = dm.Dashboard.from_json(raw)
    again = json.loads(json.dumps(model, cls=JSONEncoder))
    assert again == raw  # nothing the models do not know, nothing lost
    assert raw["uid"].startswith("alchemist-") and raw["schemaVersion"] >= 41
    ids = [p["id"] for p in _panels(raw)]
    assert len(ids) == len(set(ids)) and 0 not in ids
    for panel in model.panels:
        if panel.type_val == "row":
            continue
        assert panel.datasource.uid == "${datasource}"
        assert panel.targets and all(isinstance(t, pm.Dataquery) for t in panel.targets)
        ref_ids = [t.ref_id for t in panel.targets]
        assert len(set(ref_ids)) == len(ref_ids) and all(ref_ids)


def test_every_metric_a_dashboard_or_rule_names_is_in_the_contract():
    used: set[str] = set()
    for path in FILES:
        for where, expr in _exprs(json.loads(path.read_text())):
            names = metric_names(expr)
            assert names, f"{path.name} {where.get('title') or where.get('name')}: no metric in {expr}"
            assert names <= known_series(), f"{path.name}: {sorted(names - known_series())} in {expr}"
            used |= names
    for expr in _rule_exprs():
        names = metric_names(expr)
        assert names and names <= known_series(), f"{sorted(names - known_series())} in {expr}"
        used |= names
    # And every metric workers export is on some dashboard.
    bases = {n for n in BY_NAME if any(s in used for s in BY_NAME[n].series)}
    assert bases == {m.name for m in METRICS}


def test_metric_names_reads_promql_like_prometheus_does():
    assert metric_names('sum by (job, run) (rate(alchemist_steps_total{job=~"$job"}[$__rate_interval]))') \
        == {"alchemist_steps_total"}
    assert metric_names("x_total / on (job) group_left y > 1e3 and z offset 5m") == {"x_total", "y", "z"}
    assert metric_names('histogram_quantile(0.9, sum by (le) (rate(a_bucket{l="by (x)"}[5m:1m])))') \
        == {"a_bucket"}
    assert metric_names("time() - max(alchemist_loss > 0) != +Inf") == {"alchemist_loss"}


def test_overview_and_drilldown_have_what_the_issue_asks_for():
    boards = {p.stem: json.loads(p.read_text()) for p in FILES}
    titles = {p["title"] for p in _panels(boards["training-overview"])}
    assert {"Training loss", "Samples/s, total", "Samples/s per worker",
            "Step time split: compute, communication, data", "Restarts",
            "Checkpoint write time"} <= titles
    split = next(p for p in _panels(boards["training-overview"]) if p["title"].startswith("Step time split"))
    assert [metric_names(t["expr"]) - {"alchemist_steps_total"} for t in split["targets"]] == [
        {"alchemist_compute_seconds_total"}, {"alchemist_communication_seconds_total"},
        {"alchemist_data_seconds_total"}]
    drill = boards["job-drilldown"]
    assert [v["name"] for v in drill["templating"]["list"]] == ["datasource", "job", "run", "rank"]
    for panel, expr in _exprs(drill):
        if "title" in panel:  # every panel query is narrowed by the variables
            assert all(f'{k}=~"${k}"' in expr for k in ("job", "run", "rank")), expr
    gpu = {n for _, e in _exprs(boards["gpus"]) for n in metric_names(e)}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
            "alchemist_gpu_utilization_ratio", "alchemist_gpu_memory_used_bytes",
            "alchemist_gpu_power_watts"} <= gpu
    queue = {n for _, e in _exprs(boards["queue"]) for n in metric_names(e)}
    assert {"kueue_pending_workloads", "kueue_admitted_active_workloads"} <= queue


def test_rules_file_has_every_alert_the_issue_asks_for_and_with_for_changes_only_for():
    doc = yaml.safe_load(RULES.read_text())
    assert set(doc) == {"groups"}  # a plain rule file: the PrometheusRule spec is this document
    names = {r["alert"] for g in doc["groups"] for r in g["rules"]}
    assert {"AlchemistJobStalled", "AlchemistLossNaN", "AlchemistLossExploding", "AlchemistGPUIdle",
            "AlchemistRestartLoop", "AlchemistStalenessHigh", "AlchemistStragglerThroughput",
            "AlchemistStragglerCompute"} == names
    for r in (r for g in doc["groups"] for r in g["rules"]):
        assert r["for"].endswith("m") and r["labels"]["severity"] in ("critical", "warning")
        assert r["annotations"]["summary"] and r["annotations"]["description"]
    short = rules.with_for(doc, "1s")
    assert {r["for"] for g in short["groups"] for r in g["rules"]} == {"1s"}
    strip = lambda d: [{k: v for k, v in r.items() if k != "for"} for g in d["groups"] for r in g["rules"]]  # noqa: E731
    assert strip(short) == strip(doc) and short != doc


def test_queries_reject_a_metric_used_the_wrong_way():
    from monitoring.promql import quantile, rate, v

    with pytest.raises(ValueError):
        rate(BY_NAME["alchemist_loss"])  # a gauge
    with pytest.raises(ValueError):
        v(BY_NAME["alchemist_loss"], "bucket")
    with pytest.raises(ValueError):
        quantile(0.5, BY_NAME["alchemist_steps_total"], "job")


def test_the_user_docs_cover_every_metric_and_alert():
    docs = (ROOT / "docs" / "monitoring.md").read_text()
    missing = [m.name for m in METRICS if f"`{m.name}`" not in docs]
    missing += [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
                if f"`{r['alert']}`" not in docs]
    assert missing == [], f"docs/monitoring.md does not describe {missing}"


def test_dashboards_are_generated_with_the_sdk_flavour_of_the_deployed_grafana():
    from importlib.metadata import version

    # `1769699379!11.6.0`: the part after `!` is the Grafana version (the stacks deploy 11.6).
    assert version("grafana_foundation_sdk").split("!")[-1].startswith("11.6.")
    assert {json.loads(p.read_text())["schemaVersion"] for p in FILES} == {41}
