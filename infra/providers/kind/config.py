"""The kind provider's stack config: the `alchemist:kind` section (every key has a default)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from infra.config import ConfigModel, StackConfig


class KindConfig(ConfigModel):
    """A kind cluster on the user's Docker (stack `dev`)."""

    workers: Annotated[int, Field(ge=0, le=8)] = 1
    registry_port: Annotated[int, Field(ge=1024, le=65535)] = 5001
    shared_dir: str = Field("~/.alchemist/kind-shared", description="host directory shared as /shared")


def kind_section(cfg: StackConfig) -> KindConfig:
    """The stack's `alchemist:kind` section, or its defaults when the stack leaves it out."""
    section = cfg.section
    return section if isinstance(section, KindConfig) else KindConfig.model_validate({})
