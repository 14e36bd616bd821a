"""PromQL built from the metric contract's objects, and the reverse: the metrics an expression names.

Dashboards and rules write queries only through these helpers, which take `Metric` objects
(never bare names), so a query cannot name a metric the contract does not declare.
`metric_names` reads the names back out of any expression for the tests' cross-check.
"""

from __future__ import annotations

import re

from alchemist_jobs.metric_contract import ExternalMetric, Metric

AnyMetric = Metric | ExternalMetric

# Grafana's rate window: at least four scrapes, and wider than the panel's step.
RATE_INTERVAL = "$__rate_interval"


def v(m: AnyMetric, part: str = "", f: str = "") -> str:
    """The instant vector of metric `m` (or its histogram `part`: bucket, sum, count), filtered."""
    name = f"{m.name}_{part}" if part else m.name
    if name not in m.series:
        raise ValueError(f"{name} is not a series of {m.name} ({m.type})")
    return f"{name}{{{f}}}" if f else name


def rate(m: AnyMetric, part: str = "", f: str = "", window: str = RATE_INTERVAL) -> str:
    if m.type not in ("counter", "histogram"):
        raise ValueError(f"rate() of {m.name}, a {m.type}: only counters and histograms grow")
    return f"rate({v(m, part, f)}[{window}])"


def dcgm_by_pod(m: AnyMetric, f: str = "") -> str:
    """A DCGM exporter series labelled with the pod and namespace *using* the GPU.

    dcgm-exporter adds `pod`, `namespace`, `container` for the pod holding each GPU
    (NVIDIA/dcgm-exporter internal/pkg/transformation/const.go). Scraped with
    `honorLabels: false` they clash with the exporter pod's own target labels and arrive as
    `exported_pod`/`exported_namespace` (Prometheus: honor_labels); with `honorLabels: true`
    they arrive as is. Either way this yields the job pod in `pod` and `namespace`: an
    `exported_*` label, where present, replaces the exporter's own.
    """
    out = v(m, f=f)
    for label in ("pod", "namespace"):
        out = f'label_replace({out}, "{label}", "$1", "exported_{label}", "(.+)")'
    return out


def by(labels: str, agg: str, expr: str) -> str:
    return f"{agg} by ({labels}) ({expr})"


def quantile(q: float, m: AnyMetric, labels: str, f: str = "", window: str | None = RATE_INTERVAL) -> str:
    """histogram_quantile over `labels`; window None reads the cumulative buckets (whole run)."""
    if m.type != "histogram":
        raise ValueError(f"{m.name} is a {m.type}, not a histogram")
    inner = rate(m, "bucket", f, window) if window else v(m, "bucket", f)
    return f"histogram_quantile({q}, sum by ({labels}, le) ({inner}))"


def per_step(m: Metric, steps: Metric, labels: str, f: str = "", window: str = RATE_INTERVAL) -> str:
    """Seconds (or bytes) of counter `m` per optimizer step, averaged over the window."""
    return f"{by(labels, 'sum', rate(m, '', f, window))} / {by(labels, 'sum', rate(steps, '', f, window))}"


# --- reading names back ------------------------------------------------------------------------

_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
    "atan2",
}
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_LABEL_LISTS = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NUMBERS = re.compile(r"(?<![\w$])[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?(ms|s|m|h|d|w|y)?\b")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects: everything that is not a function, keyword, label
    list, label matcher, range, number, string or Grafana variable."""
    s = _STRINGS.sub(" ", expr)
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers (and ${var})
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges and subqueries
    s = _LABEL_LISTS.sub(" ", s)
    s = re.sub(r"\$\w+", " ", s)  # Grafana variables
    s = _NUMBERS.sub(" ", s)
    names = set()
    for match in _IDENT.finditer(s):
        word = match.group(0)
        rest = s[match.end() :].lstrip()
        if rest.startswith("("):
            continue  # a function or aggregation
        if word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def label_values_metric(query: str) -> str | None:
    """The selector of a Grafana `label_values(selector, label)` variable query."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_]\w*)\s*\)\s*", query)
    return m.group(1) if m else None
