"""Monitoring, the same on every stack: kube-prometheus-stack, dashboards and alert rules from monitoring/, job scraping, a TensorBoard per team."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_kubernetes as kubernetes
import yaml

from infra.config import StackConfigError
from infra.labels import (
    MANAGED_BY,
    METRICS_PORT_SLOTS,
    MONITORING_NAMESPACE,
    MOUNT_PATH,
    PROMETHEUS_RELEASE,
    PROMETHEUS_SELECTOR,
    RUN_LABEL,
    SCRAPE_LABELS,
    SHARED_PVC,
    metrics_port_name,
)
from infra.queueing import kueue_service_monitor_spec
from infra.versions import CHARTS, GRAFANA_IMAGE_TAG

DASHBOARD_LABEL = {"grafana_dashboard": "1"}  # what kube-prometheus-stack's Grafana sidecar loads
PROMETHEUS_URL = f"http://{PROMETHEUS_RELEASE}-prometheus.{MONITORING_NAMESPACE}.svc:9090"
GRAFANA_URL = f"http://{PROMETHEUS_RELEASE}-grafana.{MONITORING_NAMESPACE}.svc:80"
# TensorBoard runs per team and listens on its pod's loopback: this is where it answers
# after `kubectl port-forward -n <team> pod/tensorboard-0 6006`.
TENSORBOARD_URL = "http://127.0.0.1:6006"
TENSORBOARD_LOGDIR = f"{MOUNT_PATH}/runs"  # the team's runs: the PVC root is the team's own subtree
TENSORBOARD_LABELS = {"app.kubernetes.io/name": "tensorboard", "app.kubernetes.io/part-of": "alchemist"}


@dataclass(frozen=True)
class MonitoringFiles:
    """Dashboards (name -> JSON text) and rule files (name -> parsed `groups:` document)."""

    dashboards: dict[str, str]
    rules: dict[str, dict[str, Any]]


def _k8s_name(stem: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")[:50]


def load_monitoring_files(monitoring_dir: Path) -> MonitoringFiles:
    """Read monitoring/dashboards/*.json and monitoring/rules/*.yaml; a bad file is one line."""
    dashboards: dict[str, str] = {}
    for path in sorted((monitoring_dir / "dashboards").glob("*.json")):
        text = path.read_text()
        try:
            json.loads(text)
        except json.JSONDecodeError as e:
            raise StackConfigError(
                str(path), f"line {e.lineno}: {e.msg}", "a Grafana dashboard as JSON"
            ) from None
        if len(text.encode()) > 900_000:
            raise StackConfigError(
                str(path), f"{len(text.encode())} bytes", "under 900 kB (a ConfigMap holds 1 MiB)"
            )
        dashboards[_k8s_name(path.stem)] = text
    rules: dict[str, dict[str, Any]] = {}
    for path in sorted(
        [*(monitoring_dir / "rules").glob("*.yaml"), *(monitoring_dir / "rules").glob("*.yml")]
    ):
        try:
            doc = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            raise StackConfigError(
                str(path), str(e).splitlines()[0], "a Prometheus rule file (YAML)"
            ) from None
        if not isinstance(doc, dict) or set(doc) != {"groups"} or not isinstance(doc["groups"], list):
            keys = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
            raise StackConfigError(str(path), keys, "a Prometheus rule file: only a top-level `groups:` list")
        rules[_k8s_name(path.stem)] = doc
    return MonitoringFiles(dashboards, rules)


def alertmanager_config(receivers: list[dict[str, Any]], route: dict[str, Any] | None) -> dict[str, Any]:
    """Alertmanager's config with the stack's receivers: everything goes to the first receiver
    (or as `route` says); Watchdog, the always-firing liveness alert, still goes nowhere."""
    default_route = {"group_by": ["namespace"], "group_wait": "30s", "group_interval": "5m",
                     "repeat_interval": "12h", "receiver": receivers[0]["name"]}  # fmt: skip
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            **default_route,
            **(route or {}),
            "routes": [
                {"receiver": "null", "matchers": ['alertname = "Watchdog"']},
                *((route or {}).get("routes") or []),
            ],
        },  # fmt: skip
        "receivers": [{"name": "null"}, *receivers],
        "templates": ["/etc/alertmanager/config/*.tmpl"],
    }


def prometheus_stack_values(alerts: Any = None, hidden_control_plane: tuple[str, ...] = ()) -> dict[str, Any]:
    """kube-prometheus-stack values: explicit selectors, Grafana pinned to 11.6, its sidecar on,
    no admission webhook (its certificate comes from a Helm hook, which helm.v4.Chart skips),
    no monitors of control-plane components the provider does not expose (its
    `hidden_control_plane`: each one's ServiceMonitor, Service and alert rules render only while
    `<key>.enabled`, kube-prometheus-stack 75.15.1 templates/exporters/*/servicemonitor.yaml and
    templates/prometheus/rules-1.14/; left on, the `...Down` alerts fire for ever)."""
    selector = {"matchLabels": dict(PROMETHEUS_SELECTOR)}
    values: dict[str, Any] = {
        "fullnameOverride": PROMETHEUS_RELEASE,
        # helm.v4.Chart runs no Helm hooks (pulumi-kubernetes#3284). With the webhook on, the
        # operator mounts the secret `<release>-admission` that only the pre-install hook Job
        # creates, and never starts. Rules are checked by promtool in CI instead.
        "prometheusOperator": {"admissionWebhooks": {"enabled": False}, "tls": {"enabled": False}},
        "grafana": {
            "testFramework": {"enabled": False},  # `helm test` pods: hooks, skipped anyway
            "fullnameOverride": f"{PROMETHEUS_RELEASE}-grafana",
            "image": {"tag": GRAFANA_IMAGE_TAG},
            "admin": {
                "existingSecret": "grafana-admin",
                "userKey": "admin-user",
                "passwordKey": "admin-password",
            },
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": next(iter(DASHBOARD_LABEL)),
                    "labelValue": DASHBOARD_LABEL["grafana_dashboard"],
                    "searchNamespace": MONITORING_NAMESPACE,
                    "folderAnnotation": "grafana_folder",
                    "provider": {"foldersFromFilesStructure": True},
                }
            },  # fmt: skip
        },
        "prometheus": {
            "prometheusSpec": {
                "retention": "15d",
                "serviceMonitorSelector": selector,
                "serviceMonitorNamespaceSelector": {},
                "podMonitorSelector": selector,
                "podMonitorNamespaceSelector": {},
                "ruleSelector": selector,
                "ruleNamespaceSelector": {},
                "storageSpec": {
                    "volumeClaimTemplate": {
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "50Gi"}},
                        }
                    }
                },
            }
        },  # fmt: skip
    }
    for component in hidden_control_plane:
        values[component] = {"enabled": False}
    if alerts is not None and alerts.receivers:
        values["alertmanager"] = {
            "config": alertmanager_config(list(alerts.receivers), alerts.route),
            # Secrets in the monitoring namespace, mounted at /etc/alertmanager/secrets/<name>/
            # for receivers' `*_file` fields (a webhook URL or token never sits in the stack file).
            "alertmanagerSpec": {"secrets": list(alerts.secrets)},
        }
    return values


def pod_monitor_spec(job_namespaces: list[str]) -> dict[str, Any]:
    """Scrape every alchemist job pod's `metrics` port across the team namespaces."""
    return {
        "namespaceSelector": {"matchNames": list(job_namespaces)},
        "selector": {"matchLabels": {**MANAGED_BY, **SCRAPE_LABELS}},
        # One endpoint per worker slot of a pod: local rank r serves on port `metrics[-r]`.
        # honorLabels: workers label every series with `job` = the Alchemist job name (the
        # metric contract); without it Prometheus renames that to `exported_job` and every
        # dashboard's and alert's job filter comes back empty.
        "podMetricsEndpoints": [
            {"port": metrics_port_name(r), "path": "/metrics", "interval": "15s", "honorLabels": True}
            for r in range(METRICS_PORT_SLOTS)
        ],
        "podTargetLabels": [RUN_LABEL],
    }


