"""`python -m alchemist_jobs` is the `alchemist` command."""

import sys

from alchemist_jobs.cli import main

sys.exit(main())
