"""The facts every cluster component hands on (cluster_facts), under the name the rest of the program imports.

Which component a stack gets is its provider's choice (infra/providers/).
"""

from __future__ import annotations

from infra.cluster_facts import (  # noqa: F401  (re-exported: the rest of the program imports them here)
    GPU_NODE_LABELS,
    GPU_RESOURCE,
    GPU_TAINT,
    GPU_TOLERATIONS,
    KIND_SHARED_PATH,
    SYSTEM_NODE_LABELS,
    ClusterArgs,
    ClusterFacts,
    Registry,
)
