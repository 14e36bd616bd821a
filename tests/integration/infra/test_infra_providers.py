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
    assert out.images.train.startswith("registry.lab.test:5000/lab/lab/train@sha256:")
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


def test_the_test_providers_own_registry_object_store_and_file_server_make_the_stack(tmp_path):
    """The lab's pieces go through the neutral components' interfaces: its repositories hold the
    images, its bucket is the stack's object store (each team's key pair in its namespace, the
    pods' egress to its address), its export is every team's shared FS; nothing outside
    lab_provider.py names it but the one registration line."""
    result = render_lab(tmp_path)
    assert result["error"] is None, result["error"]
    by_type = {}
    for r in resources(result):
        by_type.setdefault(r["type"], []).append(r)
    assert sorted(r["name"] for r in by_type["lab:registry:Repository"]) == ["images-interactive-repo",
                                                                            "images-train-repo"]  # fmt: skip
    assert [r["name"] for r in by_type["lab:storage:Bucket"]] == ["object-store-bucket"]
    assert [r["name"] for r in by_type["lab:storage:Export"]] == ["shared-fs-export"]
    # the images' login is the lab's, secret, and no pull secret (its nodes pull as themselves)
    (login,) = [r for r in resources(result, "command:local:Command") if r["name"] == "images-login"]
    assert login["inputs"]["environment"]["REGISTRY_HOST"] == lab_provider.REGISTRY
    assert "environment.REGISTRY_PASSWORD" in login["secret_inputs"]
    assert lab_provider.REGISTRY_PASSWORD not in json.dumps(result)
    assert not [r for r in resources(result) if r["name"].startswith("registry-") and "Secret" in r["type"]]
    keys = [
        r for r in resources(result, "kubernetes:core/v1:Secret") if r["name"] == "object-store-vision-keys"
    ]
    assert [k["inputs"]["metadata"]["namespace"] for k in keys] == ["vision"]
    pv = next(r for r in resources(result, "kubernetes:core/v1:PersistentVolume")
              if r["inputs"]["spec"]["csi"]["volumeAttributes"].get("subDir") == "teams/vision")  # fmt: skip
    assert pv["inputs"]["spec"]["csi"]["volumeAttributes"]["server"] == lab_provider.FILER
    egress = [rule for r in resources(result, "kubernetes:networking.k8s.io/v1:NetworkPolicy")
              for rule in r["inputs"]["spec"].get("egress") or []
              if any(peer.get("ipBlock", {}).get("cidr") == lab_provider.STORE_ADDRESS for peer in rule.get("to", []))]  # fmt: skip
    assert egress and all(p["port"] == 443 for rule in egress for p in rule["ports"])
    out = StackOutput.parse(
        {**result["outputs"]["alchemist"], "kubeconfig": lab_provider.kubeconfig("vision")}, "lab"
    )
    assert out.object_store is not None
    assert (out.object_store.endpoint, out.object_store.bucket, out.object_store.prefix) == (
        lab_provider.STORE,
        "alchemist-lab",
        "vision/",
    )
    # the one registration line is all the program knows of it
    named = [str(f) for d in ("infra", "alchemist_jobs") for f in (REPO / d).rglob("*.py")
             if "lab_provider" in f.read_text() or "LabProvider" in f.read_text()]  # fmt: skip
    assert named == []