def tensorboard_statefulset(
    namespace: str,
    image: pulumi.Input[str],
    identity: tuple[int, int] = (1000, 1000),
    pull_secret: str | None = None,
) -> dict[str, Any]:
    """A team's TensorBoard over its own runs, read-only, listening on the pod's loopback only.

    Nothing else in the cluster can connect to it; a teammate reaches it with
    `kubectl port-forward -n <team> pod/tensorboard-0 6006` (the submitter role allows
    port-forward to that one pod). One StatefulSet replica, so the pod's name is fixed. Its
    image is the stack's training image: `pull_secret` is the registry login where one is needed.
    """
    probe = [
        "python3",
        "-c",
        "import urllib.request; urllib.request.urlopen('http://127.0.0.1:6006/', timeout=5)",
    ]
    return {
        "metadata": {"name": "tensorboard", "namespace": namespace, "labels": TENSORBOARD_LABELS},
        "spec": {
            "replicas": 1,
            "serviceName": "tensorboard",
            "selector": {"matchLabels": TENSORBOARD_LABELS},
            "template": {
                "metadata": {"labels": TENSORBOARD_LABELS},
                "spec": {
                    "automountServiceAccountToken": False,
                    **({"imagePullSecrets": [{"name": pull_secret}]} if pull_secret else {}),
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": identity[0],
                        "runAsGroup": identity[1],
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },  # fmt: skip
                    "containers": [
                        {
                            "name": "tensorboard",
                            "image": image,
                            "command": [
                                "tensorboard",
                                "--logdir",
                                TENSORBOARD_LOGDIR,
                                "--host",
                                "127.0.0.1",
                                "--port",
                                "6006",
                            ],
                            "readinessProbe": {
                                "exec": {"command": probe},
                                "periodSeconds": 10,
                                "timeoutSeconds": 8,
                            },
                            "resources": {
                                "requests": {"cpu": "250m", "memory": "1Gi"},
                                "limits": {"memory": "4Gi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [
                                {"name": "shared", "mountPath": MOUNT_PATH, "readOnly": True},
                                {"name": "tmp", "mountPath": "/tmp"},
                            ],
                        }
                    ],  # fmt: skip
                    "volumes": [
                        {
                            "name": "shared",
                            "persistentVolumeClaim": {"claimName": SHARED_PVC, "readOnly": True},
                        },
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }


@dataclass
class MonitoringArgs:
    job_namespaces: list[str]
    monitoring_dir: Path  # holds dashboards/*.json and rules/*.yaml
    tensorboard_image: pulumi.Input[str]
    grafana_admin_password: pulumi.Input[str] | None = None  # secret; generated once when absent
    alerts: Any = None  # infra.config.AlertmanagerConfig; None keeps the chart's (alerts go nowhere)
    depends_on: list[Any] = field(default_factory=list)
    team_depends_on: dict[str, list[Any]] = field(default_factory=dict)  # per team: its namespace and PVC
    # per team: the (uid, gid) owning its subtree (mode 0770): TensorBoard reads it as that team
    team_identities: dict[str, tuple[int, int]] = field(default_factory=dict)
    pull_secret: str | None = None  # the registry login in each team namespace, for TensorBoard's image
    hidden_control_plane: tuple[str, ...] = ()  # the provider's control-plane components out of reach


class Monitoring(pulumi.ComponentResource):
    """kube-prometheus-stack, Grafana dashboards, alert rules, the job PodMonitor, Kueue's
    ServiceMonitor and a TensorBoard per team."""

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:Monitoring", name, None, opts)
        files = load_monitoring_files(args.monitoring_dir)
        child = pulumi.ResourceOptions(parent=self, depends_on=args.depends_on)
        k8s = kubernetes

        self.grafana_secret = self._grafana_secret(name, args, child)
        pin = CHARTS["kube-prometheus-stack"]
        self.chart = k8s.helm.v4.Chart(
            f"{name}-kube-prometheus-stack",
            name=PROMETHEUS_RELEASE,
            chart=pin.chart,
            version=pin.version,
            repository_opts={"repo": pin.repo},
            namespace=MONITORING_NAMESPACE,
            values=prometheus_stack_values(args.alerts, args.hidden_control_plane),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, self.grafana_secret]),
        )
        after_crds = pulumi.ResourceOptions(parent=self, depends_on=[self.chart])

        self.dashboards = [
            k8s.core.v1.ConfigMap(
                f"{name}-dashboard-{stem}",
                metadata={
                    "name": f"alchemist-dashboard-{stem}",
                    "namespace": MONITORING_NAMESPACE,
                    "labels": DASHBOARD_LABEL,
                    "annotations": {"grafana_folder": "Alchemist"},
                },
                data={f"{stem}.json": text},
                opts=child,
            )  # fmt: skip
            for stem, text in files.dashboards.items()
        ]
        self.rules = [
            k8s.apiextensions.CustomResource(
                f"{name}-rules-{stem}",
                api_version="monitoring.coreos.com/v1",
                kind="PrometheusRule",
                metadata={
                    "name": f"alchemist-{stem}",
                    "namespace": MONITORING_NAMESPACE,
                    "labels": dict(PROMETHEUS_SELECTOR),
                },
                spec=doc,
                opts=after_crds,
            )  # fmt: skip
            for stem, doc in files.rules.items()
        ]
        self.pod_monitor, self.kueue_monitor = self._monitors(name, args, after_crds)
        self.tensorboards = {}
        for ns in args.job_namespaces:
            tb = tensorboard_statefulset(
                ns, args.tensorboard_image, args.team_identities.get(ns, (1000, 1000)), args.pull_secret
            )
            self.tensorboards[ns] = k8s.apps.v1.StatefulSet(
                f"{name}-tensorboard-{ns}", metadata=tb["metadata"], spec=tb["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=args.team_depends_on.get(ns, [])),
            )  # fmt: skip
        self.urls = {
            "prometheus_url": PROMETHEUS_URL,
            "grafana_url": GRAFANA_URL,
            "tensorboard_url": TENSORBOARD_URL,
        }
        self.register_outputs({**self.urls, "dashboards": len(self.dashboards), "rules": len(self.rules)})

    def _grafana_secret(self, name: str, args: MonitoringArgs, child: pulumi.ResourceOptions) -> Any:
        """Grafana's admin login: the stack's secret, or a password generated once on the deployer."""
        password = args.grafana_admin_password
        if password is None:
            # Generated once on the deployer and kept (secret) in the stack's state.
            generated = command.local.Command(
                f"{name}-grafana-password",
                create="python3 -c 'import secrets; print(secrets.token_urlsafe(24), end=\"\")'",
                logging=command.local.Logging.NONE,
                opts=pulumi.ResourceOptions(parent=self, additional_secret_outputs=["stdout"]),
            )
            password = generated.stdout
        return kubernetes.core.v1.Secret(
            f"{name}-grafana-admin",
            metadata={"name": "grafana-admin", "namespace": MONITORING_NAMESPACE},
            string_data={"admin-user": "admin", "admin-password": pulumi.Output.secret(password)},
            opts=child,
        )

    def _monitors(
        self, name: str, args: MonitoringArgs, after_crds: pulumi.ResourceOptions
    ) -> tuple[Any, Any]:
        """(the job pods' PodMonitor, Kueue's ServiceMonitor)."""
        pod_monitor = kubernetes.apiextensions.CustomResource(
            f"{name}-podmonitor-jobs",
            api_version="monitoring.coreos.com/v1",
            kind="PodMonitor",
            metadata={"name": "alchemist-jobs", "namespace": MONITORING_NAMESPACE,
                      "labels": dict(PROMETHEUS_SELECTOR)},
            spec=pod_monitor_spec(args.job_namespaces),
            opts=after_crds,
        )  # fmt: skip
        kueue_monitor = kubernetes.apiextensions.CustomResource(
            f"{name}-servicemonitor-kueue",
            api_version="monitoring.coreos.com/v1",
            kind="ServiceMonitor",
            metadata={"name": "alchemist-kueue", "namespace": MONITORING_NAMESPACE,
                      "labels": dict(PROMETHEUS_SELECTOR)},
            spec=kueue_service_monitor_spec(),
            opts=after_crds,
        )  # fmt: skip
        return pod_monitor, kueue_monitor
