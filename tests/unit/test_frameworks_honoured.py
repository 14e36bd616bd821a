"""Issue 41, items 1 and 6: a TensorFlow or JAX script brings its own loop, so every spec field
only the built-in trainer (or alchemist_jobs.prepare) acts on is refused for it in one line
at spec validation (`--dry-run` too) instead of being accepted and ignored; the variables the
frameworks read at import are among a worker's; Kubeflow v1 JAXJob's names beside ours."""

from __future__ import annotations

import pytest

from alchemist_jobs import cli
from alchemist_jobs.frameworks import FRAMEWORK_BASE_PORT, cluster_env
from alchemist_jobs.runtime import framework_env
from alchemist_jobs.spec import JobSpec, load_spec

SCRIPT = "name: t\ntask: {{script: train.py, framework: {fw}}}\nprocs_per_node: 2\n"

# (--set, the field the line names, its value as shown)
IGNORED = [
    ("algorithm={name: sync, compression: fp16}", "algorithm.compression", "'fp16'"),
    ("algorithm={name: sync, grad_accum: 4}", "algorithm.grad_accum", "4"),
    ("algorithm={name: sync, bucket_mb: 50}", "algorithm.bucket_mb", "50.0"),
    ("hyper.lr=0.3", "hyper.lr", "0.3"),
    ("hyper.batch_size=64", "hyper.batch_size", "64"),
    ("hyper.optimizer=adam", "hyper.optimizer", "'adam'"),
    ("precision.autocast=bf16", "precision.autocast", "'bf16'"),
    ("curve.every_steps=10", "curve.every_steps", "10"),
]


@pytest.fixture
def job(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")

    def write(framework: str) -> str:
        p = tmp_path / "job.yaml"
        p.write_text(SCRIPT.format(fw=framework))
        return str(p)

    return write


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
@pytest.mark.parametrize("assignment,field,shown", IGNORED, ids=[i[1] for i in IGNORED])
def test_a_field_the_script_cannot_honour_is_refused_by_a_dry_run_in_one_line(
    framework, assignment, field, shown, job, home, capsys
):
    code = cli.main(["run", job(framework), "--dry-run", "--set", assignment])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    assert f"{field}: {shown} " in line, line  # the field and the value
    assert f"task.framework {framework}" in line and "accepted: " in line, line
    assert not home.exists() or not any(home.rglob("*"))  # nothing written


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_what_is_accepted_names_the_default_for_that_framework(framework, job):
    from alchemist_jobs.errors import UserError

    with pytest.raises(UserError) as e:
        load_spec(job(framework), ["hyper.lr=0.3"])
    assert "accepted: the default (0.1)" in str(e.value), e.value


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_a_saved_full_spec_at_its_defaults_is_accepted(framework, job, tmp_path):
    """The run's spec.yaml holds every field: re-running it must not be refused."""
    spec = load_spec(job(framework))
    (tmp_path / "again.yaml").write_text(spec.to_yaml())
    again = load_spec(tmp_path / "again.yaml")
    assert (
        again.task.framework == framework and again.hyper == JobSpec.model_fields["hyper"].default_factory()
    )


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_checkpoint_fields_are_accepted_since_the_checkpoint_helpers_honour_them(framework, job):
    """tf_checkpoint / jax_checkpoint write every checkpoint.every_steps and keep checkpoint.keep."""
    spec = load_spec(job(framework), ["checkpoint.every_steps=50", "checkpoint.keep=5"])
    assert (spec.checkpoint.every_steps, spec.checkpoint.keep) == (50, 5)


def test_a_torch_script_keeps_every_field(job, tmp_path):
    (tmp_path / "job.yaml").write_text("name: t\ntask: {script: train.py}\n")
    spec = load_spec(
        tmp_path / "job.yaml", ["hyper.lr=0.3", "checkpoint.keep=5", "algorithm={name: sync, grad_accum: 4}"]
    )
    assert spec.hyper.lr == 0.3 and spec.checkpoint.keep == 5


def test_jax_workers_get_kubeflow_v1_names_beside_jax_s_own():
    """Kubeflow training-operator v1's JAXJob (pkg/controller.v1/jax/envvar.go at 8285aff0,
    setPodEnv): COORDINATOR_ADDRESS is worker 0's host, COORDINATOR_PORT its port,
    NUM_PROCESSES and PROCESS_ID."""
    local = framework_env.framework_vars(
        "jax", {"RANK": "1", "WORLD_SIZE": "2"}, ["127.0.0.1:4001", "127.0.0.1:4002"]
    )
    assert (local["COORDINATOR_ADDRESS"], local["COORDINATOR_PORT"]) == ("127.0.0.1", "4001")
    assert (local["NUM_PROCESSES"], local["PROCESS_ID"]) == ("2", "1")
    hosts = ["j-worker-0-0.j", "j-worker-0-1.j"]
    cluster = cluster_env("jax", hosts, 2)
    assert cluster["COORDINATOR_ADDRESS"] == hosts[0]
    assert cluster["COORDINATOR_PORT"] == str(FRAMEWORK_BASE_PORT)
    assert cluster["NUM_PROCESSES"] == "4"
    pod = framework_env.framework_vars(
        "jax", dict(cluster, JOB_COMPLETION_INDEX="1", LOCAL_WORLD_SIZE="2", LOCAL_RANK="1")
    )
    assert pod["PROCESS_ID"] == pod["JAX_PROCESS_ID"] == "3"


def test_jax_s_sigterm_catcher_is_off_unless_the_job_asks_for_it():
    """jax.distributed.initialize() starts a preemption notifier that catches SIGTERM and only
    logs it (the group's stop then waits out torchrun's grace): off, before jax is imported."""
    env = framework_env.import_vars("jax", {})
    assert env["JAX_ENABLE_PREEMPTION_SERVICE"] == "false"
    assert env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo"
    assert "JAX_ENABLE_PREEMPTION_SERVICE" not in framework_env.import_vars(
        "jax", {"JAX_ENABLE_PREEMPTION_SERVICE": "true"}
    )


def test_a_jax_script_may_ask_for_bmuf_and_easgd_with_the_fields_jax_averaging_reads(job):
    """alchemist_jobs.jax_averaging applies them (tests/integration/test_jax_averaging.py)."""
    spec = load_spec(job("jax"), ["algorithm={name: bmuf, tau: 4, block_lr: 0.9, nesterov: false}"])
    assert (spec.algorithm.name, spec.algorithm.tau) == ("bmuf", 4)
    spec = load_spec(job("jax"), ["algorithm={name: easgd, tau: 3, alpha: 0.2}"])
    assert (spec.algorithm.name, spec.algorithm.alpha) == ("easgd", 0.2)


@pytest.mark.parametrize(
    "framework,assignment,shown",
    [
        ("jax", "algorithm={name: bmuf, overlap: true}", "algorithm.overlap: True"),
        ("jax", "algorithm={name: easgd, exchange_dtype: bf16}", "algorithm.exchange_dtype: 'bf16'"),
        ("jax", "algorithm={name: easgd, variant: async}", "algorithm.variant: 'async'"),
        ("jax", "algorithm.name=async", "algorithm.name=async needs torch"),
        ("tensorflow", "algorithm={name: bmuf}", "algorithm.name=bmuf needs torch"),
    ],
)
def test_what_jax_averaging_does_not_do_is_still_refused(framework, assignment, shown, job):
    from alchemist_jobs.errors import UserError

    with pytest.raises(UserError) as e:
        load_spec(job(framework), [assignment])
    assert shown in str(e.value) and "accepted: " in str(e.value), e.value
