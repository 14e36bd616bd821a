"""A JAX job's rendered pods as real containers of the training image built with
`--frameworks jax` (issue 28): the coordinator on pod 0 at the JobSet host name the manifests
give, the process ids from the pods' completion indexes, gloo between the pods."""

from __future__ import annotations

import re

import pytest

from alchemist_jobs.rundir import RunDir
from tests.container.conftest import REPO
from tests.container.pod_runner import Cluster, team_json
from tests.container.test_container_pods import access_point_volume, run_id
from tests.integration.test_framework_checkpoints import kept_checkpoints
from tests.k8s_stacks import FIXTURES


@pytest.mark.timeout(1800)  # an image build with jax, then two JAX workers in containers
def test_a_jax_job_trains_as_two_pods(jax_train_image, tmp_path):
    import json
    import os
    import subprocess
    import sys

    import yaml

    out = json.loads((FIXTURES / "dev.json").read_text())
    out["images"] = {"train": jax_train_image, "interactive": jax_train_image}
    outputs = tmp_path / "dev.json"
    outputs.write_text(json.dumps(out))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "alchemist_jobs",
            "run",
            str(REPO / "examples" / "jax_digits.yaml"),
            "--dry-run",
            "--stack",
            "dev",
            "--outputs",
            str(outputs),
            "--set",
            "nodes=2",
            "--set",
            "procs_per_node=1",
            "--set",
            "task.args=[--steps, 150]",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.returncode == 0, proc.stderr
    objects = [o for o in yaml.safe_load_all(proc.stdout) if o]
    shared = access_point_volume(tmp_path)
    with Cluster(objects, {"alchemist-shared": shared}, tmp_path / "k", tmp_path.name[-12:]) as cluster:
        cluster.start()
        result = cluster.run()
        logs = {p.name: cluster.logs(p) for p in cluster.pods}
    assert result == "succeeded", (cluster.events, logs)
    assert cluster.restarts == 0, cluster.events
    found = {
        name: re.findall(r"workers (\d+) steps (\d+) test accuracy ([0-9.]+)", text)
        for name, text in logs.items()
    }
    assert all(f and f[-1][:2] == ("2", "150") for f in found.values()), logs
    assert len({f[-1][2] for f in found.values()}) == 1  # one model, both processes
    assert float(next(iter(found.values()))[-1][2]) >= 0.9, found
    run = RunDir(shared / "runs" / run_id(objects))
    # the example's jax_checkpoint: every 50 steps, the newest 2 kept (its yaml's checkpoint:)
    assert kept_checkpoints("jax", run.checkpoints / "jax") == [100, 150]
    assert team_json(run.progress_file)["step"] == 150
