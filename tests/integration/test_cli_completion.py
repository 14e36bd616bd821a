"""Shell completion (`alchemist completion bash|zsh|fish`): the printed script, sourced in the
real shell, completes commands, flags, local run ids, stack names and job spec files, and a
TAB imports no heavy module."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alchemist_jobs.run_files import RunRecord
from alchemist_jobs.rundir import RunDir, runs_root, write_json_atomic
from tests.conftest import REPO, cli

RUN_ID = "digits-20260101-000000-0000abcd"


@pytest.fixture
def env(tmp_path: Path, home: Path) -> dict[str, str]:
    """PATH with an `alchemist` that runs this checkout, as the console script would."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "alchemist"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m alchemist_jobs "$@"\n')
    exe.chmod(0o755)
    return dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(REPO),
        ALCHEMIST_HOME=str(home),
        HOME=str(tmp_path),
    )


def _run(home: Path, run_id: str = RUN_ID) -> RunDir:
    """A run as the launcher leaves it: its directory, spec and run.json."""
    run = RunDir(runs_root(home) / run_id)
    run.create(exclusive=True)
    run.spec.write_text("name: digits\n")
    write_json_atomic(
        run.state_file,
        RunRecord(
            run_id=run.run_id, name="digits", state="succeeded", created=1000.0, workers=1, exit_codes=[0]
        ).model_dump(),
    )
    return run


# bash calls the function `complete -F` registered with the command's name, the word under
# the cursor and the one before it, with COMP_LINE, COMP_POINT, COMP_WORDS and COMP_CWORD set.
BASH_DRIVER = r"""
eval "$(alchemist completion bash)" || exit 3
spec=$(complete -p alchemist) || exit 4
fn=${spec##* -F }; fn=${fn%% *}
COMP_LINE=$LINE; COMP_POINT=${#COMP_LINE}; COMP_TYPE=9
read -ra COMP_WORDS <<< "$COMP_LINE"
[[ $COMP_LINE == *' ' ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
"$fn" alchemist "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""


def bash_complete(line: str, env: dict[str, str], cwd: Path = REPO) -> list[str]:
    proc = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", BASH_DRIVER],
        env=dict(env, LINE=line),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [c.strip() for c in proc.stdout.splitlines() if c.strip()]


def test_bash_completes_commands_and_flags(env):
    top = bash_complete("alchemist ", env)
    assert {"run", "status", "logs", "rm", "stack", "ui", "completion"} <= set(top)
    assert not [c for c in top if c.startswith("-")]  # flags once a word starts with '-'
    assert {"--debug", "--version", "--help"} <= set(bash_complete("alchemist --", env))
    assert bash_complete("alchemist st", env) == ["status", "stack"]
    assert {"--json", "--stack", "--home"} <= set(bash_complete("alchemist status --", env))
    assert bash_complete("alchemist completion ", env) == ["bash", "zsh", "fish"]
    assert bash_complete("alchemist stack d", env) == ["diff"]


def test_bash_completes_local_run_ids(env, home, tmp_path):
    _run(home)
    _run(home, "other-20260101-000000-00000001")
    (runs_root(home) / "not-a-run").mkdir()  # no spec.yaml: no run
    for command in ("status", "logs", "cancel", "rm"):
        assert bash_complete(f"alchemist {command} dig", env) == [RUN_ID], command
    assert set(bash_complete("alchemist logs ", env)) == {RUN_ID, "other-20260101-000000-00000001"}
    assert bash_complete(f"alchemist rm {RUN_ID} ", env) == ["other-20260101-000000-00000001"]
    other_home = tmp_path / "elsewhere"
    _run(other_home, "elsewhere-20260101-000000-00000002")
    assert bash_complete(f"alchemist status --home {other_home} ", env) == [
        "elsewhere-20260101-000000-00000002"
    ]
    # a cluster stack's runs are on its API server: nothing is guessed from local runs
    assert bash_complete("alchemist status --stack dev dig", env) == []


def test_bash_completes_stack_names(env, tmp_path):
    stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (REPO / "stacks").glob("Pulumi.*.yaml"))
    assert stacks
    assert bash_complete("alchemist run --stack ", env) == ["local", *stacks]
    assert bash_complete("alchemist ui --stack lo", env) == ["local"]
    assert bash_complete("alchemist stack diff ", env) == stacks
    # outside a checkout only the local stack is known
    assert bash_complete("alchemist status --stack ", env, cwd=tmp_path) == ["local"]


def test_bash_completes_job_spec_files(env, tmp_path):
    work = tmp_path / "work"
    (work / "jobs").mkdir(parents=True)
    for name in ("job.yaml", "train.py", "notes.txt", "outputs.json"):
        (work / name).write_text("")
    assert sorted(bash_complete("alchemist run ", env, cwd=work)) == ["job.yaml", "jobs/", "train.py"]
    assert sorted(bash_complete("alchemist plan ", env, cwd=work)) == ["job.yaml", "jobs/"]
    assert bash_complete("alchemist run job.yaml --outputs o", env, cwd=work) == ["outputs.json"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_through_compdef(env, home):
    """Real zsh with compinit: the script registers itself with compdef; _describe, which
    would draw the menu, is replaced by a function that prints what it was given."""
    _run(home)
    script = r"""
