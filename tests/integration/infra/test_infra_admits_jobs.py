"""Across the contract: the platform's admission policies admit exactly what the job library
really creates. Every object the Kubernetes backend submits for every example spec (and an
interactive session's pod) is judged by the policies' real CEL expressions, evaluated with
the admission semantics that tests/unit/infra/test_infra_admission.py cites (kubernetes
v1.30 validating admission policy plugin). A per-run object the platform would refuse makes
every cluster run fail at submit; the schema-only tests cannot see that."""

from __future__ import annotations

from pathlib import Path

import pytest
from infra_helpers import SHIPPED
from test_infra_admission import admit

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.kubernetes.interactive import session_pod
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec
from infra.admission import POD_SPECS

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))
RUN = "contract-20260101-000000-0001"


@pytest.mark.parametrize("name", SHIPPED[:1])
def test_every_object_a_run_submits_is_admitted(renders, name):
    out = StackOutput.parse(renders[name]["outputs"]["alchemist"], f"stack {name}")
    judged = set()
    for spec_path in EXAMPLES:
        spec = load_spec(spec_path)
        for obj in KubernetesScheduler(out).dryrun(spec, spec_path.parent, run_id=RUN).manifests:
            if obj["kind"] not in (*POD_SPECS, "NetworkPolicy"):
                continue  # no policy judges it
            denied = admit(obj, namespace=out.namespace)
            if denied is not None:
                judged.add(obj["kind"])
                assert denied == [], f"{spec_path.name}: {obj['kind']} {obj['metadata']['name']}: {denied}"
    assert {"JobSet", "NetworkPolicy"} <= judged  # the policies did look at the run's objects


@pytest.mark.parametrize("name", SHIPPED[:1])
def test_an_interactive_session_pod_is_admitted(renders, name):
    out = StackOutput.parse(renders[name]["outputs"]["alchemist"], f"stack {name}")
    pod = session_pod(out, "alchemist-session-alice")
    assert admit(pod, namespace=out.namespace) == []
