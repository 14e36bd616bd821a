"""The Pulumi program: check the stack config, then the provider's cluster -> platform -> shared FS -> object store -> monitoring, images."""

from __future__ import annotations

from pathlib import Path

import pulumi

from alchemist_jobs import __version__
from infra import providers
from infra.config import StackConfig, parse
from infra.labels import MONITORING_NAMESPACE

REPO_ROOT = Path(__file__).resolve().parent.parent


def load_config(stack: str) -> StackConfig:
    """The stack's `alchemist:*` config as the engine passed it, validated before anything is built."""
    from pulumi.runtime import config as runtime_config

    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    secret = {k for k in raw if runtime_config.is_config_secret(k)}
    secret |= set(runtime_config.get_config_secret_keys_env())
    return parse(raw, secret, where=f"stacks/Pulumi.{stack}.yaml")


def run(stack: str, monitoring_dir: Path, repo_root: Path = REPO_ROOT) -> None:
    """Register every resource of the stack and export `alchemist`. Bad input raises before any."""
    from infra.images import Images, ImagesArgs
    from infra.monitoring import load_monitoring_files
    from infra.object_store import ObjectStore, ObjectStoreArgs
    from infra.object_store_network import store_egress
    from infra.output import build_output
    from infra.platform import Platform, PlatformArgs
    from infra.registry_access import RegistryAccess, RegistryAccessArgs
    from infra.shared_fs import PREPARE_NAMESPACE, SharedFileSystem, SharedFileSystemArgs

    cfg = load_config(stack)
    load_monitoring_files(monitoring_dir)  # a bad dashboard or rule file stops us here too
    provider = providers.get(cfg.provider)  # every provider-specific piece comes from it
    facts = provider.cluster(stack, cfg)
    on_cluster = pulumi.ResourceOptions(providers=[facts.provider])
    images = Images(
        "images",
        ImagesArgs(stack=stack, registry=facts.registry, repo_root=repo_root, version=__version__,
                   gpu_nodes=facts.gpus_per_node > 0, fabric_build_args=facts.fabric_build_args,
                   frameworks=tuple(cfg.images.frameworks)),
        opts=pulumi.ResourceOptions(depends_on=facts.registry.ready),
    )  # fmt: skip
    store_addresses = provider.object_store_network(cfg, facts) or store_egress(cfg)
    platform = Platform(
        "platform",
        PlatformArgs(
            teams=list(cfg.teams),
            pod_security=cfg.pod_security,
            depends_on=facts.depends_on,
            identities={t.name: cfg.identity(t.name) for t in cfg.teams},
            gpu_driver_by_operator=facts.gpu_driver_by_operator,
            toolkit_by_operator=facts.toolkit_by_operator,
            object_store=store_addresses,
            gpu_node_labels=dict(facts.gpu_node_labels),
        ),
        opts=on_cluster,
    )
    registry = RegistryAccess(
        "registry",
        RegistryAccessArgs(
            registry=facts.registry,
            namespaces=dict(platform.team_namespaces),
            existing_namespaces=[PREPARE_NAMESPACE],
        ),
        opts=on_cluster,
    )
    shared = SharedFileSystem(
        "shared-fs",
        SharedFileSystemArgs(
            fs=cfg.shared_fs,
            namespaces=dict(platform.team_namespaces),
            identities={t.name: cfg.identity(t.name) for t in cfg.teams},
            prepare_image=images.refs["train"],
            pull_secret=registry.pull_secret,
            pull_secret_ready=list(registry.secrets.values()),
            depends_on=facts.depends_on,
            backend=provider.shared_fs_backend(facts),
        ),
        opts=on_cluster,
    )
    objects = ObjectStore(
        "object-store",
        ObjectStoreArgs(
            stack=stack,
            config=cfg.object_store,
            secret_key=cfg.object_store_secret_key,
            team_keys=cfg.object_store_keys(),
            namespaces=platform.team_namespaces,
            depends_on=facts.depends_on,
            service_accounts=platform.job_service_accounts,
            default_team=cfg.default_team.name,
            backend=provider.object_store_backend(facts),
        ),
        opts=on_cluster,
    )
    monitoring = _monitoring(
        cfg, monitoring_dir, images, platform, shared, registry, on_cluster, provider.hidden_control_plane
    )
    pulumi.export(
        "alchemist",
        build_output(
            stack,
            cfg,
            facts,
            images.refs,
            monitoring.urls,
            pull_secret=registry.pull_secret,
            object_store=objects.output,
            access=provider.jobs_access(cfg, facts, platform, on_cluster),
        ),
    )


def _monitoring(
    cfg,
    monitoring_dir: Path,
    images,
    platform,
    shared,
    registry,
    on_cluster: pulumi.ResourceOptions,
    hidden_control_plane: tuple[str, ...],
):
    """The monitoring stack: each team's TensorBoard beside its claim, Grafana and the rules."""
    from infra.monitoring import Monitoring, MonitoringArgs

    password = cfg.grafana_admin_password
    return Monitoring(
        "monitoring",
        MonitoringArgs(
            job_namespaces=[t.name for t in cfg.teams],
            monitoring_dir=monitoring_dir,
            tensorboard_image=images.refs["train"],
            grafana_admin_password=pulumi.Output.secret(password.get_secret_value()) if password else None,
            alerts=cfg.alertmanager,
            depends_on=[platform.system_namespaces[MONITORING_NAMESPACE]],
            # each team's TensorBoard reads that team's own claim
            team_depends_on={
                t.name: [platform.team_namespaces[t.name], shared.claims[t.name], *registry.secrets.values()]
                for t in cfg.teams
            },
            team_identities={t.name: cfg.identity(t.name) for t in cfg.teams},
            pull_secret=registry.pull_secret,
            hidden_control_plane=hidden_control_plane,
        ),
        opts=on_cluster,
    )
