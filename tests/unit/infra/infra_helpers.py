"""Helpers of the infra tests: render stacks under Pulumi's mocks, one subprocess per stack (mocks are process-wide).

The only thing faked is the far edge: `infra/render.py` stands in for the Pulumi engine and
the cloud providers (it answers registrations with ids and computed outputs). The program
itself runs for real. Renders are cached for the session and run two at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
STACKS = REPO / "stacks"
SHIPPED = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in STACKS.glob("Pulumi.*.yaml"))
MONITORING = REPO / "monitoring"


def render(stack_file: Path, sets: dict[str, Any] | None = None, secrets: dict[str, str] | None = None,
           monitoring_dir: Path | None = None, stack: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Run `python -m infra.render` and return its JSON, plus the process's stdout/stderr text."""
    cmd = [sys.executable, "-m", "infra.render", str(stack_file)]
    for key, value in (sets or {}).items():
        cmd += ["--set", f"{key}={json.dumps(value)}"]
    for key, value in (secrets or {}).items():
        cmd += ["--secret", f"{key}={value}"]
    if monitoring_dir is not None:
        cmd += ["--monitoring-dir", str(monitoring_dir)]
    if stack:
        cmd += ["--stack", stack]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.stdout, f"render produced nothing: {proc.stderr[-2000:]}"
    result = json.loads(proc.stdout)
    result["_returncode"], result["_stdout"], result["_stderr"] = proc.returncode, proc.stdout, proc.stderr
    return result


def render_many(jobs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Render several stacks in one `python -m infra.render --jobs` process (one fork per stack)."""
    names = list(jobs)
    spec = []
    for name in names:
        job = {k: (str(v) if isinstance(v, Path) else v) for k, v in jobs[name].items()}
        spec.append(job)
    proc = subprocess.run([sys.executable, "-m", "infra.render", "--jobs", "/dev/stdin"], input=json.dumps(spec),
                          cwd=REPO, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    out = {}
    for name, result in zip(names, results):
        # what this stack's render printed, and everything the batch logged
        result["_stdout"], result["_stderr"] = json.dumps(result), proc.stderr
        out[name] = result
    return out


def resources(result: dict[str, Any], type_: str | None = None) -> list[dict[str, Any]]:
    return [r for r in result["resources"] if type_ is None or r["type"] == type_]


def one(result: dict[str, Any], type_: str, name: str) -> dict[str, Any]:
    found = [r for r in result["resources"] if r["type"] == type_ and r["name"] == name]
    assert len(found) == 1, f"expected one {type_} {name}, found {len(found)}"
    return found[0]


def stack_config(name: str) -> dict[str, Any]:
    return yaml.safe_load((STACKS / f"Pulumi.{name}.yaml").read_text())["config"]


# What a deployer sets before the first preview (`pulumi config set --path
# 'alchemist:aws.publicAccessCidrs[0]' <their egress>/32`): the shipped AWS stacks leave it out.
DEPLOYER_CIDR = "100.20.30.40/32"
DEPLOYER_SETS = {"alchemist:aws.publicAccessCidrs": [DEPLOYER_CIDR]}


# The digest of the k3s installer the deployer reviewed (`alchemist:onprem.k3sInstallerSha256`):
# any 64 hex digits here, the mocks never download it.
INSTALLER_SHA256 = "ab" * 32


def existing_stack_config() -> dict[str, Any]:
    """The on-prem lab as an `existing` cluster: same lab, a kubeconfig instead of SSH."""
    config = stack_config("onprem-lab")
    config.pop("alchemist:onprem")
    config["alchemist:provider"] = "existing"
    config["alchemist:existing"] = {"gpusPerNode": 8, "gpuDriver": "host", "containerToolkit": "operator"}
    config["alchemist:images"] = {"registry": "registry.lab.internal:5000/alchemist", "registryUser": "ci"}
    return config


def deployer_sets(name: str) -> dict[str, Any]:
    """The keys a deployer adds to a shipped stack before `pulumi up`: the API CIDRs on AWS, the
    reviewed k3s installer's digest on-prem."""
    if name.startswith("aws-"):
        return dict(DEPLOYER_SETS)
    if name.startswith("onprem"):
        return {"alchemist:onprem.k3sInstallerSha256": INSTALLER_SHA256}
    return {}


SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAAdGVzdC1vbmx5LXNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----"
# The deployer's kubeconfig of an `existing` cluster: its cluster, and a user whose token must
# never reach the stack output (jobs get a team ServiceAccount's token instead).
KUBECONFIG = (
    "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
    "clusters:\n- name: lab\n  cluster:\n    server: https://k8s.lab.internal:6443\n"
    "    certificate-authority-data: bGFiLWNh\n"
    "contexts:\n- name: lab\n  context:\n    cluster: lab\n    user: admin\n"
    "users:\n- name: admin\n  user:\n    token: kubeconfig-token-that-must-never-leak-4711\n"
)
REGISTRY_PASSWORD = "registry-password-that-must-never-leak-0815"
