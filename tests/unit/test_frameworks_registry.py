"""The `Framework` registry (issue 40.2): one class per framework in
`alchemist_jobs.frameworks.FRAMEWORKS`, asked by the spec, the cluster manifests and the worker,
never the name; and every list outside Python (pyproject's extras, the lock's sections,
scripts/setup, the image build script and Dockerfile) equal to the registry, so a framework
added to the registry and not there fails here."""

from __future__ import annotations

import re
import sys
from typing import get_args

import pytest
import tomllib

from alchemist_jobs import frameworks
from alchemist_jobs.frameworks import FRAMEWORK_BASE_PORT, FRAMEWORKS, Framework
from alchemist_jobs.runtime import framework_env
from alchemist_jobs.spec import TaskSpec
from tests.conftest import REPO as ROOT

# The frameworks an image or a lock section adds to torch: every one but torch.
OPTIONAL = sorted(fw.extra for fw in FRAMEWORKS.values() if fw.extra)


def test_registry_holds_one_object_per_framework_by_its_name():
    assert list(FRAMEWORKS) == ["torch", "tensorflow", "jax"]
    for name, fw in FRAMEWORKS.items():
        assert isinstance(fw, Framework) and fw.name == name
        assert frameworks.get(name) is fw
    assert FRAMEWORKS["torch"].extra is None and not FRAMEWORKS["torch"].own_loop
    assert [FRAMEWORKS[n].extra for n in ("tensorflow", "jax")] == ["tensorflow", "jax"]
    assert OPTIONAL == ["jax", "tensorflow"]


def test_registry_objects_answer_what_the_if_chains_did():
    tf, jax, torch = FRAMEWORKS["tensorflow"], FRAMEWORKS["jax"], FRAMEWORKS["torch"]
    assert tf.ports(2) == [("tf-0", FRAMEWORK_BASE_PORT), ("tf-1", FRAMEWORK_BASE_PORT + 1)]
    assert jax.ports(2) == [("jax-coordinator", FRAMEWORK_BASE_PORT)]
    assert torch.ports(2) == [] and torch.cluster_env(["h0"], 1) == {}
    assert tf.cluster_var == "TF_CONFIG" and jax.cluster_var == "JAX_COORDINATOR_ADDRESS"
    assert "JAX_CPU_COLLECTIVES_IMPLEMENTATION" in jax.import_vars() and tf.import_vars() == {}
    # The module's functions are the registry's answers, for callers that pass the name.
    assert frameworks.ports("jax", 3) == jax.ports(3)
    assert (
        frameworks.cluster_env("tensorflow", ["a", "b"], 1)["TF_CONFIG"]
        == tf.cluster_env(["a", "b"], 1)["TF_CONFIG"]
    )


def test_unknown_framework_is_one_line_naming_the_accepted():
    with pytest.raises(KeyError, match="task.framework: 'pytorch'; accepted: torch, tensorflow, jax"):
        frameworks.get("pytorch")


def test_spec_literal_is_the_registry():
    assert get_args(TaskSpec.model_fields["framework"].annotation) == tuple(FRAMEWORKS)


def test_framework_env_uses_the_registry_not_names():
    # A framework added only to the registry reaches the worker: its own variables, no if-chain.
    class Fake(Framework):
        name = "fake"
        module = "json"
        extra = "fake"
        cluster_var = "FAKE_CLUSTER"

        def worker_vars(self, env, addresses, index):
            return {"FAKE_INDEX": str(index)}

    FRAMEWORKS["fake"] = Fake()
    try:
        env = {
            "RANK": "1",
            "WORLD_SIZE": "2",
            "JOB_COMPLETION_INDEX": "1",
            "LOCAL_WORLD_SIZE": "2",
            "LOCAL_RANK": "1",
        }
        assert framework_env.framework_vars("fake", env) == {"FAKE_INDEX": "3"}
        framework_env.require("fake")  # imports json: no error
    finally:
        del FRAMEWORKS["fake"]


def test_pyproject_extras_are_the_registry():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for fw in FRAMEWORKS.values():
        if fw.extra:
            assert fw.extra in extras, f"pyproject.toml lacks the extra {fw.extra}"


def test_lock_scripts_and_sections_are_the_registry():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import lockfile
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert sorted(lockfile.FRAMEWORK_EXTRAS) == OPTIONAL
    sections = re.findall(r"^# --- section: (\S+) ---$", (ROOT / "requirements.lock").read_text(), re.M)
    assert set(OPTIONAL) <= set(sections)
    accepted = re.search(r"accepted: ([^\"]*)\"", (ROOT / "scripts/lock-sections").read_text())
    assert accepted and set(OPTIONAL) <= {s.strip() for s in accepted.group(1).split(",")}


def test_setup_installs_every_optional_framework():
    setup = (ROOT / "scripts/setup").read_text()
    assert "frameworks=$(.venv/bin/python -m alchemist_jobs.frameworks --optional)" in setup
    line = next(ln for ln in setup.splitlines() if ln.strip().startswith("scripts/lock-sections"))
    assert "$frameworks" in line


def test_dockerfile_accepts_exactly_the_registry():
    docker = (ROOT / "images/Dockerfile.train").read_text()
    # The lock stage has no alchemist_jobs: its `case` list is checked here instead.
    cases = re.findall(r'case "\$f" in ([a-z|]+)\)', docker)
    assert cases and all(sorted(c.split("|")) == OPTIONAL for c in cases)
    accepted = re.findall(r"accepted: ([a-z, ]+) \(comma-separated\)", docker)
    assert accepted and all(sorted(a.split(", ")) == OPTIONAL for a in accepted)
