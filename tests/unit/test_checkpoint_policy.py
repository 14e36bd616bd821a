"""Issue 41.3: the TensorFlow and JAX checkpoint helpers take the run's checkpoint directory
and the spec's checkpoint.every_steps / keep / resume (checkpoint_policy.py), and a script
reaches them from the package without importing either framework."""

from __future__ import annotations

import sys

from alchemist_jobs.checkpoint_policy import policy
from alchemist_jobs.rundir import RunDir
from alchemist_jobs.spec import load_spec


def _run(tmp_path, overrides: list[str]) -> RunDir:
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "job.yaml").write_text("name: t\ntask: {script: train.py, framework: jax}\n")
    run = RunDir(tmp_path / "home" / "runs" / "t-1")
    run.create()
    run.spec.write_text(load_spec(tmp_path / "job.yaml", overrides).to_yaml())
    return run


def test_in_a_run_the_spec_and_the_run_s_directory_decide(tmp_path, monkeypatch):
    run = _run(tmp_path, ["checkpoint.every_steps=7", "checkpoint.keep=4", "checkpoint.resume=false"])
    monkeypatch.setenv("ALCHEMIST_RUN_DIR", str(run.path))
    p = policy("jax")
    assert (p.directory, p.every_steps, p.keep, p.resume) == (run.checkpoints / "jax", 7, 4, False)
    assert [s for s in range(0, 22) if p.due(s)] == [7, 14, 21]
    assert policy("jax", tmp_path / "mine").directory == tmp_path / "mine"  # a script's own wins


def test_outside_a_run_nothing_is_written_unless_a_directory_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("ALCHEMIST_RUN_DIR", raising=False)
    p = policy("tensorflow")
    assert p.directory is None and not any(p.due(s) for s in range(0, 300))
    named = policy("tensorflow", tmp_path)
    assert (named.directory, named.every_steps, named.keep, named.resume) == (tmp_path, 100, 3, True)


def test_the_helpers_are_package_attributes_that_import_no_framework(monkeypatch):
    """The helpers are imported afresh with the frameworks made unimportable (a None entry in
    sys.modules makes `import` raise): another test in this process may have imported them."""
    import alchemist_jobs

    for name in ("tensorflow", "orbax", "orbax.checkpoint"):
        monkeypatch.setitem(sys.modules, name, None)
    for helper in ("tf_checkpoint", "jax_checkpoint"):
        monkeypatch.delitem(sys.modules, f"alchemist_jobs.{helper}", raising=False)
        monkeypatch.delattr(alchemist_jobs, helper, raising=False)

    assert alchemist_jobs.tf_checkpoint.manager and alchemist_jobs.jax_checkpoint.manager
