"""Facts about AWS GPU instance types the program needs: the accelerator label and EFA interfaces.

Data, not code, with its sources:
- EFA interfaces: the `maximumEfaInterfaces` of each type (EC2 DescribeInstanceTypes
  `NetworkInfo.EfaInfo`; the "Supported instance types" list of
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html and the accelerated-computing
  specifications, https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html).
  Only types listed here get EFA; others have none or are not listed yet.
- RDMA read: the instance families whose EFA devices do RDMA read (GPUDirect RDMA), the
  "RDMA read" column of that same "Supported instance types" list. libfabric's efa provider
  aborts when told to use device RDMA (FI_EFA_USE_DEVICE_RDMA=1) on a device without it,
  as g4dn, g5, g6 and g6e are; a family not listed is taken to have none (NCCL then stages
  through host memory: slower, never wrong).
- Accelerator label: the cluster autoscaler's AWS provider treats a node as a GPU node by the
  label `k8s.amazonaws.com/accelerator=<gpu-type>` (kubernetes/autoscaler,
  cluster-autoscaler/cloudprovider/aws/aws_cloud_provider.go `GPULabel`, and the provider's
  README, "GPU Node Groups", tag cluster-autoscaler-1.31.0). The value names the GPU model.
"""

from __future__ import annotations

ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"

# instance family -> the GPU model it carries (the accelerator label's value)
GPU_MODEL = {
    "p3": "nvidia-tesla-v100",
    "p3dn": "nvidia-tesla-v100",
    "p4d": "nvidia-a100",
    "p4de": "nvidia-a100",
    "p5": "nvidia-h100",
    "p5e": "nvidia-h200",
    "p5en": "nvidia-h200",
    "g4dn": "nvidia-tesla-t4",
    "g5": "nvidia-a10g",
    "g6": "nvidia-l4",
    "g6e": "nvidia-l40s",
}

# instance type -> maximum EFA interfaces
EFA_INTERFACES = {
    "p3dn.24xlarge": 1,
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
    "g4dn.8xlarge": 1, "g4dn.12xlarge": 1, "g4dn.16xlarge": 1, "g4dn.metal": 1,
    "g5.8xlarge": 1, "g5.12xlarge": 1, "g5.16xlarge": 1, "g5.24xlarge": 1, "g5.48xlarge": 1,
    "g6.8xlarge": 1, "g6.12xlarge": 1, "g6.16xlarge": 1, "g6.24xlarge": 1, "g6.48xlarge": 1,
    "g6e.8xlarge": 1, "g6e.12xlarge": 1, "g6e.16xlarge": 1, "g6e.24xlarge": 2, "g6e.48xlarge": 4,
}  # fmt: skip


# instance families whose EFA devices support RDMA read
EFA_RDMA_READ_FAMILIES = frozenset({"p4d", "p4de", "p5", "p5e", "p5en"})


def family(instance_type: str) -> str:
    return instance_type.split(".", 1)[0]


def gpu_model(instance_types: list[str]) -> str | None:
    """The accelerator label value of a node group: its one GPU model, or None when mixed or unknown."""
    models = {GPU_MODEL.get(family(t)) for t in instance_types}
    return models.pop() if len(models) == 1 and None not in models else None


def efa_interfaces(instance_type: str) -> int:
    """EFA interfaces of an instance type; 0 when it has none (or is not in the table)."""
    return EFA_INTERFACES.get(instance_type, 0)


def group_efa(instance_types: list[str]) -> int:
    """EFA interfaces every node of a group has: the smallest over its types (0 if any lacks EFA)."""
    return min((efa_interfaces(t) for t in instance_types), default=0)


def group_efa_rdma_read(instance_types: list[str]) -> bool:
    """Whether every type of a group has EFA with RDMA read (False for an empty list)."""
    return bool(instance_types) and all(
        efa_interfaces(t) and family(t) in EFA_RDMA_READ_FAMILIES for t in instance_types
    )
