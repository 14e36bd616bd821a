"""`requirements:` in the spec and the parts of job_env.py that need no resolver: the field's
forms and its one-line refusals, a pin the platform's lock holds refused before pip runs, the
platform's lock read by section, the cache's size limit, and the worker's variable."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from alchemist_jobs import environment as E
from alchemist_jobs import job_env
from alchemist_jobs.errors import UserError
from alchemist_jobs.spec import load_spec
from alchemist_jobs.worker_env import WorkerEnv


def _spec(tmp_path: Path, requirements: str) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "job.yaml").write_text(
        f"name: deps\ntask: {{script: train.py}}\nrequirements: {requirements}\n")
    return tmp_path / "job.yaml"


def test_a_list_of_requirements(tmp_path):
    spec = load_spec(_spec(tmp_path, "['tomli-w==1.2.0', 'rich>=13; python_version>\"3\"']"))
    assert spec.requirements == ["tomli-w==1.2.0", 'rich>=13; python_version>"3"']
    assert load_spec(_spec(tmp_path, "[]")).requirements == []


def test_a_requirements_file_beside_the_spec_becomes_its_lines(tmp_path):
    (tmp_path / "requirements.txt").write_text("# mine\n\ntomli-w==1.2.0  # toml writer\nrich\n")
    spec = load_spec(_spec(tmp_path, "requirements.txt"))
    assert spec.requirements == ["tomli-w==1.2.0", "rich"]
    assert "requirements.txt" not in spec.to_yaml()  # the run keeps the list, not the file


@pytest.mark.parametrize("given, said", [
    ("['-e .']", "options do not go in requirements"),
    ("['--index-url https://x']", "options do not go in requirements"),
    ("['tomli-w @ https://example.com/t.whl']", "names a URL"),
    ("['not a requirement!']", "is not a requirement"),
    ("../elsewhere.txt", "not a file inside the spec's directory"),
    ("missing.txt", "not a file inside the spec's directory"),
])
def test_bad_requirements_are_one_line_naming_the_field_and_value(tmp_path, given, said):
    (tmp_path.parent / "elsewhere.txt").write_text("rich\n")
    with pytest.raises(UserError) as e:
        load_spec(_spec(tmp_path, given))
    text = str(e.value)
    assert "\n" not in text and "requirements" in text and said in text and "accepted:" in text


def test_a_requirement_file_line_that_is_an_option_names_the_file(tmp_path):
    (tmp_path / "req.txt").write_text("tomli-w\n-r other.txt\n")
    with pytest.raises(UserError, match=r"requirements \(req.txt\).*'-r other.txt'.*options"):
        load_spec(_spec(tmp_path, "req.txt"))


def test_a_pin_the_platform_holds_otherwise_is_refused_before_pip_runs(tmp_path, monkeypatch):
    def no_pip(*a, **k):
        raise AssertionError("pip ran for a requirement the platform's pin refuses")

    monkeypatch.setattr(job_env.subprocess, "run", no_pip)
    torch = job_env.platform_lock().pins["torch"]
    t0 = time.perf_counter()
    with pytest.raises(UserError) as e:
        job_env.resolve(["tomli-w", "torch==2.0.0"], tmp_path)
    assert time.perf_counter() - t0 < 1.0
    assert str(e.value) == (
        f"requirements: 'torch==2.0.0' would move the platform's pin torch=={torch.version} "
        "(requirements.lock); accepted: a version the pin satisfies, or torch alone (the "
        "platform's is used)")
    assert not job_env.resolved_root(tmp_path).exists()


def test_the_platform_lock_is_read_by_section():
    lock = job_env.platform_lock()
    assert "runtime" in lock.pins["torch"].sections
    assert lock.pins["torch"].block.startswith(f"torch=={lock.pins['torch'].version} \\\n")
    assert lock.pins["torch"].block.count("--hash=sha256:") >= 2
    assert "runtime" not in lock.pins["pytest"].sections and "dev" in lock.pins["pytest"].sections
    assert "pyyaml==" in lock.constraints().lower()


def _env(root: Path, short: str, size: int, used: float) -> None:
    env = job_env.envs_root(root) / short
    (env / "site").mkdir(parents=True)
    (env / job_env.RUN_LOCK).write_text(f"pkg-{short}==1.0 \\\n    --hash=sha256:{'0' * 64}\n")
    (env / "site" / "blob").write_bytes(b"x" * size)
    os.utime(env, (used, used))


def test_the_cache_keeps_the_most_recently_used_within_its_limit(tmp_path):
    now = time.time()
    for i, short in enumerate(["a" * 16, "b" * 16, "c" * 16]):
        _env(tmp_path, short, 1000, now - 100 * (3 - i))  # a oldest, c newest
    assert [e.short for e in job_env.cached(tmp_path)] == ["c" * 16, "b" * 16, "a" * 16]
    removed = job_env.prune(tmp_path, max_bytes=2500, keep={"a" * 16})
    assert [e.short for e in removed] == ["b" * 16]  # a is kept (in use), b is the oldest left
    assert sorted(e.short for e in job_env.cached(tmp_path)) == ["a" * 16, "c" * 16]
    assert job_env.cached(tmp_path)[0].packages == ["pkg-" + "c" * 16 + "==1.0"]


def test_workers_get_the_site_after_the_platforms(tmp_path, monkeypatch):
    env = WorkerEnv(run_dir="r", shared_root="s", stack="local", threads=1,
                    job_site=str(tmp_path)).as_dict()
    assert env[E.JOB_SITE.name] == str(tmp_path)
    assert E.JOB_SITE.name not in WorkerEnv(run_dir="r", shared_root="s", stack="local",
                                            threads=1).as_dict()
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert job_env.activate(env) == tmp_path
    assert sys.path[-1] == str(tmp_path)  # after every site-packages directory