autoload -Uz compinit && compinit -u -D
eval "$(alchemist completion zsh)"
print -r -- "registered:$_comps[alchemist]"
_describe() { print -rl -- "${(@P)2}" }
for BUFFER in "alchemist st" "alchemist logs dig"; do
  words=(${=BUFFER}); CURSOR=${#BUFFER}; $_comps[alchemist]
done
"""
    proc = subprocess.run(
        ["zsh", "-f", "-c", script], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "registered:_python_argcomplete"
    assert lines[1:] == [
        "status:state and progress of one run",
        "stack:list, replicate and compare Pulumi stacks (stacks/)",
        f"{RUN_ID}:",
    ]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes(env, home):
    _run(home)
    script = (
        'alchemist completion fish | source; complete -C "alchemist st"; '
        'complete -C "alchemist cancel dig"; complete -C "alchemist run --stack lo"'
    )
    proc = subprocess.run(
        ["fish", "--no-config", "-c", script], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "stack\tlist, replicate and compare Pulumi stacks (stacks/)",
        "status\tstate and progress of one run",
        RUN_ID,
        "local",
    ]


@pytest.mark.parametrize(
    "line,reads_yaml",
    [
        ("alchemist ", False),
        ("alchemist logs ", False),
        ("alchemist run ", False),
        ("alchemist run --stack ", True),
    ],
)  # Pulumi.yaml
def test_a_tab_imports_no_heavy_module(line, reads_yaml, env, home, tmp_path):
    """What the shell runs on TAB, with Python's import log: neither torch nor pydantic, and
    YAML only to read the project's Pulumi.yaml (no defaults file here)."""
    _run(home)
    out = tmp_path / "completions"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "alchemist_jobs"],
        env=dict(
            env,
            _ARGCOMPLETE="1",
            COMP_LINE=line,
            COMP_POINT=str(len(line)),
            _ARGCOMPLETE_STDOUT_FILENAME=str(out),
        ),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(), "no completions written"
    imported = {
        ln.rsplit("|", 1)[-1].strip() for ln in proc.stderr.splitlines() if ln.startswith("import time:")
    }
    assert "alchemist_jobs.cli" in imported
    assert {"torch", "pydantic", "numpy"} & imported == set()
    assert ("yaml" in imported) == reads_yaml


def test_bad_shell_is_one_line_and_exit_2(home):
    proc = cli("completion", "tcsh", home=home)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert "'tcsh'" in proc.stderr and "'bash', 'zsh', 'fish'" in proc.stderr
