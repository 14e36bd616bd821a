"""A kind cluster on the user's Docker, with a local registry, created through pulumi-command."""

from __future__ import annotations

import os

import pulumi
import pulumi_command as command
import pulumi_kubernetes as kubernetes
import yaml

from infra.cluster_facts import KIND_SHARED_PATH, SYSTEM_NODE_LABELS, ClusterArgs, ClusterFacts, Registry
from infra.providers.kind.config import kind_section
from infra.providers.kind.versions import LOCAL_REGISTRY_IMAGE, kind_node_image

KindClusterArgs = ClusterArgs


def kind_config(cluster_name: str, shared_dir: str, workers: int) -> str:
    """The kind cluster config: shared dir on every node, containerd reading registry hosts."""
    mounts = [{"hostPath": shared_dir, "containerPath": KIND_SHARED_PATH}]
    system = ",".join(f"{k}={v}" for k, v in SYSTEM_NODE_LABELS.items())
    nodes = [
        {
            "role": "control-plane",
            "extraMounts": mounts,
            "kubeadmConfigPatches": [
                "kind: InitConfiguration\nnodeRegistration:\n  kubeletExtraArgs:\n"
                f'    node-labels: "{system}"\n'
            ],
        }
    ]
    nodes += [{"role": "worker", "extraMounts": mounts} for _ in range(workers)]
    config = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": cluster_name,
        "nodes": nodes,
        # The local registry is reached through /etc/containerd/certs.d/<host>/hosts.toml.
        "containerdConfigPatches": [
            '[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"\n'
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


class KindCluster(pulumi.ComponentResource):
    """kind + a registry container on the user's Docker; ends in a kubernetes.Provider."""

    def __init__(self, name: str, args: KindClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:KindCluster", name, None, opts)
        cfg = args.cfg
        kind_cfg = kind_section(cfg)
        child = pulumi.ResourceOptions(parent=self)
        cluster_name = f"alchemist-{args.stack}"
        registry_name = f"{cluster_name}-registry"
        port = kind_cfg.registry_port
        shared_dir = os.path.expanduser(kind_cfg.shared_dir)

        self.registry = command.local.Command(
            f"{name}-registry",
            create=(
                f"mkdir -p {shared_dir} && "
                f"(docker inspect {registry_name} >/dev/null 2>&1 || docker run -d --restart=always "
                f"-p 127.0.0.1:{port}:5000 --name {registry_name} {LOCAL_REGISTRY_IMAGE})"
            ),
            delete=f"docker rm -f {registry_name}",
            opts=child,
        )
        self.cluster = command.local.Command(
            f"{name}-kind",
            create=(
                f"kind create cluster --name {cluster_name} --image {kind_node_image(cfg.kubernetes_version)}"
                " --config - --wait 120s"
            ),
            stdin=kind_config(cluster_name, shared_dir, kind_cfg.workers),
            delete=f"kind delete cluster --name {cluster_name}",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.registry]),
        )
        # Every node resolves localhost:<port> to the registry container on the kind network.
        hosts_toml = f'[host."http://{registry_name}:5000"]\\n'
        self.registry_wiring = command.local.Command(
            f"{name}-registry-wiring",
            create=(
                f"for node in $(kind get nodes --name {cluster_name}); do "
                f'docker exec "$node" mkdir -p /etc/containerd/certs.d/localhost:{port} && '
                f"printf '{hosts_toml}' | docker exec -i \"$node\" "
                f"cp /dev/stdin /etc/containerd/certs.d/localhost:{port}/hosts.toml; done; "
                f"docker network connect kind {registry_name} 2>/dev/null || true"
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster]),
        )
        kubeconfig_cmd = command.local.Command(
            f"{name}-kubeconfig",
            create=f"kind get kubeconfig --name {cluster_name}",
            logging=command.local.Logging.NONE,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.cluster], additional_secret_outputs=["stdout"]
            ),
        )
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(kubeconfig_cmd.stdout)
        self.provider = kubernetes.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, opts=child)
        self.facts = ClusterFacts(
            provider=self.provider,
            kubeconfig=self.kubeconfig,
            gpus_per_node=0,
            gpu_driver_by_operator=False,
            toolkit_by_operator=False,
            registry=Registry(
                prefix=f"localhost:{port}/alchemist", host=f"localhost:{port}", ready=[self.registry]
            ),
            depends_on=[self.registry_wiring],
        )
        self.register_outputs({"kubeconfig": self.kubeconfig, "cluster_name": cluster_name})
