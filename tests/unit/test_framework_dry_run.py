"""Issue 41.6: a dry run shows each TensorFlow worker's whole TF_CONFIG, its `task` part
included (before, the cluster dry run showed the manifests' cluster part only and the local
one no TF_CONFIG at all), and each JAX worker's process id: what the worker itself will
compute (runtime/framework_env.framework_vars), so the lines cannot drift from it."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from alchemist_jobs import cli
from alchemist_jobs.runtime import framework_env
from tests.unit.test_frameworks import RUN, _cluster, _pod_env

LINE = re.compile(r"^# worker (\d+)[^:]*: (.*)$", re.M)


@pytest.fixture
def dry_run(capsys, monkeypatch, home):
    from tests.unit.k8s.conftest import REPO, outputs

    monkeypatch.chdir(REPO)

    def run(example: str, *extra: str, stack: str | None = None) -> dict[int, dict[str, str]]:
        args = ["run", f"examples/{example}", "--dry-run", *extra]
        if stack:
            args += ["--stack", stack, "--outputs", str(outputs(stack))]
        capsys.readouterr()
        code = cli.main(args)
        out, err = capsys.readouterr()
        assert code == 0, err
        return {int(i): dict(kv.split("=", 1) for kv in shlex.split(rest)) for i, rest in LINE.findall(out)}

    return run


def test_a_cluster_dry_run_shows_every_tensorflow_worker_s_tf_config_with_its_task(dry_run):
    shown = dry_run("tf_digits.yaml", "--set", "nodes=2", "--run-id", RUN, stack="dev")  # 2 pods x 2 workers
    assert sorted(shown) == [0, 1, 2, 3], shown
    for i, variables in shown.items():
        config = json.loads(variables["TF_CONFIG"])
        assert config["task"] == {"type": "worker", "index": i}, config
        assert len(config["cluster"]["worker"]) == 4, config
    # what the worker on pod 1, local rank 0 computes from the real manifests' environment
    env, _, _ = _cluster("tf_digits.yaml", "nodes=2")
    worker = framework_env.framework_vars("tensorflow", _pod_env(env, 1, 0, 2))
    assert json.loads(shown[2]["TF_CONFIG"]) == json.loads(worker["TF_CONFIG"])


def test_a_local_dry_run_shows_each_tensorflow_worker_s_tf_config_with_its_task(dry_run):
    shown = dry_run("tf_digits.yaml")
    assert sorted(shown) == [0, 1], shown
    for i, variables in shown.items():
        config = json.loads(variables["TF_CONFIG"])
        assert config["task"] == {"type": "worker", "index": i}, config
        # loopback ports the workers bind when they start: named, not made up
        assert [a.split(":")[0] for a in config["cluster"]["worker"]] == ["127.0.0.1"] * 2, config


def test_a_dry_run_shows_each_jax_worker_s_process_id(dry_run):
    shown = dry_run("jax_digits.yaml", stack="dev")
    assert {i: v["JAX_PROCESS_ID"] for i, v in shown.items()} == {0: "0", 1: "1"}, shown
    assert shown[1]["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo", shown
