"""The names a Helm chart derives from its release (a `helm create` fullname helper), for the releases a rendered platform installs.

What is modelled, with sources:
- the release name: pulumi-kubernetes' helm.v4.Chart renders with `name`, or the Pulumi
  resource's own name when `name` is unset (pulumi/pulumi-kubernetes
  provider/pkg/provider/helm/v4/chart.go `Construct`: `if chartArgs.Name == "" { chartArgs.Name
  = name }`; Apache-2.0);
- `<chart>.fullname` and `<chart>.name` as `helm create` writes them (helm/helm
  pkg/chartutil/create.go): `fullnameOverride` if set; else, with name = `nameOverride` or the
  chart's name, the release name when it contains that name, else `<release>-<name>`; each cut
  to 63 characters and one trailing `-` trimmed (sprig `trunc`, `trimSuffix`, `contains`).
  tests/fixtures/vendor_chart_names.py refuses a chart whose helpers are not this form;
- which templates render: the `if`s around each object, evaluated over the chart's defaults
  and our values by tests/unit/infra/chart_data.py (an unknown condition counts as true).

The object names and references per chart version are vendored in tests/fixtures/chart_names/.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from chart_data import chart_data, chart_name, evaluate, flatten, lookup

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chart_names"
MAX = 63  # "some Kubernetes name fields are limited to this (by the DNS naming spec)"


@cache
def names_data(file: str) -> dict[str, Any]:
    """A vendored file of tests/fixtures/chart_names/ (`kueue-0.13.4.json`)."""
    return json.loads((FIXTURES / file).read_text())


def _cut(s: str) -> str:
    s = s[:MAX]
    return s[:-1] if s.endswith("-") else s


def name(chart: str, values: dict[str, Any]) -> str:
    return _cut(values.get("nameOverride") or chart)


def fullname(chart: str, release: str, values: dict[str, Any]) -> str:
    if values.get("fullnameOverride"):
        return _cut(values["fullnameOverride"])
    base = values.get("nameOverride") or chart
    return _cut(release if base in release else f"{release}-{base}")


@dataclass
class Release:
    """One chart as helm renders it: its release name and namespace, our values and the chart's."""

    chart: str
    version: str
    release: str
    namespace: str
    values: dict[str, Any]

    @property
    def data(self) -> dict[str, Any]:
        return chart_data(self.chart, self.version)

    def value(self, path: str) -> Any:
        return lookup(self.data, flatten(self.values), path)

    @property
    def fields(self) -> dict[str, str]:
        over = {k: self.value(k) for k in ("nameOverride", "fullnameOverride")}
        return {"fullname": fullname(self.chart, self.release, over), "name": name(self.chart, over),
                "release": self.release, "namespace": self.namespace}  # fmt: skip

    def fill(self, pattern: str) -> str:
        return pattern.format(**self.fields)

    def renders(self, entry: dict[str, Any]) -> bool:
        return evaluate(entry.get("if"), self.data, flatten(self.values)) is not False

    def objects(self, names: dict[str, Any]) -> set[tuple[str, str]]:
        """(kind, name) of every object the chart renders with our values."""
        return {(o["kind"], self.fill(o["name"])) for o in names["objects"] if self.renders(o)}

    def references(self, names: dict[str, Any], kind: str, key: str) -> set[str]:
        """The names objects of `kind` refer to under `key` (a pod's secretName...), as rendered."""
        return {self.fill(r["value"]) for r in names["references"]
                if r["kind"] == kind and r["key"] == key and self.renders(r)}  # fmt: skip

    def labels(self, names: dict[str, Any], helper: str) -> dict[str, str]:
        return {k: self.fill(v) for k, v in names["labels"][helper].items()}


def releases(render: dict[str, Any], chart: str) -> list[Release]:
    """Every helm.v4.Chart of a rendered stack that installs `chart`."""
    out = []
    for r in render["resources"]:
        inputs = r.get("inputs") or {}
        if r["type"] == "kubernetes:helm.sh/v4:Chart" and chart_name(str(inputs.get("chart"))) == chart:
            out.append(Release(chart, inputs["version"], inputs.get("name") or r["name"],
                               inputs.get("namespace") or "default", inputs.get("values") or {}))  # fmt: skip
    return out
