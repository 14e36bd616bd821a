"""The system tier's fixtures, defined in system_tier.py: a module of its own name, because every
tier's conftest is imported as `conftest` and the test modules import the tier's helpers by name."""

from system_tier import jobs, platforms, worlds  # noqa: F401
