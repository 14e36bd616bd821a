"""Policy pack entry point: `pulumi up --policy-pack infra/policy` runs this."""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # the pack imports the same functions the tests use
    sys.path.insert(0, str(REPO_ROOT))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from infra.policy.pack import build_policies  # noqa: E402

PolicyPack(name="alchemist", enforcement_level=EnforcementLevel.MANDATORY, policies=build_policies())
