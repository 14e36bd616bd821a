"""A job's own packages (`requirements:`), through the real CLI on the local stack: a package
outside the platform's lock is resolved against the lock by pip, installed once per resolved
lock into the cache under the home, and imported by the user's script; a second run reuses
that environment without resolving or installing; a requirement that would move a platform
pin is refused in one line before anything starts.

The package is a real wheel built here (`pip wheel` of a temporary project) into a local
find-links directory, reached the way a user behind a mirror reaches theirs: PIP_NO_INDEX and
PIP_FIND_LINKS, which the resolver and the installer (pip) read themselves. One test uses the
real PyPI and is skipped when it cannot be reached."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from alchemist_jobs import job_env
from tests.conftest import cli

SCRIPT = """
import tinydep_alc
print("tinydep says", tinydep_alc.VALUE, flush=True)
"""


def build_wheel(links: Path, name: str, version: str, deps: list[str] = ()) -> Path:
    """A real wheel of a one-module project, built by pip into `links`."""
    src = links.parent / f"src-{name}-{version}"
    (src / name).mkdir(parents=True)
    (src / name / "__init__.py").write_text(f"VALUE = {version!r}\n")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n'
        f"dependencies = {json.dumps(list(deps))}\n"
        f'[tool.setuptools]\npackages = ["{name}"]\n')
    links.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(links), str(src)], check=True)
    return next(links.glob(f"{name}-{version}-*.whl"))


def mirror(links: Path) -> dict[str, str]:
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links)}


def write_job(top: Path, requirements: str) -> Path:
    """The job in its own directory beside the find-links one (a spec's directory is shipped)."""
    d = top / "job"
    d.mkdir(exist_ok=True)
    (d / "use_dep.py").write_text(SCRIPT)
    (d / "job.yaml").write_text(f"name: deps\ntask: {{script: use_dep.py}}\nmax_restarts: 0\n"
                                f"requirements: {requirements}\n")
    return d / "job.yaml"


def test_a_package_outside_the_lock_runs_and_a_second_run_reuses_its_environment(
        home: Path, tmp_path: Path):
    links = tmp_path / "links"
    build_wheel(links, "tinydep_alc", "1.3.0", ["pyyaml>=5"])  # pyyaml: a platform pin
    job = write_job(tmp_path, "[tinydep_alc]")
    r = cli("run", str(job), home=home, env_extra=mirror(links))
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = next((home / "runs").iterdir())
    assert "tinydep says 1.3.0" in (run_dir / "logs" / "rank-0.log").read_text()
    lock = (run_dir / job_env.RUN_LOCK).read_text()
    assert "tinydep-alc==1.3.0" in lock and "--hash=sha256:" in lock
    assert "pyyaml" not in lock.lower().replace("pyyaml>=5", "")  # the platform's, not moved
    envs = [p for p in job_env.envs_root(home).iterdir() if not p.name.startswith(".")]
    assert [p.name for p in envs] == [job_env.lock_hash(lock)[:job_env.SHORT]]
    status = json.loads(cli("status", run_dir.name, "--json", home=home).stdout)
    assert status["requirements"]["sha256"] == job_env.lock_hash(lock)
    assert status["requirements"]["lock"] == lock
    built = envs[0].stat().st_ino

    # The second run: the find-links directory is now empty, so any resolution or install
    # would fail; the cached resolution and environment make both unnecessary.
    for whl in links.iterdir():
        whl.unlink()
    r2 = cli("run", str(job), home=home, env_extra=mirror(links))
    assert r2.returncode == 0, r2.stdout + r2.stderr
    second = max((home / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    assert second != run_dir
    assert "tinydep says 1.3.0" in (second / "logs" / "rank-0.log").read_text()
    assert (second / job_env.RUN_LOCK).read_text() == lock
    assert envs[0].stat().st_ino == built

    listed = json.loads(cli("cache", "list", "--json", home=home).stdout)
    assert [(e["hash"], e["packages"]) for e in listed] == [(envs[0].name, ["tinydep-alc==1.3.0"])]
    pruned = cli("cache", "prune", "--all", home=home)
    assert pruned.returncode == 0 and "1 environment(s) removed" in pruned.stdout, pruned.stdout
    assert not envs[0].exists()


def test_concurrent_runs_with_one_lock_build_it_once(tmp_path: Path):
    """Two processes that need the same lock at once: one installs, the other waits on the
    file lock and finds it built."""
    links = tmp_path / "links"
    build_wheel(links, "tinydep_alc", "1.3.0")
    root = tmp_path / "root"
    code = ("import sys; from pathlib import Path; from alchemist_jobs import job_env\n"
            "lock = job_env.resolve(['tinydep_alc'], Path(sys.argv[1]))\n"
            "site, built = job_env.ensure_site(lock, Path(sys.argv[1]))\n"
            "print('built' if built else 'found', site)\n")
    env = dict(os.environ, **mirror(links))
    # Resolved first (and cached), so both start from the same lock and race only to build.
    subprocess.run([sys.executable, "-c", code.split("site, built")[0], str(root)], env=env,
                   check=True, capture_output=True, text=True)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(root)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    said = sorted(o[0].split()[0] for o in outs)
    assert said == ["built", "found"], outs
    assert len({o[0].split()[1] for o in outs}) == 1
    assert [p.name for p in job_env.envs_root(root).iterdir() if not p.name.startswith(".")] \
        == [Path(outs[0][0].split()[1]).parent.name]


def test_a_requirements_file_in_the_spec_directory(home: Path, tmp_path: Path):
    links = tmp_path / "links"
    build_wheel(links, "tinydep_alc", "2.0.1")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "requirements.txt").write_text("# the job's own\ntinydep_alc==2.0.1\n")
    job = write_job(tmp_path, "requirements.txt")
    r = cli("run", str(job), home=home, env_extra=mirror(links))
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = next((home / "runs").iterdir())
    assert "tinydep says 2.0.1" in (run_dir / "logs" / "rank-0.log").read_text()


def test_a_pin_that_would_move_a_platform_pin_is_one_line_and_starts_nothing(
        home: Path, tmp_path: Path):
    links = tmp_path / "links"
    build_wheel(links, "oldyaml_alc", "1.0.0", ["pyyaml<5"])  # the lock pins PyYAML 6
    pin = job_env.platform_lock().pins["pyyaml"]
    for requirement, named in (("[oldyaml_alc]", "pyyaml<5"), ("['torch==2.0.0']", "torch==2.0.0")):
        job = write_job(tmp_path, requirement)
        r = cli("run", str(job), home=home, env_extra=mirror(links))
        assert r.returncode == 2, r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert "requirements" in lines[0] and named in lines[0], lines[0]
        wanted = pin.version if named.startswith("pyyaml") else \
            job_env.platform_lock().pins["torch"].version
        assert wanted in lines[0], lines[0]
        assert not (home / "runs").exists() or not any((home / "runs").iterdir())
        assert not job_env.envs_root(home).exists() or not any(
            p for p in job_env.envs_root(home).iterdir() if not p.name.startswith("."))


def test_an_unknown_package_is_one_line(home: Path, tmp_path: Path):
    links = tmp_path / "links"
    links.mkdir()
    job = write_job(tmp_path, "[no-such-package-alc]")
    r = cli("run", str(job), "--dry-run", home=home, env_extra=mirror(links))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no-such-package-alc" in lines[0], r.stderr


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _pypi_reachable(), reason="PyPI is not reachable from this machine")
def test_a_small_package_from_pypi(home: Path, tmp_path: Path):
    # `tomli-w`: pure Python, no dependencies, not in the platform's lock.
    assert "tomli-w" not in job_env.platform_lock().pins
    (tmp_path / "use.py").write_text("import tomli_w\nprint(tomli_w.dumps({'a': 1}), flush=True)\n")
    (tmp_path / "job.yaml").write_text(
        "name: pypi\ntask: {script: use.py}\nmax_restarts: 0\nrequirements: ['tomli-w==1.2.0']\n")
    r = cli("run", str(tmp_path / "job.yaml"), home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = next((home / "runs").iterdir())
    assert "a = 1" in (run_dir / "logs" / "rank-0.log").read_text()


def test_the_cluster_dry_run_carries_the_resolved_lock(home: Path, tmp_path: Path):
    """`--dry-run` on a cluster stack resolves as a local run does and shows the lock in the
    ConfigMap, the `deps` init container that installs it once per lock, and the workers'
    ALCHEMIST_JOB_SITE on the shared file system."""
    import yaml

    from tests.unit.k8s.conftest import outputs

    links = tmp_path / "links"
    build_wheel(links, "tinydep_alc", "1.3.0", ["pyyaml>=5"])
    job = write_job(tmp_path, "[tinydep_alc]")
    r = cli("run", str(job), "--dry-run", "--stack", "dev", "--outputs", str(outputs("dev")),
            home=home, env_extra=mirror(links))
    assert r.returncode == 0, r.stderr
    objs = list(yaml.safe_load_all(r.stdout))
    config_map = next(o for o in objs if o and o["kind"] == "ConfigMap")
    lock = config_map["data"][job_env.RUN_LOCK]
    assert "tinydep-alc==1.3.0" in lock and "--hash=sha256:" in lock
    jobset = next(o for o in objs if o and o["kind"] == "JobSet")
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert "deps" in [c["name"] for c in pod["initContainers"]]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["ALCHEMIST_JOB_SITE"].endswith(f"/deps/envs/{job_env.lock_hash(lock)[:16]}/site")


def test_the_platforms_packages_come_first(home: Path, tmp_path: Path):
    """A job's package that ships a module of a platform package's name (`yaml`) does not
    replace the platform's: the job's site comes after the platform's site-packages."""
    import yaml

    links = tmp_path / "links"
    wheel_src = build_wheel(links, "shadow_alc", "1.0.0")
    # Rebuild the same project with a top-level `yaml` package beside its own.
    src = links.parent / "src-shadow_alc-1.0.0"
    (src / "yaml").mkdir()
    (src / "yaml" / "__init__.py").write_text("SHADOW = True\n")
    (src / "pyproject.toml").write_text((src / "pyproject.toml").read_text().replace(
        'packages = ["shadow_alc"]', 'packages = ["shadow_alc", "yaml"]'))
    wheel_src.unlink()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(links), str(src)], check=True)
    d = tmp_path / "job"
    d.mkdir()
    (d / "which.py").write_text("import shadow_alc, yaml\nprint('yaml from', yaml.__file__, "
                                "hasattr(yaml, 'SHADOW'), flush=True)\n")
    (d / "job.yaml").write_text("name: shadow\ntask: {script: which.py}\nmax_restarts: 0\n"
                                "requirements: [shadow_alc]\n")
    r = cli("run", str(d / "job.yaml"), home=home, env_extra=mirror(links))
    assert r.returncode == 0, r.stdout + r.stderr
    log = (next((home / "runs").iterdir()) / "logs" / "rank-0.log").read_text()
    assert f"yaml from {yaml.__file__} False" in log, log
