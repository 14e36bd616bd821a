"""The `existing` provider's stack config: the `alchemist:existing` section (a cluster a team already runs)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from infra.config import GPU_PRESENT_LABELS, LABEL_KEY, LABEL_VALUE, ConfigModel, Size, StackConfig


class ExistingConfig(ConfigModel):
    """A cluster a team already runs, reached with the `kubeconfig` secret."""

    gpus_per_node: Size = 0
    gpu_driver: Literal["host", "operator"] = "host"
    container_toolkit: Literal["host", "operator"] = "operator"
    gpu_node_selector: dict[str, str] = Field(
        default_factory=lambda: dict(GPU_PRESENT_LABELS),
        description="the labels the cluster's GPU nodes carry; GPU pods and Kueue's gpu flavor select them",
    )

    @field_validator("gpu_node_selector")
    @classmethod
    def _node_labels(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [f"{k}: {val}" for k, val in v.items()
               if len(k) > 317 or not re.match(LABEL_KEY, k) or not re.match(LABEL_VALUE, val)]  # fmt: skip
        if not v or bad:
            raise ValueError(
                "at least one node label `key: value` (a label key such as nvidia.com/gpu.present, "
                "a value of up to 63 letters, digits, '-', '_', '.')"
            )
        return v


def existing_config(cfg: StackConfig) -> ExistingConfig | None:
    """The stack's `alchemist:existing` section, if it has one."""
    section = cfg.section
    return section if isinstance(section, ExistingConfig) else None
