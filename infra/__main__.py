"""What `pulumi up` runs (`main: infra/`): the program, with a bad stack config as one clean error line."""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # Pulumi runs this directory; `infra` is a package of the repo
    sys.path.insert(0, str(REPO_ROOT))

import pulumi  # noqa: E402

from infra import program  # noqa: E402
from infra.config import StackConfigError  # noqa: E402

try:
    program.run(pulumi.get_stack(), monitoring_dir=REPO_ROOT / "monitoring")
except StackConfigError as e:
    # RunError: the CLI prints the message alone, without a traceback, and fails the update.
    raise pulumi.RunError(str(e)) from None
