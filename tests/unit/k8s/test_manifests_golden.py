"""The manifests of every example spec on every stack, compared with a golden snapshot.

The snapshot (tests/unit/k8s/golden/<stack>.json) was written by this file's own generator
from the manifest builder as it was before the backends materialised the neutral launch plan
(alchemist_jobs/launch_plan.py), so the refactor is checked to change no byte of any manifest:

    .venv/bin/python -m tests.unit.k8s.test_manifests_golden --write

Regenerate only for a change meant to alter manifests, and say so in the commit: the diff of
the golden files is then the review of what changed on the cluster.

Cases: every `examples/*.yaml` x every stack in tests/fixtures/stack_outputs x the variants
below (the parameter-server role, a GPU, the job's own packages with a pip mirror, Secret
references). A spec the stack refuses is recorded as its one error line. The code snapshot and
the job's lock are fixed objects, so the snapshot depends on neither the examples' directory
nor a resolver; each case stores its validated spec, which the check renders again, so a later
change to an example file does not touch the check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.data.pods import plan_local_source
from alchemist_jobs.errors import UserError
from alchemist_jobs.job_env import JobLock
from alchemist_jobs.kubernetes import manifests as mf
from alchemist_jobs.kubernetes.code_assets import HASH_CHARS, CodeSnapshot
from alchemist_jobs.spec import JobSpec, load_spec
from tests.k8s_stacks import FIXTURES

GOLDEN = Path(__file__).resolve().parent / "golden"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RUN = "digits-20260101-120000-ab12"
CODE = CodeSnapshot(
    root=Path("/nonexistent/code"),
    files=("train.py",),
    digest="0123456789abcdef"[:HASH_CHARS],
    tarball=b"a fixed tarball",
)
LOCK = JobLock(text="six==1.16.0 \\\n    --hash=sha256:" + "0" * 64 + "\n", requested=("six",))
# name -> overrides; a case with a pip mirror also gets the job's own lock.
VARIANTS: dict[str, list[str]] = {
    "as-is": [],
    "async-2x2-servers-2": ["algorithm.name=async", "algorithm.servers=2", "nodes=2", "procs_per_node=2"],
    "gpu-1": ["resources.gpu=1", "procs_per_node=1"],
    "deps-pip-mirror": ["env.PIP_INDEX_URL=http://mirror.invalid/simple", "env.OTHER=1"],
    "secret-ref": ["secret_env.API_TOKEN.secret=tokens", "secret_env.API_TOKEN.key=api"],
}


def _case(spec: JobSpec, stack: StackOutput) -> dict[str, Any]:
    """What the builder makes of one spec (after plan_local_source, as a dry run does)."""
    try:
        planned, _ = plan_local_source(spec, stack)
        code = None if planned.task.builtin else CODE
        deps = LOCK if planned.env.get("PIP_INDEX_URL") else None
        return {"manifests": mf.build(planned, stack, RUN, code, deps=deps)}
    except UserError as e:
        return {"error": str(e)}


def generate(stack_name: str) -> dict[str, Any]:
    """{"<example>/<variant>": {"spec": the validated spec, and "manifests" or "error"}}. The
    spec is stored with its result so the check does not depend on the examples as they are
    later: it renders the stored spec again."""
    stack = _stack(stack_name)
    out: dict[str, Any] = {}
    for spec_path in sorted(EXAMPLES.glob("*.yaml")):
        for variant, overrides in VARIANTS.items():
            try:
                spec = load_spec(spec_path, overrides)
            except UserError:
                continue  # the spec refuses it (an algorithm for a TensorFlow script)
            out[f"{spec_path.name}/{variant}"] = {
                "spec": spec.model_dump(mode="json"),
                **_case(spec, stack),
            }
    return out


def _stack(name: str) -> StackOutput:
    """The shipped fixture itself (not ALCHEMIST_TEST_STACK_OUTPUTS): the snapshot's input."""
    path = FIXTURES / f"{name}.json"
    return StackOutput.parse(json.loads(path.read_text()), str(path))


def _stacks() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.json") if p.stem != "versions")


def _golden(stack_name: str) -> dict[str, Any]:
    return json.loads((GOLDEN / f"{stack_name}.json").read_text())


@pytest.mark.parametrize("stack_name", _stacks())
def test_manifests_are_the_golden_ones(stack_name: str) -> None:
    stack = _stack(stack_name)
    golden = _golden(stack_name)
    for key, case in golden.items():
        spec = JobSpec.model_validate(case["spec"])
        now = json.loads(json.dumps({"spec": case["spec"], **_case(spec, stack)}))
        assert now == case, f"{stack_name} {key}: the manifests changed"


def test_the_snapshot_covers_every_role_and_refusal() -> None:
    """The golden cases exercise what the plan must carry: servers, GPUs, code, deps, secrets,
    EFA, and a refusal."""
    flat = json.dumps([_golden(s) for s in _stacks()])
    needles = ('"ps"', "nvidia.com/gpu", "secretKeyRef", mf.DEPS_CONTAINER, mf.CODE_KEY, "FI_PROVIDER")
    for needle in (*needles, '"error": "resources.gpu'):
        assert needle in flat, needle
    frameworks = {c["spec"]["task"]["framework"] for c in _golden("dev").values()}
    assert frameworks == {"torch", "tensorflow", "jax"}


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.unit.k8s.test_manifests_golden --write")
    GOLDEN.mkdir(exist_ok=True)
    for name in _stacks():
        text = json.dumps(generate(name), indent=1) + "\n"
        (GOLDEN / f"{name}.json").write_text(text)
        print(f"wrote {GOLDEN / name}.json ({len(text)} bytes)")
