"""The admission policies refuse what a submitter must not create, and admit the job library's objects.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_admission.py`."""

from __future__ import annotations

import copy

import pytest
from test_infra_admission import admit, pod_spec, session_pod

from infra.admission import (
    QUEUE_LABEL,
    validating_policy,
)
from infra.labels import JOB_SECRET_PREFIX, RUN_LABEL, TEAM_LABEL
from tests.crd_schemas import validate_custom


def jobset(name: str = "train-abc", run: str = "train-abc", **spec) -> dict:
    template = {"metadata": {"labels": {RUN_LABEL: run, "app.kubernetes.io/managed-by": "alchemist"}},
                "spec": {**pod_spec(**spec), "restartPolicy": "Never"}}  # fmt: skip
    obj = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": "research", "labels": {RUN_LABEL: run, QUEUE_LABEL: "research"}},
        "spec": {
            "failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
                "parallelism": 2, "completions": 2, "backoffLimit": 0, "template": template}}}],
        },
    }  # fmt: skip
    validate_custom(obj)
    return obj


def test_a_jobset_of_its_own_run_is_admitted():
    assert admit(jobset()) == []
    assert admit(jobset(name="r-0123abc", run="0123abc")) == []  # names that must start with a letter


@pytest.mark.parametrize("spec,message", [
    ({"serviceAccountName": "ci-deployer"}, "pods run as the ServiceAccount alchemist-job (or default), no other"),
    ({"volumes": [{"name": "h", "hostPath": {"path": "/var/run/docker.sock"}}]},
     "volumes may only be persistentVolumeClaim, configMap, secret, emptyDir, projected, downwardAPI "
     "(no nfs, hostPath, csi or ephemeral)"),
    ({"volumes": [{"name": "n", "nfs": {"server": "nfs.lab", "path": "/"}}]},
     "volumes may only be persistentVolumeClaim, configMap, secret, emptyDir, projected, downwardAPI "
     "(no nfs, hostPath, csi or ephemeral)"),
    ({"nodeName": "gpu-1"}, "spec.nodeName may not be set: pods are placed by the scheduler after Kueue admits them"),
    ({"tolerations": [{"operator": "Exists"}]},
     "tolerations may name only the taints nvidia.com/gpu, node.kubernetes.io/not-ready, "
     "node.kubernetes.io/unreachable (a toleration without a key tolerates every taint)"),
    ({"securityContext": {"runAsNonRoot": True, "runAsUser": 1001, "runAsGroup": 1000}},
     "spec.securityContext must set runAsUser 1000, runAsGroup 1000 and runAsNonRoot: true, with fsGroup and "
     "supplementalGroups only 1000 (the team's identity, namespace labels alchemist.io/uid/alchemist.io/gid)"),
    ({"hostNetwork": True}, "hostNetwork, hostPID and hostIPC are not allowed"),
    ({"hostPID": True}, "hostNetwork, hostPID and hostIPC are not allowed"),
    ({"containers": [{"name": "w", "image": "x", "securityContext": {"privileged": True}}]},
     "privileged containers are not allowed"),
    ({"initContainers": [{"name": "i", "image": "x", "securityContext": {"privileged": True}}],
      "containers": [{"name": "w", "image": "x"}]}, "privileged containers are not allowed"),
    ({"volumes": [{"name": "s", "secret": {"secretName": "grafana-admin"}}]},
     f"only Secrets named {JOB_SECRET_PREFIX}* may be mounted"),
    ({"volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": "registry-push"}}]}}]},
     f"only Secrets named {JOB_SECRET_PREFIX}* may be mounted"),
    ({"containers": [{"name": "w", "image": "x", "env": [
        {"name": "T", "valueFrom": {"secretKeyRef": {"name": "db-password", "key": "p"}}}]}]},
     f"only Secrets named {JOB_SECRET_PREFIX}* may be read into the environment"),
    ({"containers": [{"name": "w", "image": "x", "envFrom": [{"secretRef": {"name": "db-password"}}]}]},
     f"only Secrets named {JOB_SECRET_PREFIX}* may be read into the environment"),
])  # fmt: skip
def test_what_a_submitted_pod_may_not_be(spec, message):
    assert admit(session_pod(**spec)) == [message]
    # the same pod spec in a JobSet's template is refused the same way
    assert admit(jobset(**spec)) == [message]


def test_the_run_label_cannot_be_borrowed():
    """A pod carrying another run's label would be admitted by that run's NetworkPolicy."""
    assert admit(session_pod(labels={RUN_LABEL: "train-victim"})) == [
        f"a pod created directly may not carry the run label {RUN_LABEL}"
    ]
    assert admit(jobset(name="evil", run="train-victim")) == [
        f"pod template label {RUN_LABEL} must be this object's own run (its name)"
    ]


def test_a_bad_template_in_any_replicated_job_is_refused():
    obj = jobset()
    second = copy.deepcopy(obj["spec"]["replicatedJobs"][0])
    second["name"] = "ps"
    second["template"]["spec"]["template"]["spec"]["hostNetwork"] = True
    obj["spec"]["replicatedJobs"].append(second)
    validate_custom(obj)
    assert admit(obj) == ["hostNetwork, hostPID and hostIPC are not allowed"]


def test_the_platform_renders_the_policies_bound_to_team_namespaces(renders):
    r = renders["dev"]
    policies = {x["inputs"]["metadata"]["name"]: x["inputs"] for x in r["resources"]
                if x["type"] == "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"}  # fmt: skip
    bindings = {x["inputs"]["spec"]["policyName"] for x in r["resources"]
                if x["type"] == "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"}  # fmt: skip
    assert (
        set(policies)
        == bindings
        == {
            "alchemist-submitted-pods",
            "alchemist-submitted-jobs",
            "alchemist-submitted-jobsets",
            "alchemist-submitted-networkpolicies",
            "alchemist-submitted-connections",
        }
    )
    assert policies["alchemist-submitted-pods"]["spec"] == validating_policy("Pod")["spec"]
    team_ns = [x["inputs"]["metadata"]["labels"] for x in r["resources"] if x["type"] == "kubernetes:core/v1:Namespace"
               and x["inputs"]["metadata"]["name"] in ("research", "applied")]  # fmt: skip
    assert len(team_ns) == 2 and all(TEAM_LABEL in labels for labels in team_ns)
