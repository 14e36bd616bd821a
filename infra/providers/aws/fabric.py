"""EFA (AWS's Elastic Fabric Adapter) as the contract's neutral network fabric (`gpu.fabric`,
alchemist_jobs.contract.Fabric): its device resource, how many a GPU node has, its bandwidth
for the planner, and what NCCL needs to use it through the aws-ofi-nccl plugin.

NCCL's settings follow the AWS EFA user guide: libfabric's `efa` provider, GPUDirect RDMA
exactly where the devices do RDMA read (libfabric aborts a process told to use it on g5/g6),
fork safety for DataLoader workers, and the plugin by the one library name every aws-ofi-nccl
build installs (`libnccl-net-ofi.so`, its src/Makefile.am). The net's name (`NCCL_NET`) is not
set: it changed between plugin versions ("AWS Libfabric", then "Libfabric" from v1.16.0), and
a name no plugin has makes NCCL fail every communicator (nccl src/plugin/net.cc); the worker
reads it from the plugin it finds (alchemist_jobs/runtime/nccl_net.py).
"""

from __future__ import annotations

from typing import Any

EFA_RESOURCE = "vpc.amazonaws.com/efa"  # extended resource of the EFA device plugin
# AWS's figure per EFA interface: p4d.24xlarge 4 x 100 Gbit/s, p5.48xlarge 32 x 100 Gbit/s
EFA_GBIT_PER_DEVICE = 100.0
# What the training image needs for EFA: libfabric and aws-ofi-nccl, from this package's installer
# (fabric-install, by its path in the build context) through images/Dockerfile.train's neutral
# fabric hook; EFA installer 1.51.0 brings aws-ofi-nccl 1.22.0 and libfabric 2.7.0.
IMAGE_BUILD_ARGS = {"FABRIC_INSTALL": "infra/providers/aws/fabric-install", "FABRIC_VERSION": "1.51.0"}


def network_fabric(per_node: int, rdma_read: bool) -> dict[str, Any] | None:
    """The stack output's `gpu.fabric` for GPU nodes with `per_node` EFA interfaces (None: none)."""
    if per_node < 1:
        return None
    return {
        "name": "EFA",
        "resource": EFA_RESOURCE,
        "per_node": per_node,
        "gbit_per_device": EFA_GBIT_PER_DEVICE,
        "nccl_env": {
            "FI_PROVIDER": "efa",
            "FI_EFA_USE_DEVICE_RDMA": "1" if rdma_read else "0",
            "FI_EFA_FORK_SAFE": "1",
            "NCCL_NET_PLUGIN": "ofi",
        },
    }
