"""A worker on an EFA pod finds NCCL's net plugin the way NCCL 2.29.7 does, or stops.

The plugins here are real shared libraries, compiled for the test, that export what NCCL
looks up (nccl v2.29.7-1: src/plugin/net/net_v*.cc dlsym `ncclNetPlugin_v<N>`; the struct's
first member is `const char* name`, src/include/plugin/net/net_v6.h .. net_v11.h). They are
found through LD_LIBRARY_PATH by dlopen, as NCCL finds /opt/amazon/ofi-nccl/lib in the image;
glibc reads LD_LIBRARY_PATH at process start, so those cases run a fresh worker process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alchemist_jobs.runtime import nccl_net

REPO = Path(__file__).resolve().parents[2]


def _plugin(directory: Path, filename: str, body: str, *flags: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler on PATH: scripts/setup installs gcc")
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / (filename + ".c")
    src.write_text(body)
    out = directory / filename
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True)
    return out


def _net(version: int, name: str) -> str:
    return (
        f"typedef struct {{ const char* name; void* init; }} net_t;\n"
        f'net_t ncclNetPlugin_v{version} = {{ "{name}", 0 }};\n'
    )


def _worker(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """One script worker, as torchrun starts it on a pod: bootstrap, then the user's script."""
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "spec.yaml").write_text("name: t\nmetrics: false\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import os, pathlib\npathlib.Path('ran.txt').write_text(os.environ.get('NCCL_NET', '<unset>'))\n"
    )
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "ALCHEMIST_"))}
    full.update(
        ALCHEMIST_RUN_DIR=str(run),
        ALCHEMIST_LOG_TO_CONSOLE="1",
        RANK="0",
        LOCAL_RANK="0",
        PYTHONPATH=str(REPO),
        **env,
    )
    return subprocess.run(
        [sys.executable, "-m", "alchemist_jobs.runtime.bootstrap", "script", str(script)],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_efa_worker_without_the_plugin_stops_with_one_line_before_the_script(tmp_path):
    empty = tmp_path / "lib"
    empty.mkdir()
    from alchemist_jobs.environment import CONFIG_ERROR_FILE
    from alchemist_jobs.runtime.config_error import CONFIG_ERROR_EXIT_CODE

    message = tmp_path / "termination-log"  # the container's terminationMessagePath
    done = _worker(
        tmp_path,
        {
            "ALCHEMIST_NCCL_NET_PLUGIN": "required",
            "NCCL_NET_PLUGIN": "ofi",
            "LD_LIBRARY_PATH": str(empty),
            CONFIG_ERROR_FILE.name: str(message),
        },
    )
    # A configuration error: the code that fails a cluster run at once (no restarts).
    assert done.returncode == CONFIG_ERROR_EXIT_CODE, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("alchemist: gpu.fabric:")
    assert "libnccl-net-ofi.so: not found" in lines[0] and "NCCL_NET_PLUGIN=none" in lines[0]
    assert message.read_text() == f"rank 0: {lines[0].removeprefix('alchemist: ')}\n"
    assert not (tmp_path / "ran.txt").exists()


def test_an_efa_worker_pins_nccl_net_to_the_name_of_the_plugin_it_finds(tmp_path):
    lib = tmp_path / "lib"
    _plugin(lib, "libnccl-net-ofi.so", _net(11, "Libfabric"))
    done = _worker(
        tmp_path,
        {"ALCHEMIST_NCCL_NET_PLUGIN": "required", "NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": str(lib)},
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ran.txt").read_text() == "Libfabric"
    assert "NCCL net plugin 'Libfabric' (ncclNetPlugin_v11, libnccl-net-ofi.so)" in done.stdout


def test_a_worker_whose_pod_needs_no_plugin_or_whose_spec_opts_out_is_not_checked(tmp_path):
    empty = tmp_path / "lib"
    empty.mkdir()
    for env in ({}, {"ALCHEMIST_NCCL_NET_PLUGIN": "required", "NCCL_NET_PLUGIN": "none"}):
        done = _worker(tmp_path, {"LD_LIBRARY_PATH": str(empty), **env})
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "ran.txt").read_text() == "<unset>"


def test_an_older_plugin_is_found_by_its_older_symbol_and_keeps_its_own_name(tmp_path):
    old = _plugin(tmp_path, "libnccl-net.so", _net(8, "AWS Libfabric"))
    env = {"ALCHEMIST_NCCL_NET_PLUGIN": "required", "NCCL_NET_PLUGIN": str(old)}
    plugin = nccl_net.require(env)
    assert (plugin.name, plugin.version, env["NCCL_NET"]) == ("AWS Libfabric", 8, "AWS Libfabric")
    env = {
        "ALCHEMIST_NCCL_NET_PLUGIN": "required",
        "NCCL_NET_PLUGIN": str(old),
        "NCCL_NET": "Socket",
    }  # the spec's own choice stands
    nccl_net.require(env)
    assert env["NCCL_NET"] == "Socket"


def test_a_library_that_is_no_plugin_or_cannot_load_is_named_with_the_reason(tmp_path):
    other = _plugin(tmp_path / "a", "libnccl-net-x.so", "int unrelated = 1;\n")
    dep = _plugin(tmp_path / "b", "libdep.so", "int dep = 1;\n")
    needs = _plugin(
        tmp_path / "b",
        "libnccl-net-y.so",
        _net(11, "Libfabric") + "extern int dep;\nint uses_dep(void) { return dep; }\n",
        f"-L{dep.parent}",
        "-ldep",
    )
    dep.unlink()  # the plugin is there; a library it needs (libfabric, say) is not
    env = {"ALCHEMIST_NCCL_NET_PLUGIN": "required", "NCCL_NET_PLUGIN": f"{other},{needs}"}
    with pytest.raises(nccl_net.NetPluginError) as e:
        nccl_net.require(env)
    text = str(e.value)
    assert f"{other}: no ncclNetPlugin_v6..v11 symbol" in text
    assert f"{needs}: libdep.so: cannot open shared object file" in text
    assert "NCCL_NET" not in env
