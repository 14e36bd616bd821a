"""The stacks every Kubernetes manifest test runs against: one `alchemist` output per planned
stack (tests/fixtures/stack_outputs/<stack>.json) and the stack's Kubernetes minor.

Every manifest test iterates over `stack_outputs()`; point it at real rendered stacks by
setting ALCHEMIST_TEST_STACK_OUTPUTS to a directory of the same shape (<stack>.json files
holding `pulumi stack output alchemist --json --show-secrets`, plus versions.json).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from alchemist_jobs.contract import StackOutput

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "stack_outputs"
# Kubernetes minors the stacks may run (infra/versions.py KUBERNETES_VERSIONS).
SUPPORTED_KUBERNETES = ("1.32", "1.33", "1.34", "1.35")


@dataclass(frozen=True)
class StackCase:
    name: str
    output: StackOutput
    kubernetes: str  # "1.35"
    path: Path

    @property
    def schema_version(self) -> str:
        """The version string kubernetes_validate wants: "1.35.0"."""
        return f"{self.kubernetes}.0"


def stacks_dir() -> Path:
    return Path(os.environ.get("ALCHEMIST_TEST_STACK_OUTPUTS") or FIXTURES)


def stack_outputs() -> list[StackCase]:
    """Every stack's `alchemist` output, parsed with the contract, with its Kubernetes minor."""
    base = stacks_dir()
    versions = json.loads((base / "versions.json").read_text())
    out = []
    for path in sorted(base.glob("*.json")):
        if path.name == "versions.json":
            continue
        data = json.loads(path.read_text())
        data = data.get("alchemist", data)  # `pulumi stack output --json` of all outputs, too
        out.append(StackCase(name=path.stem, output=StackOutput.parse(data, str(path)),
                             kubernetes=versions[path.stem], path=path))
    assert out, f"no stack outputs under {base}"
    return out


def stack(name: str) -> StackCase:
    return next(s for s in stack_outputs() if s.name == name)
