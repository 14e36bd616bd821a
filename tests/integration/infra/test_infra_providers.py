"""A new provider is one module plus a stack file: `lab` (lab_provider.py, only in the tests)
deploys under Pulumi's mocks, and the job half parses and authenticates with its output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lab_provider
import yaml
from infra_helpers import REPO, resources

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.kubernetes.auth import credentials
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec

HERE = Path(__file__).resolve().parent
EXAMPLE = REPO / "examples" / "digits.yaml"
RUN = "lab-20260101-000000-0001"
# The program as `infra.render` runs it, with the test's provider registered first.
RENDER = (
    "import sys; sys.path.insert(0, {here!r}); import lab_provider; lab_provider.register(); "
    "from infra.render import main; sys.exit(main(sys.argv[1:]))"
)

LAB_STACK = {
    "alchemist:provider": "lab",
    "alchemist:kubernetesVersion": "1.35",
    "alchemist:sharedFs": {"kind": "nfs", "server": "nfs.lab.test", "share": "/export/alchemist"},
    "alchemist:images": {"registry": "registry.lab.test:5000/alchemist"},
    "alchemist:teams": [{"name": "vision", "quota": {"gpu": 8, "cpu": 64, "memory": "512Gi"}}],
}


def render_lab(tmp_path: Path, *args: str) -> dict:
    stack_file = tmp_path / "Pulumi.lab.yaml"
    stack_file.write_text(yaml.safe_dump({"config": LAB_STACK}))
    proc = subprocess.run(
        [sys.executable, "-c", RENDER.format(here=str(HERE)), str(stack_file), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_a_provider_defined_in_the_tests_makes_a_stack_the_job_half_reaches(tmp_path):
    result = render_lab(tmp_path)
    assert result["error"] is None, result["error"]
    assert [r["name"] for r in resources(result, "alchemist:test:LabCluster")] == ["cluster"]
    # the rest of the platform as on every stack: team namespace, queue, shared FS on NFS
    assert {r["name"] for r in resources(result, "kubernetes:kueue.x-k8s.io/v1beta1:LocalQueue")} == {
        "platform-team-vision-lq"
    }
    assert any(r["name"] == "shared-fs-pvc-vision" for r in resources(result))

    output = result["outputs"]["alchemist"]
    assert (output["kubeconfig"], result["secret_outputs"]) == ("[secret]", ["alchemist.kubeconfig"])
    # what `pulumi stack output --show-secrets` gives in place of the mask
    out = StackOutput.parse({**output, "kubeconfig": lab_provider.kubeconfig("vision")}, "lab outputs")
    assert (out.provider, out.namespace, out.shared_fs.kind, out.gpu.per_node) == ("lab", "vision", "nfs", 4)
    assert out.images.train.startswith("registry.lab.test:5000/alchemist/train@sha256:")
    spec = load_spec(EXAMPLE)
    jobset = next(
        o
        for o in KubernetesScheduler(out).dryrun(spec, EXAMPLE.parent, run_id=RUN).manifests
        if o["kind"] == "JobSet"
    )
    assert jobset["metadata"]["namespace"] == "vision"
    cfg = credentials(out)
    assert cfg.host == "https://api.lab.test:6443"
    assert cfg.api_key["BearerToken"] == f"Bearer {lab_provider.TOKEN}"


def test_the_stack_config_is_checked_against_the_new_providers_rules(tmp_path):
    result = render_lab(tmp_path, "--set", 'alchemist:sharedFs={"kind": "hostpath"}')
    assert result["error"] == (
        "stacks/Pulumi.lab.yaml: alchemist:sharedFs.kind = 'hostpath' is not accepted; "
        "accepted: nfs with provider 'lab'"
    )
    assert result["resources"] == []
