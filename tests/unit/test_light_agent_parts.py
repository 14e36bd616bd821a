"""The in-process parts of the light agent for TensorFlow/JAX (alchemist_jobs/light_agent.py):
its workers' environment is torchrun's, its failure report is what failures.py reads from
torchrun's, and the early agent interpreter imports torch only for a job that may need it."""

from __future__ import annotations

import signal
from pathlib import Path

import yaml

from alchemist_jobs import failures, light_agent, local_backend, processes, store_bind, warm_agent
from alchemist_jobs.spec import parse_spec
from alchemist_jobs.worker_env import restarts

# The variables torchrun's LocalElasticAgent._start_workers gives every worker (torch 2.13,
# torch/distributed/elastic/agent/server/local_elastic_agent.py), plus LOCAL_RANK
# (_set_local_rank_env) and the error file of its log specs (multiprocessing/api.py).
TORCHRUN_WORKER_VARS = {
    "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
    "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "LOCAL_RANK",
    "TORCHELASTIC_ERROR_FILE",
}  # fmt: skip


def test_a_worker_gets_torchrun_s_variables(tmp_path):
    agent = light_agent.LightAgent(3, 2, "run-1", ["python", "-m", "x"], "127.0.0.1")
    try:
        env = agent.worker_env(2, 1, 4242, str(tmp_path / "error.json"))
    finally:
        agent.close()
    assert TORCHRUN_WORKER_VARS <= env.keys()
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (
        "2",
        "2",
        "3",
        "3",
    )
    assert (env["GROUP_RANK"], env["MASTER_PORT"], env["TORCHELASTIC_RUN_ID"]) == ("0", "4242", "run-1")
    assert restarts(env) == 1 and env["TORCHELASTIC_MAX_RESTARTS"] == "2"


def test_each_round_has_fresh_store_files(tmp_path):
    old = tmp_path / "store-1234"
    old.write_text("last round's keys")
    (tmp_path / "store-1234.addr-0").write_text("127.0.0.1:1")
    (tmp_path / "rendezvous").write_text("")
    port = store_bind.new_round(str(tmp_path), processes.free_port)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rendezvous", f"store-{port}"]
    assert (tmp_path / f"store-{port}").stat().st_mode & 0o777 == 0o600


def test_the_failure_report_reads_as_torchrun_s(tmp_path, capsys):
    """failures.py reads the agents' logs (their stderr): the group-failure line and the
    root-cause block."""
    logs = tmp_path / "logs"
    logs.mkdir()
    root = light_agent.Failure(1, 1, 4321, -signal.SIGKILL, 1.0e9, str(tmp_path / "none.json"))
    other = light_agent.Failure(0, 0, 4320, 1, 1.0e9 + 1, str(tmp_path / "none.json"))
    light_agent.log("E", "failed (exitcode: -9) local_rank: 1 (pid: 4321) of binary: python")
    text = capsys.readouterr().err + light_agent.failed_block(
        "alchemist_jobs.runtime.bootstrap", root, [other]
    )
    (logs / "agent-0.log").write_text(text + "\n")
    assert failures.GroupFailures(logs).new() == [(0, -9, 1, 4321)]
    cause = failures.root_cause(logs)
    assert cause is not None and (cause.rank, cause.exitcode) == (1, -9)
    assert failures.failure_record(logs)["signal"] == "SIGKILL"


def test_a_worker_s_error_file_is_its_traceback(tmp_path):
    err = tmp_path / "error.json"
    err.write_text(
        '{"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "Traceback\\nValueError: x"}}}'
    )
    text = light_agent.Failure(0, 0, 1, 1, 0.0, str(err)).describe(0)
    assert "Traceback\n  ValueError: x" in text and f"error_file: {err}" in text


def _spec(tmp_path: Path, text: str):
    (tmp_path / "t.py").write_text("")
    return parse_spec(yaml.safe_load(text), "job.yaml", tmp_path)


def test_one_node_tf_and_jax_runs_use_the_light_agent(tmp_path):
    for fw, nodes, light in (
        ("jax", 1, True),
        ("tensorflow", 1, True),
        ("jax", 2, False),
        ("torch", 1, False),
    ):
        spec = _spec(tmp_path, f"name: x\ntask: {{script: t.py, framework: {fw}}}\nnodes: {nodes}\n")
        assert local_backend.uses_light_agent(spec) is light, (fw, nodes)


def test_the_early_interpreter_guesses_the_framework_from_the_command_line(tmp_path):
    jax = tmp_path / "jax.yaml"
    jax.write_text("name: x\ntask:\n  script: t.py\n  framework: jax\n")
    tf = tmp_path / "tf.yaml"
    tf.write_text("name: x\ntask: {script: t.py, framework: 'tensorflow'}\n")
    torch = tmp_path / "torch.yaml"
    torch.write_text("name: x\ntask: {script: t.py}\n")
    assert not warm_agent.may_need_torch([str(jax)])
    assert not warm_agent.may_need_torch([str(tf), "--quiet"])
    assert warm_agent.may_need_torch([str(torch)])
    assert not warm_agent.may_need_torch([str(torch), "task.framework=jax"])
    assert warm_agent.may_need_torch([str(jax), "task.framework=torch"])
    # argparse takes `--set=KEY=VALUE` as well as `--set KEY=VALUE`
    assert not warm_agent.may_need_torch([str(torch), "--set=task.framework=jax"])
    assert warm_agent.may_need_torch([str(jax), "--set=task.framework=torch"])
    assert warm_agent.may_need_torch([str(tmp_path / "missing.yaml")])
