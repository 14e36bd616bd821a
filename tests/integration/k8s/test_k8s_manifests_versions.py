"""Manifests against every supported Kubernetes minor's schema (each loaded, seconds), and a
worker's restart count read through the downward API as the real trainer reads it (imports
torch). Moved from tests/unit/k8s/test_k8s_manifests.py, whose helpers they use."""

from __future__ import annotations

import pytest

from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import SUPPORTED_KUBERNETES, stack
from tests.unit.k8s.conftest import EXAMPLES
from tests.unit.k8s.test_k8s_manifests import RUN, VARIANTS, _render, validate


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES)
def test_valid_on_every_supported_kubernetes_minor(version):
    for variant in VARIANTS.values():
        for obj in _render(stack("aws-us-west-2"), EXAMPLES / "script.yaml", variant):
            validate(obj, f"{version}.0")


def test_workers_learn_their_group_restart_from_jobsets_annotation(fake):
    """JobSet v0.12.0 writes the restart attempt on every pod as label and annotation
    `jobset.sigs.k8s.io/restart-attempt` (jobset_controller.go labelAndAnnotateObject); the
    worker container reads it through the downward API, and the worker's restart count is
    that number (torchrun's own count stays 0: --max-restarts=0)."""
    from alchemist_jobs.environment import RESTART_ATTEMPT
    from alchemist_jobs.runtime.trainer import WorkerPlace

    sched = KubernetesScheduler(stack("dev").output)
    spec = load_spec(EXAMPLES / "digits.yaml", ["nodes=2"])
    sched.schedule(sched.dryrun(spec, EXAMPLES, run_id=RUN))
    pod = fake.add_pod(RUN, 1, attempt=3)
    env = {"TORCHELASTIC_RESTART_COUNT": "0", "RANK": "1"}
    for e in pod["spec"]["containers"][0]["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
            continue
        path = e["valueFrom"]["fieldRef"]["fieldPath"]
        if path == "metadata.name":
            env[e["name"]] = pod["metadata"]["name"]
        else:  # metadata.annotations['<key>'], as the kubelet resolves it
            kind, _, key = path.partition("['")
            assert kind == "metadata.annotations", path
            env[e["name"]] = pod["metadata"]["annotations"][key.rstrip("']")]
    assert env[RESTART_ATTEMPT.name] == "3"
    assert WorkerPlace.from_env(env).restarts == 3
