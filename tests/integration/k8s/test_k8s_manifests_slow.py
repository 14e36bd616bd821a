"""Manifests checked at length or by running them: every manifest of every stack and example
against the strict schemas (seconds), and the pod scripts run by a real shell and torchrun
(moved from tests/unit/k8s/test_k8s_manifests.py, whose helpers they use)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes_validate
import pytest

from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes import manifests as mf
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack, stack_outputs
from tests.unit.k8s.conftest import EXAMPLES
from tests.unit.k8s.test_k8s_manifests import EXAMPLE_SPECS, VARIANTS, _env, _job, _kinds, _render, validate


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_manifest_is_valid_for_every_stack_and_example(variant):
    checked = 0
    # A TensorFlow or JAX script brings its own loop: the spec refuses another algorithm.
    torch_only = any(v.startswith("algorithm.") for v in VARIANTS[variant])
    specs = [p for p in EXAMPLE_SPECS if not torch_only or load_spec(p).task.framework == "torch"]
    for p in set(EXAMPLE_SPECS) - set(specs):
        with pytest.raises(UserError, match=r"needs torch"):
            load_spec(p, VARIANTS[variant])
    for s in stack_outputs():
        for spec_path in specs:
            spec = load_spec(spec_path, VARIANTS[variant])
            if spec.resources.gpu > s.output.gpu.per_node:
                with pytest.raises(UserError, match=r"^resources\.gpu: "):
                    _render(s, spec_path, VARIANTS[variant])
                continue
            objs = _render(s, spec_path, VARIANTS[variant])
            assert _kinds(objs) == ["ConfigMap", "NetworkPolicy", "JobSet"]
            for obj in objs:
                try:
                    validate(obj, s.schema_version)
                except (kubernetes_validate.ValidationError, ValueError) as e:
                    pytest.fail(f"{s.name} {spec_path.name} {obj['kind']}: {e}")
                checked += 1
    assert checked >= 3 * len(specs) * (1 if variant == "gpu-1" else 4)


def _run_pod_script(command: list[str], index: int, tmp_path: Path) -> str:
    """Run a pod's shell script with stand-ins for torchrun and python that print how they
    were called: what each completion index really executes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("torchrun", "python"):
        p = bin_dir / tool
        p.write_text(f'#!/bin/sh\necho "{tool} $* shard=$ALCHEMIST_PS_SHARD port=$ALCHEMIST_PS_PORT"\n')
        p.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "JOB_COMPLETION_INDEX": str(index)}
    return subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout


def test_the_pod_scripts_branch_on_the_completion_index(tmp_path):
    objs = _render(stack("dev"), EXAMPLES / "script.yaml", VARIANTS["async-2x2-servers-2"])
    command = _job(objs)["spec"]["template"]["spec"]["containers"][0]["command"]
    out = [_run_pod_script(command, i, tmp_path) for i in range(2)]
    assert out[0].startswith("torchrun ") and "is_host=1" in out[0]
    assert out[1].startswith("torchrun ") and "is_host=0" in out[1]
    # The user's arguments arrive intact, after the bootstrap, without shell quoting games.
    assert (
        out[0]
        .split(" shard=")[0]
        .endswith("-m alchemist_jobs.runtime.bootstrap script plain_ddp.py --epochs 10")
    )
    ps = _job(objs, "ps")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert (
        _run_pod_script(ps, 0, tmp_path).strip()
        == "python -m alchemist_jobs.runtime.parameter_server shard=0 port=29600"
    )
    assert (
        _run_pod_script(ps, 1, tmp_path).strip()
        == "python -m alchemist_jobs.runtime.parameter_server shard=1 port=29601"
    )


def test_a_pod_stopped_by_sigterm_exits_the_preempted_code(tmp_path):
    """The kubelet's SIGTERM (preemption, eviction) reaches torchrun, and the script exits
    PREEMPTED_EXIT_CODE so the Job's FailJob rule and JobSet's rule tell it from a crash;
    torchrun's own exit code passes through otherwise."""
    import signal
    import time as _time

    command = _job(_render(stack("dev"), EXAMPLES / "digits.yaml"))["spec"]["template"]["spec"]["containers"][
        0
    ]["command"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ready = tmp_path / "ready"
    (bin_dir / "torchrun").write_text(
        f"#!/bin/sh\ntrap 'echo got-term >> {tmp_path}/log; exit 1' TERM\n"
        f"touch {ready}\nwhile :; do sleep 0.1; done\n"
    )
    (bin_dir / "torchrun").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "JOB_COMPLETION_INDEX": "0"}
    proc = subprocess.Popen(command, env=env)
    while not ready.exists():  # waits on the stand-in having started, not on time
        assert proc.poll() is None
        _time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait() == mf.PREEMPTED_EXIT_CODE
    assert (tmp_path / "log").read_text() == "got-term\n"
    (bin_dir / "torchrun").write_text("#!/bin/sh\nexit 7\n")
    assert subprocess.run(command, env=env).returncode == 7


def test_a_configuration_error_through_torchrun_exits_the_config_code(tmp_path):
    """torchrun exits 1 whatever its worker's exit code (torch 2.13 torch/distributed/run.py
    `main`, under @record, re-raises the agent's ChildFailedError). A worker that wrote its
    configuration error to the container's termination message gets CONFIG_ERROR_EXIT_CODE
    back as the container's exit code; any other failure keeps torchrun's."""
    from alchemist_jobs.environment import CONFIG_ERROR_FILE
    from alchemist_jobs.runtime.config_error import CONFIG_ERROR_EXIT_CODE

    train = _job(_render(stack("dev"), EXAMPLES / "digits.yaml"))["spec"]["template"]["spec"]["containers"][0]
    env_spec = _env(train)
    # The file the kubelet mounts at terminationMessagePath is the one workers write.
    assert env_spec[CONFIG_ERROR_FILE.name] == train["terminationMessagePath"] == mf.TERMINATION_LOG
    log = tmp_path / "termination-log"  # the kubelet's file, here
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    torchrun = bin_dir / "torchrun"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "JOB_COMPLETION_INDEX": "0", CONFIG_ERROR_FILE.name: str(log)}
    torchrun.write_text(
        f'#!/bin/sh\necho "rank 0: resources.gpu=1: no usable GPU" >> "${CONFIG_ERROR_FILE.name}"\nexit 1\n'
    )
    torchrun.chmod(0o755)
    assert subprocess.run(train["command"], env=env).returncode == CONFIG_ERROR_EXIT_CODE
    log.unlink()
    torchrun.write_text("#!/bin/sh\nexit 1\n")  # a crash: JobSet restarts the group
    assert subprocess.run(train["command"], env=env).returncode == 1
    log.write_text("rank 0: written, but torchrun succeeded\n")
    torchrun.write_text("#!/bin/sh\nexit 0\n")
    assert subprocess.run(train["command"], env=env).returncode == 0
