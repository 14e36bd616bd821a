"""`task.synthetic.data_seed`: the generated data set's own seed, so a seed study varies the
initialisation and the data order (`hyper.seed`) over the same data."""

from __future__ import annotations

import pytest

from alchemist_jobs.errors import UserError
from alchemist_jobs.runtime.tasks import load_task_data
from alchemist_jobs.spec import parse_spec


def job(seed: int, **synthetic):
    task = {"builtin": "synthetic", "synthetic": {"samples": 64, "features": 4, "params": 200, **synthetic}}
    return parse_spec({"name": "j", "task": task, "hyper": {"seed": seed}}, "job.yaml")


def test_the_data_seed_fixes_the_data_across_job_seeds(tmp_path):
    a = load_task_data(job(0, data_seed=7), tmp_path)
    b = load_task_data(job(1, data_seed=7), tmp_path)
    assert a.x_train.equal(b.x_train) and a.y_test.equal(b.y_test)
    assert len(list((tmp_path / "data").glob("*.pt"))) == 1  # one file serves both


def test_without_it_the_job_seed_makes_the_data_as_before(tmp_path):
    a = load_task_data(job(0), tmp_path)
    b = load_task_data(job(1), tmp_path)
    assert not a.x_train.equal(b.x_train)
    assert load_task_data(job(3, data_seed=0), tmp_path).x_train.equal(a.x_train)


def test_a_negative_data_seed_is_one_line_naming_the_field():
    with pytest.raises(UserError) as err:
        job(0, data_seed=-1)
    assert "task.synthetic.data_seed" in str(err.value) and "\n" not in str(err.value)
