"""Stack resolution: a stack name becomes the scheduler that runs jobs there.

`local` is built in and needs nothing but Python. Every other stack is a Pulumi stack whose
output `alchemist` (alchemist_jobs/contract.py) describes its cluster, read with
`pulumi stack output alchemist --json --show-secrets --stack NAME` (in $ALCHEMIST_PULUMI_DIR,
else the current directory, where Pulumi looks for the project), or from a JSON file given
with `--outputs FILE`. The output holds the cluster's credentials: it is read into memory,
never written, logged or shown.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from alchemist_jobs import environment as E
from alchemist_jobs.contract import StackOutput
from alchemist_jobs.errors import UserError
from alchemist_jobs.pulumi_project import project_stacks
from alchemist_jobs.rundir import default_root
from alchemist_jobs.scheduler import Scheduler
from alchemist_jobs.stack_kinds import LOCAL, kind_of

if TYPE_CHECKING:
    from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
    from alchemist_jobs.local_backend import LocalScheduler

OUTPUT_NAME = "alchemist"
PULUMI_TIMEOUT_S = 120
# Pulumi stack names, optionally qualified as org/project/stack.
_STACK_NAME = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+){0,2}")


def get_scheduler(
    stack: str = LOCAL, home: Path | None = None, outputs: Path | None = None, team: str | None = None
) -> Scheduler:
    """The scheduler for `--stack`; `home` is the local shared-file-system root; `team` the
    `--team` (else $ALCHEMIST_TEAM, else the stack's default team)."""
    if kind_of(stack).runs_here:
        if outputs is not None:
            raise UserError(
                "--outputs: the local stack has no stack outputs; drop --outputs "
                "or name a cluster stack with --stack"
            )
        no_team_on_local(team)
        return local_scheduler(home)
    return cluster_scheduler(resolve(stack, outputs, team))


def no_team_on_local(team: str | None) -> None:
    """`--team` on the local stack is a mistake ($ALCHEMIST_TEAM is for cluster stacks: ignored)."""
    if team is not None:
        raise UserError(
            f"--team {team}: the local stack has no teams; accepted: no --team on "
            "local, or a cluster stack with --stack"
        )


# The only places a scheduler is built: every command and the dashboard come through here.
def local_scheduler(home: Path | None = None) -> LocalScheduler:
    """The local stack's scheduler over `home` (default: $ALCHEMIST_HOME or ~/.alchemist)."""
    from alchemist_jobs.local_backend import LocalScheduler  # cluster commands skip it

    return LocalScheduler(Path(home) if home else default_root())


def cluster_scheduler(out: StackOutput) -> KubernetesScheduler:
    """A cluster stack's scheduler, from its validated `alchemist` output."""
    from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler  # local commands

    # skip the cluster backend's modules

    return KubernetesScheduler(out)


def resolve(stack: str, outputs: Path | None = None, team: str | None = None) -> StackOutput:
    """The stack's `alchemist` output, validated against the contract, as `team` (else
    $ALCHEMIST_TEAM, else the stack's default team) sees it; one line if not."""
    if not _STACK_NAME.fullmatch(stack):
        raise UserError(
            f"--stack {stack!r}: not a stack name; accepted: local or a Pulumi "
            "stack name (letters, digits, '-', '_', '.'; optionally org/project/)"
        )
    if outputs is not None:
        data, source = _read_outputs_file(Path(outputs)), str(outputs)
    else:
        data, source = _pulumi_output(stack), f"stack {stack}"
    out = StackOutput.parse(data, source)
    short = stack.rsplit("/", 1)[-1]
    if out.stack != short:
        raise UserError(
            f"{source}: holds the outputs of stack {out.stack!r}, not of --stack "
            f"{stack!r}; accepted: the `alchemist` output of stack {short!r}"
        )
    if team is not None:
        return out.for_team(team)
    chosen = E.TEAM.get()
    return out.for_team(chosen, f"{E.TEAM.name}={chosen}") if chosen else out


def _read_outputs_file(path: Path) -> dict:
    from alchemist_jobs.input_files import load_json, read_text

    try:
        data = load_json(read_text(path, "stack outputs", f"--outputs {path}"), f"--outputs {path}")
    except json.JSONDecodeError as e:
        raise UserError(
            f"--outputs {path}: line {e.lineno}: not JSON ({e.msg}); accepted: "
            f"the output of `pulumi stack output {OUTPUT_NAME} --json "
            "--show-secrets`"
        ) from None
    # Either the `alchemist` output itself or all outputs (`pulumi stack output --json`).
    if isinstance(data, dict) and OUTPUT_NAME in data and "stack" not in data:
        data = data[OUTPUT_NAME]
    return data


def _first_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    err = next((ln for ln in lines if ln.lower().startswith("error:")), lines[0] if lines else "")
    return err.removeprefix("error:").strip()[:300]


def _pulumi(args: list[str]) -> subprocess.CompletedProcess:
    exe = shutil.which("pulumi")
    assert exe is not None
    try:
        return subprocess.run(
            [exe, *args, "--non-interactive"],
            capture_output=True,
            text=True,
            timeout=PULUMI_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            cwd=E.PULUMI_DIR.get(),
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"`pulumi {' '.join(args[:2])}` did not answer within "
            f"{PULUMI_TIMEOUT_S} s (is the Pulumi backend reachable?)"
        ) from None


def known_stacks() -> list[str]:
    """Stack names `pulumi stack ls` knows, for error messages; empty if it cannot say."""
    proc = _pulumi(["stack", "ls", "--json"])
    try:
        return [s["name"] for s in json.loads(proc.stdout)] if proc.returncode == 0 else []
    except (ValueError, TypeError, KeyError):
        return []


def _pulumi_output(stack: str) -> dict:
    # Every Alchemist stack has its config file (stacks/Pulumi.<stack>.yaml): without the
    # CLI to ask, a name with none is a typo, said as such rather than asking for a CLI.
    names = project_stacks() if "/" not in stack else None
    if shutil.which("pulumi") is None:
        if names is not None and stack not in names:
            raise UserError(f"--stack {stack}: no such stack; accepted: {', '.join(['local', *names])}")
        if names is None and "/" not in stack:  # no checkout here to say which stacks exist
            raise UserError(
                f"--stack {stack}: no such stack here; accepted: local, a stack of an Alchemist "
                f"checkout (run from it, or set {E.PULUMI_DIR.name} to it), or --outputs FILE "
                f"holding its `pulumi stack output {OUTPUT_NAME} --json --show-secrets`"
            )
        raise UserError(
            f"--stack {stack}: reading a stack's outputs needs the Pulumi CLI, and `pulumi` is "
            "not on PATH; accepted: install it (https://www.pulumi.com/docs/install/), or pass "
            f"--outputs FILE holding `pulumi stack output {OUTPUT_NAME} --json --show-secrets "
            f"--stack {stack}`"
        )
    proc = _pulumi(["stack", "output", OUTPUT_NAME, "--json", "--show-secrets", "--stack", stack])
    if proc.returncode != 0:
        err = _first_error(proc.stderr)
        if "no stack named" in err:
            # those Pulumi knows, and the checkout's (a fresh one has initialised none yet)
            names = sorted(set(known_stacks()) | set(names or ()))
            accepted = (
                ", ".join(["local", *names])
                if names
                else "local, or a stack of this project (`pulumi stack ls`)"
            )
            raise UserError(f"--stack {stack}: no such stack; accepted: {accepted}")
        if "does not have output property" in err:
            raise UserError(
                f"--stack {stack}: the stack exports no output `{OUTPUT_NAME}`; "
                "accepted: a stack of Alchemist's infra/ that is up (`pulumi up "
                f"-s {stack}`)"
            )
        if "no Pulumi.yaml" in err:
            raise UserError(
                f"--stack {stack}: Pulumi found no project here ({err}); accepted: "
                "run from the Alchemist repository, or set "
                f"{E.PULUMI_DIR.name} to it, or pass --outputs FILE"
            )
        raise UserError(f"--stack {stack}: `pulumi stack output` failed: {err}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise UserError(
            f"--stack {stack}: `pulumi stack output {OUTPUT_NAME} --json` did not print JSON"
        ) from None
