"""The system tier's two halves, side by side: every stack's platform and every job shape's manifests.

The platform is the real Pulumi program rendered under Pulumi's mocks (`infra/render.py`, one
forked process per stack); the job is what the Kubernetes backend really submits for that
stack's own `alchemist` output (`KubernetesScheduler.dryrun`) and the interactive session's
real pod. Neither half's shape is written here by hand: the tests of this tier take both from
these fixtures and judge them together with upstream's semantics (each test module cites the
upstream source and tag it ports).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
INFRA_TESTS = REPO / "tests" / "unit" / "infra"
if str(INFRA_TESTS) not in sys.path:  # the infra tier's render helpers, shared, not copied
    sys.path.insert(0, str(INFRA_TESTS))

from infra_helpers import (  # noqa: E402
    KUBECONFIG,
    REGISTRY_PASSWORD,
    SHIPPED,
    STACKS,
    deployer_sets,
    existing_stack_config,
    render_many,
)

from alchemist_jobs.contract import StackOutput  # noqa: E402
from alchemist_jobs.errors import UserError  # noqa: E402
from alchemist_jobs.spec import JobSpec, parse_spec  # noqa: E402

EXAMPLES = REPO / "examples"
# Every stack a user can have: the shipped ones, and the on-prem lab as an `existing` cluster.
STACK_NAMES = [*SHIPPED, "onprem-existing"]


@dataclass
class Platform:
    """One stack as `pulumi up` would leave it: the program's resources and its contract."""

    name: str
    render: dict[str, Any]  # infra/render.py's JSON: resources (type, name, inputs) and outputs
    output: StackOutput  # the `alchemist` output, parsed by the job library's own contract

    def resources(self, type_suffix: str | None = None) -> list[dict[str, Any]]:
        """Registered resources whose Pulumi type ends with `type_suffix` (e.g. ":NetworkPolicy")."""
        return [r for r in self.render["resources"]
                if type_suffix is None or r["type"].endswith(type_suffix)]

    def kube_objects(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The Kubernetes objects the program creates directly (inputs of kubernetes:* resources
        that carry apiVersion and kind), optionally of one kind. Charts are opaque under mocks."""
        out = []
        for r in self.render["resources"]:
            inputs = r.get("inputs") or {}
            if not r["type"].startswith("kubernetes:") or "kind" not in inputs:
                continue
            if kind is None or inputs["kind"] == kind:
                out.append(inputs)
        return out


@dataclass
class Job:
    """One job shape on one stack: the spec and every object the backend would create."""

    shape: str
    spec: JobSpec | None  # None for the interactive session
    run_id: str
    manifests: list[dict[str, Any]] = field(default_factory=list)

    def objects(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.manifests if m["kind"] == kind]

    def pod_templates(self) -> list[tuple[str, dict[str, Any]]]:
        """(replicated job name or pod name, pod template) of every pod the job makes."""
        out = []
        for m in self.manifests:
            if m["kind"] == "JobSet":
                for rj in m["spec"]["replicatedJobs"]:
                    out.append((rj["name"], rj["template"]["spec"]["template"]))
            elif m["kind"] == "Pod":
                out.append((m["metadata"]["name"], {"metadata": m["metadata"], "spec": m["spec"]}))
            elif m["kind"] == "Job":
                out.append((m["metadata"]["name"], m["spec"]["template"]))
        return out


@pytest.fixture(scope="session")
def platforms(tmp_path_factory) -> dict[str, Platform]:
    """Every stack rendered once under mocks, as a deployer would configure it before `pulumi up`."""
    existing = tmp_path_factory.mktemp("stacks") / "Pulumi.onprem-existing.yaml"
    existing.write_text(yaml.safe_dump({"config": existing_stack_config()}))
    jobs: dict[str, dict[str, Any]] = {
        name: {"stack_file": STACKS / f"Pulumi.{name}.yaml", "sets": deployer_sets(name)} for name in SHIPPED
    }
    jobs["onprem-existing"] = {"stack_file": existing, "stack": "onprem-existing", "secrets": {
        "alchemist:kubeconfig": KUBECONFIG, "alchemist:registryPassword": REGISTRY_PASSWORD}}
    results = render_many(jobs)
    out = {}
    for name, result in results.items():
        assert result["error"] is None, f"{name}: {result['error']}"
        out[name] = Platform(name, result, StackOutput.parse(result["outputs"]["alchemist"], f"stack {name}"))
    return out


def _digits(name: str = "system", **over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"name": name, "task": {"builtin": "digits"}, "nodes": 1, "procs_per_node": 2,
                           "resources": {"cpu": 1, "memory": "2Gi", "gpu": 0}, "hyper": {"epochs": 1}}
    for key, value in over.items():
        raw[key] = value
    return raw


def _longest_name() -> str:
    """The longest job name the spec accepts (whatever its pattern allows today)."""
    for n in range(80, 0, -1):
        name = "l" * n
        try:
            parse_spec(_digits(name), "longest-name")
            return name
        except UserError:
            continue
    raise AssertionError("the spec accepts no name at all")


def _gpu(out: StackOutput) -> dict[str, Any] | None:
    if not out.gpu.per_node:
        return None
    return _digits("gpu", nodes=2, procs_per_node=out.gpu.per_node,
                   resources={"cpu": 8, "memory": "32Gi", "gpu": out.gpu.per_node})


def _s3(out: StackOutput) -> dict[str, Any] | None:
    if out.object_store is None:
        return None
    store = out.object_store  # under the team's prefix: its role may read nothing else
    return _digits("s3-data", nodes=2, data={"source": f"s3://{store.bucket}/{store.prefix}datasets/digits"})


# Shape name -> the spec it submits on a stack (None: the stack cannot have this shape).
SHAPES: dict[str, Callable[[StackOutput], dict[str, Any] | None]] = {
    "one-node": lambda out: _digits("one-node"),
    "two-nodes": lambda out: _digits("two-nodes", nodes=2),
    "four-nodes": lambda out: _digits("four-nodes", nodes=4, procs_per_node=1),
    "gpu": _gpu,
    "async-two-servers": lambda out: _digits("async", nodes=2, procs_per_node=1,
                                             algorithm={"name": "async", "servers": 2}),
    "s3-data": _s3,
    "longest-name": lambda out: _digits(_longest_name(), nodes=2),
    # A user's own model (examples/charlm.py) through the trainer, with parameter servers.
    "entry-async": lambda out: _digits("entry-async", nodes=2, procs_per_node=1,
                                       task={"entry": "charlm.py:make_task"},
                                       algorithm={"name": "async", "servers": 2}),
    # A user's own loop (examples/own_loop.py) under bmuf through alchemist_jobs.prepare.
    "own-loop-bmuf": lambda out: _digits("own-loop-bmuf", nodes=2,
                                         task={"script": "own_loop.py", "args": ["--epochs", "1"]},
                                         algorithm={"name": "bmuf", "tau": 8}),
}
SESSION = "session"  # the interactive session's pod, judged beside the job shapes


def build_job(platform: Platform, shape: str, team: str | None = None) -> Job | None:
    """The job library's real objects for `shape` on `platform`, submitted by `team` (None:
    the stack's default team); None where the stack cannot have the shape (no GPUs, no object
    store)."""
    out = platform.output.for_team(team)  # as `--team` gives it to every command
    if shape == SESSION:
        from alchemist_jobs.kubernetes.interactive import session_name, session_pod

        name = session_name("ana")
        return Job(SESSION, None, name, [session_pod(out, name, gpus=min(1, out.gpu.per_node))])
    raw = SHAPES[shape](out)
    if raw is None:
        return None
    spec = parse_spec(raw, f"shape {shape}", EXAMPLES)
    from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler

    request = KubernetesScheduler(platform.output, team=team).dryrun(spec, EXAMPLES)  # a real run's id
    return Job(shape, request.spec, request.run_id, list(request.manifests))


ALL_SHAPES = [*SHAPES, SESSION]


@pytest.fixture(scope="session")
def jobs(platforms) -> Callable[[str, str], Job | None]:
    """jobs(stack, shape) -> Job, built once per pair."""
    cache: dict[tuple[str, str], Job | None] = {}

    def get(stack: str, shape: str) -> Job | None:
        if (stack, shape) not in cache:
            cache[stack, shape] = build_job(platforms[stack], shape)
        return cache[stack, shape]

    return get


def build_job_in(platform: Platform, shape: str, team: str) -> Job | None:
    """build_job for another team of the same stack, from the stack output's own entry for it
    (its namespace, LocalQueue, uid/gid, object-store prefix and credential)."""
    return build_job(platform, shape, team)


def team_view(platform: Platform, team: str) -> Platform:
    """The same stack as a member of `team` sees it: the output with that team's fields."""
    return Platform(platform.name, platform.render, platform.output.for_team(team))


@pytest.fixture(scope="session")
def worlds(platforms, jobs, tmp_path_factory):
    """worlds(stack) -> the stack's cluster with a run of every shape, analyzed by np-guard
    (tests/system/cluster_world.py)."""
    from cluster_world import make_worlds

    return make_worlds(platforms, jobs, tmp_path_factory)
