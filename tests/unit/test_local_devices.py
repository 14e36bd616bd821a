"""The local stack gives each node (torchrun agent) its own GPUs and never two ranks one GPU;
a spec asking for GPUs the machine does not have is one line at dry run, nothing started.

The device plan itself is unit-tested in test_trainer.py; this checks the launcher uses it
(an agent that inherited the whole CUDA_VISIBLE_DEVICES would put node 1's LOCAL_RANK 0 on
node 0's GPU, which NCCL refuses)."""

from __future__ import annotations

import pytest

from alchemist_jobs import cli
from alchemist_jobs.errors import UserError
from alchemist_jobs.local_backend import LocalScheduler
from alchemist_jobs.spec import load_spec


def _dryrun(tmp_path, *sets):
    spec = load_spec("examples/digits.yaml", list(sets))
    return LocalScheduler(tmp_path).dryrun(spec, spec_dir=__import__("pathlib").Path("examples"))


def test_each_local_node_gets_its_own_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    req = _dryrun(tmp_path, "nodes=2", "procs_per_node=2", "resources.gpu=2")
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in req.processes] == ["0,1", "2,3"]


def test_cpu_jobs_leave_the_devices_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    req = _dryrun(tmp_path, "nodes=2")
    assert all("CUDA_VISIBLE_DEVICES" not in p.env or p.env["CUDA_VISIBLE_DEVICES"] == "0,1"
               for p in req.processes)


@pytest.mark.parametrize("visible, sets, field", [
    ("", ["resources.gpu=1"], "resources.gpu=1"),
    ("0", ["nodes=2", "resources.gpu=1", "procs_per_node=1"], "nodes=2"),
    ("0,1", ["resources.gpu=1", "procs_per_node=2"], "procs_per_node=2"),
])
def test_gpus_the_machine_cannot_give_are_one_line(tmp_path, monkeypatch, visible, sets, field):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with pytest.raises(UserError, match=field):
        _dryrun(tmp_path, *sets)
    assert not (tmp_path / "runs").exists()


def test_the_cli_says_it_in_one_line_with_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("ALCHEMIST_HOME", str(tmp_path))
    assert cli.main(["run", "examples/digits.yaml", "--set", "resources.gpu=1", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "resources.gpu=1" in err


def test_the_spec_may_allow_a_cpu_fallback(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    req = _dryrun(tmp_path, "resources.gpu=1", "resources.gpu_fallback=true")
    assert all(not p.env.get("CUDA_VISIBLE_DEVICES") for p in req.processes)
