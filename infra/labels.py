"""Names and labels the platform, monitoring and jobs agree on (the job-facing ones come from the contract)."""

from __future__ import annotations

from alchemist_jobs.contract import (  # noqa: F401  (re-exported for the components)
    JOB_SECRET_PREFIX,
    JOB_SERVICE_ACCOUNT,
    MANAGED_BY_LABEL,
    METRICS_BASE_PORT,
    METRICS_PORT_SLOTS,
    RUN_LABEL,
    metrics_port_name,
)

MANAGED_BY = dict([MANAGED_BY_LABEL])  # {"app.kubernetes.io/managed-by": "alchemist"}
SCRAPE_LABELS = {"alchemist.io/scrape": "true"}  # exported as monitoring.pod_monitor_labels
RUN_LABEL = RUN_LABEL  # re-exported: the PodMonitor copies it onto every series

MONITORING_NAMESPACE = "monitoring"
GPU_OPERATOR_NAMESPACE = "gpu-operator"
KUEUE_NAMESPACE = "kueue-system"
# Kueue's Helm release: its chart names every object `<release>-<suffix>` (the release contains
# the chart's name), and the manager hard-codes `kueue-validating-webhook-configuration` and
# `kueue-mutating-webhook-configuration` (pkg/util/cert/cert.go at v0.13.4), so it must be `kueue`.
KUEUE_RELEASE = "kueue"
JOBSET_NAMESPACE = "jobset-system"
TEAM_LABEL = "alchemist.io/team"  # on every team namespace
# The team's POSIX identity, on its namespace: the admission policy forces every pod a member
# creates there to run as it (a member cannot relabel a namespace: RBAC grants no namespaces).
TEAM_UID_LABEL = "alchemist.io/uid"
TEAM_GID_LABEL = "alchemist.io/gid"
# An interactive session's pod carries this label (alchemist_jobs/kubernetes/interactive.py) and
# is named with this prefix: its NetworkPolicy selects the label, its connections the name.
SESSION_LABEL = "alchemist.io/session"
SESSION_PREFIX = "alchemist-session-"
TENSORBOARD_POD = "tensorboard-0"  # a team's TensorBoard StatefulSet's one pod

# Job pods run as this ServiceAccount (or the namespace's `default`); it has no RBAC and no
# token is mounted. The admission policy refuses any other ServiceAccount (JOB_SERVICE_ACCOUNT,
# named by the contract and imported above).
# The only Secrets a submitter's pod may reference (volumes, env, envFrom): a team admin
# creates them with this prefix (and an interactive session its own token Secret);
# submitters can create and delete Secrets but never read one (JOB_SECRET_PREFIX, above).

# kube-prometheus-stack's release name; its Prometheus selects ServiceMonitors, PodMonitors
# and PrometheusRules carrying this label (set explicitly in the chart values).
PROMETHEUS_RELEASE = "kube-prometheus-stack"
PROMETHEUS_SELECTOR = {"release": PROMETHEUS_RELEASE}

# The shared file system: the same PVC name and mount path on every stack.
SHARED_PVC = "alchemist-shared"
SHARED_STORAGE_CLASS = "alchemist-shared"
MOUNT_PATH = "/shared"

KUEUE_COHORT = "alchemist"
PRIORITY_CLASSES = {
    # name: (value, description)
    "alchemist-interactive": (1000, "Interactive work (notebooks, debugging): admitted and scheduled first."),
    "alchemist-batch": (100, "Batch training jobs: queue behind interactive work, preempted by it."),
}
