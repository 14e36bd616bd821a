"""Every policy passes on every shipped stack and fails on a config that breaks it (and only it)."""

from __future__ import annotations

from alchemist_jobs.contract import MANAGED_BY_LABEL
from infra.policies import JOB_LABEL, POLICIES, Resource, check_no_privileged_job_pods, violations


def test_policies_are_the_five_promised():
    assert [p.name for p in POLICIES] == [
        "storage-encrypted", "imdsv2-on-gpu-nodes", "no-open-endpoints", "team-pod-security", "no-privileged-job-pods",
    ]  # fmt: skip


def _job(privileged: bool, labels: dict[str, str]) -> Resource:
    return Resource("kubernetes:batch/v1:Job", "train-0", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train-0", "namespace": "research"},
        "spec": {"template": {"metadata": {"labels": labels}, "spec": {"containers": [
            {"name": "worker", "image": "x", "securityContext": {"privileged": privileged}}]}}},
    })  # fmt: skip


def test_privileged_job_pods_fail():
    # No stack config creates job pods (the job library does), so this policy is shown on the
    # Job manifest the Kubernetes backend submits: alchemist-labelled, privileged container.
    labels = dict([MANAGED_BY_LABEL])
    assert JOB_LABEL == MANAGED_BY_LABEL
    assert check_no_privileged_job_pods(_job(True, labels)) == [
        "train-0: job pod containers worker must not be privileged"
    ]
    assert check_no_privileged_job_pods(_job(False, labels)) == []
    assert check_no_privileged_job_pods(_job(True, {"app": "not-a-job"})) == []


def test_open_security_group_fails_unless_allowed():
    rule = {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}
    sg = Resource("aws:ec2/securityGroup:SecurityGroup", "bastion", {"ingress": [rule]})
    assert violations([sg]) == [("no-open-endpoints", "bastion: security group opens SSH to 0.0.0.0/0")]
    allowed = Resource(
        sg.type, sg.name, {**sg.props, "tags": {"alchemist.io/open-endpoints": "allowed-by-stack-config"}}
    )
    assert violations([allowed]) == []
    narrow = Resource(sg.type, sg.name, {"ingress": [{**rule, "cidrBlocks": ["10.0.0.0/8"]}]})
    assert violations([narrow]) == []
