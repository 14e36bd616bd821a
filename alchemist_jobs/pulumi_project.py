"""Where the project's Pulumi stacks are: the checkout's Pulumi.yaml and its stack config
files (stacks/Pulumi.<stack>.yaml). Read by `alchemist stack` and by stacks.py, which names the
stacks there when a `--stack` is unknown; no CLI module is needed to know them."""

from __future__ import annotations

import re
from pathlib import Path

from alchemist_jobs import environment as E
from alchemist_jobs.errors import UserError


def repo_root(explicit: Path | None) -> Path:
    """The directory holding the project's Pulumi.yaml: --root, else $ALCHEMIST_PULUMI_DIR,
    else the nearest one upward."""
    if explicit is not None:
        if not (explicit / "Pulumi.yaml").is_file():
            raise UserError(f"--root {explicit}: no Pulumi.yaml there; accepted: the repository root")
        return explicit.resolve()
    given = E.PULUMI_DIR.get()
    if given is not None:
        if not (Path(given) / "Pulumi.yaml").is_file():
            raise UserError(
                f"{E.PULUMI_DIR.name}={given}: no Pulumi.yaml there; accepted: the "
                "root of an alchemist checkout"
            )
        return Path(given).resolve()
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / "Pulumi.yaml").is_file() and (d / "infra").is_dir():
            return d
    raise UserError(f"{here}: not inside an alchemist checkout (no Pulumi.yaml with infra/ above); "
                    f"run from the repository, pass --root or set {E.PULUMI_DIR.name}")  # fmt: skip


def stacks_dir(root: Path) -> Path:
    import yaml

    project = yaml.safe_load((root / "Pulumi.yaml").read_text()) or {}
    return root / project.get("stackConfigDir", ".")


def stack_names(root: Path) -> list[str]:
    """The stacks in stacks/ (a file whose name is no stack name is not one)."""
    names = (p.name[len("Pulumi.") : -len(".yaml")] for p in stacks_dir(root).glob("Pulumi.*.yaml"))
    return sorted(n for n in names if re.fullmatch(r"[A-Za-z0-9_.-]+", n))


def project_stacks() -> list[str] | None:
    """The stacks whose config files the Pulumi project here has (ALCHEMIST_PULUMI_DIR, else
    the nearest Pulumi.yaml with infra/ upward); None outside a checkout."""
    try:
        return stack_names(repo_root(E.PULUMI_DIR.get()))
    except (UserError, OSError, ValueError):
        return None
