"""The typed stack-config schema, checked before any resource is registered.

A stack's config is the `alchemist:*` keys of `stacks/Pulumi.<stack>.yaml`. `parse` turns
them into one frozen `StackConfig` or raises `StackConfigError`: one line naming the key,
the bad value and what is accepted. Importing this module needs pydantic only (no pulumi),
so `alchemist stack replicate` validates a replica with the same code as `pulumi up`.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

import infra.providers.registry as providers
from alchemist_jobs.frameworks import FRAMEWORKS
from infra.providers.aws.instance_types import efa_interfaces, group_efa
from infra.versions import K3S_VERSIONS, KUBERNETES_VERSIONS, k3s_installer

NAMESPACE = "alchemist"
# Keys whose values are secrets: they must be set with `pulumi config set --secret`, and no
# message ever shows their value.
SECRET_KEYS = (
    "kubeconfig",
    "sshPrivateKey",
    "registryPassword",
    "grafanaAdminPassword",
    "objectStoreSecretKey",
    "objectStoreTeamSecretKeys",
)
# Namespaces the platform itself owns; a team may not take one of these names.
SYSTEM_NAMESPACES = (
    "default", "kube-system", "kube-public", "kube-node-lease",
    "monitoring", "gpu-operator", "kueue-system", "jobset-system",
)  # fmt: skip

DnsLabel = Annotated[str, Field(pattern=r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$")]
Quantity = Annotated[str, Field(pattern=r"^[1-9][0-9]*(Mi|Gi|Ti)$")]
Size = Annotated[int, Field(ge=0, le=1000)]
IAM_PRINCIPAL = r"^arn:aws(-[a-z]+)*:iam::[0-9]{12}:(role|user)/[\w+=,.@/-]+$"
# Networks no deployer can come from (RFC 5737 documentation ranges and the like): a public
# API endpoint open only to them is unreachable, and `pulumi up` times out after the cluster.
NOT_A_DEPLOYER_NETWORK = "a public network you deploy from, such as your egress address/32"


class StackConfigError(Exception):
    """A bad stack config: one line naming the key, the value and what is accepted."""

    def __init__(self, key: str, value: Any, accepted: str, *, missing: bool = False,
                 unknown: bool = False) -> None:  # fmt: skip
        self.key, self.value, self.accepted = key, value, accepted
        if missing:
            line = f"{key} is missing; accepted: {accepted}"
        elif unknown:
            line = f"{key} is not a known key; accepted keys here: {accepted}"
        else:
            line = f"{key} = {_show(key, value)} is not accepted; accepted: {accepted}"
        super().__init__(line)


def _show(key: str, value: Any) -> str:
    """A value as the error shows it: secrets never, long values cut."""
    if any(key == f"{NAMESPACE}:{s}" or key.startswith(f"{NAMESPACE}:{s}.") for s in SECRET_KEYS):
        return "<secret>"
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class Quota(_Model):
    """What one team's jobs may use at once: Kueue nominal quota and the namespace's ResourceQuota."""

    gpu: Size = Field(description="GPUs (nvidia.com/gpu), an integer >= 0")
    cpu: Annotated[int, Field(ge=1, le=100000)] = Field(description="CPU cores, an integer >= 1")
    memory: Quantity = Field(description="memory as a quantity such as 256Gi")


class Team(_Model):
    """A team: its namespace, LocalQueue and ClusterQueue all carry this name."""

    name: DnsLabel = Field(description="a DNS label such as research (lower case, digits, '-')")
    quota: Quota = Field(description="{gpu, cpu, memory}")
    groups: list[str] = Field(
        default_factory=list,
        description="identity-provider groups allowed to submit jobs (default alchemist:<team>)",
    )
    uid: Annotated[int, Field(ge=1000, le=2**31 - 1)] | None = Field(
        None,
        description="POSIX uid the team's job pods run as and own their subtree with (default 1000 + index)",
    )
    gid: Annotated[int, Field(ge=1000, le=2**31 - 1)] | None = Field(
        None, description="POSIX gid of the team's job pods and subtree (default: the uid)"
    )
    principals: list[Annotated[str, Field(pattern=IAM_PRINCIPAL)]] = Field(
        default_factory=list,
        description="IAM role or user ARNs (arn:aws:iam::<account>:role/<name>) that submit for the team (aws only)",
    )
    object_store_access_key_id: str | None = Field(
        None,
        min_length=1,
        description="the team's own access key id on the S3-compatible service (not aws), which the service's "
        "admin restricts to the prefix <team>/; its secret key in alchemist:objectStoreTeamSecretKeys",
    )


class KindConfig(_Model):
    """A kind cluster on the user's Docker (stack `dev`)."""

    workers: Annotated[int, Field(ge=0, le=8)] = 1
    registry_port: Annotated[int, Field(ge=1024, le=65535)] = 5001
    shared_dir: str = Field("~/.alchemist/kind-shared", description="host directory shared as /shared")


class OnpremHost(_Model):
    """One machine k3s is installed on over SSH."""

    name: DnsLabel = Field(description="node name, a DNS label")
    address: str = Field(min_length=1, description="IP address or DNS name reachable over SSH")
    role: Literal["server", "agent"] = Field(description="'server' or 'agent'")
    gpus: Size = Field(0, description="GPUs on this host; > 0 makes it a GPU agent")
    host_key: str | None = Field(
        None,
        pattern=r"^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|ssh-rsa) [A-Za-z0-9+/]+={0,3}$",
        description="the host's public SSH key, such as 'ssh-ed25519 AAAA...' (ssh-keyscan -t ed25519 HOST)",
    )


class OnpremConfig(_Model):
    """k3s over SSH on a list of hosts; GPU hosts join as agents with the NVIDIA runtime."""

    ssh_user: str = Field(min_length=1, description="the SSH user (needs passwordless sudo)")
    ssh_port: Annotated[int, Field(ge=1, le=65535)] = 22
    hosts: list[OnpremHost] = Field(min_length=1, description="a list of {name, address, role, gpus}")
    api_address: str | None = Field(None, description="address clients use for the API server")
    gpu_driver: Literal["host", "operator"] = Field(
        "host", description="'host' (driver preinstalled) or 'operator' (GPU Operator installs it)"
    )
    k3s_installer_sha256: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        alias="k3sInstallerSha256",
        description="the sha256 of k3s's install.sh at the pinned release, 64 lowercase hex digits",
    )


# A node label (apimachinery validation.IsQualifiedName and IsValidLabelValue).
LABEL_KEY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
# What the GPU Operator, which the platform installs on every stack, labels every node Node
# Feature Discovery found an NVIDIA GPU on (gpu-operator v25.10.1 controllers/state_manager.go).
GPU_PRESENT_LABELS = {"nvidia.com/gpu.present": "true"}


class ExistingConfig(_Model):
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


class NodePool(_Model):
    """An EKS managed node group's instance type and autoscaling bounds."""

    instance_type: str = Field(min_length=1)
    min_size: Size = 1
    max_size: Annotated[int, Field(ge=1, le=1000)] = 3
    desired_size: Size = 1


class GpuPool(_Model):
    """The GPU managed node group: NVIDIA AMI, tainted for GPU work, scaled by the autoscaler."""

    instance_types: list[Annotated[str, Field(pattern=r"^(g|p)[0-9][a-z0-9-]*\.[0-9a-z]+$")]] = Field(
        min_length=1, description="GPU instance types such as g5.12xlarge or p4d.24xlarge"
    )
    ami_type: str = Field("AL2023_x86_64_NVIDIA", description="AL2023_x86_64_NVIDIA")
    gpus_per_node: Annotated[int, Field(ge=1, le=16)] = Field(description="GPUs per node, 1 to 16")
    min_size: Size = 0
    max_size: Annotated[int, Field(ge=1, le=1000)] = 2
    desired_size: Size = 0
    disk_size_gib: Annotated[int, Field(ge=50, le=16384)] = Field(200, alias="diskSizeGiB")
    capacity_type: Literal["ON_DEMAND", "SPOT"] = "ON_DEMAND"
    require_imdsv2: bool = Field(True, description="true (policy imdsv2-on-gpu-nodes requires it)")
    efa: bool | None = Field(
        None,
        description="true, false, or unset: on when every instance type has EFA (infra/providers/aws/instance_types.py)",
    )

    @property
    def efa_interfaces(self) -> int:
        """EFA interfaces each GPU node gets: 0 when EFA is off or a type lacks it."""
        return 0 if self.efa is False else group_efa(list(self.instance_types))


class AwsConfig(_Model):
    """VPC + EKS (pulumi-eks) with a system and a GPU managed node group."""

    region: str = Field(
        pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", description="an AWS region such as us-west-2"
    )
    availability_zones: list[str] = Field(
        min_length=2, max_length=6, description="2 to 6 zones of the region"
    )
    vpc_cidr: ipaddress.IPv4Network = Field(description="an IPv4 /16 to /20 such as 10.40.0.0/16")
    endpoint_public_access: bool = True
    public_access_cidrs: list[ipaddress.IPv4Network] = Field(
        default_factory=list, description="networks allowed to reach the public API endpoint"
    )
    system_nodes: NodePool = NodePool(instance_type="m6i.large", min_size=2, max_size=4, desired_size=2)
    gpu_nodes: GpuPool = Field(description="{instanceTypes, gpusPerNode, minSize, maxSize, ...}")


class EfsFs(_Model):
    kind: Literal["efs"]
    encrypted: bool = Field(True, description="true (policy storage-encrypted requires it)")
    throughput_mode: Literal["elastic", "bursting"] = "elastic"


class FsxLustreFs(_Model):
    kind: Literal["fsx-lustre"]
    storage_capacity_gib: Annotated[int, Field(ge=1200, le=100800, multiple_of=1200)] = Field(
        1200, alias="storageCapacityGiB"
    )
    deployment_type: Literal["SCRATCH_2", "PERSISTENT_2"] = "SCRATCH_2"
    per_unit_storage_throughput: Literal[125, 250, 500, 1000] = 250


class NfsFs(_Model):
    kind: Literal["nfs"]
    server: str = Field(min_length=1, description="the NFS server's address")
    share: str = Field(pattern=r"^/", description="the exported path, such as /export/alchemist")


class HostPathFs(_Model):
    kind: Literal["hostpath"]


SharedFs = Annotated[EfsFs | FsxLustreFs | NfsFs | HostPathFs, Field(discriminator="kind")]


def _optional_framework(name: str) -> str:
    """A framework the training image may add to torch: one of alchemist_jobs/frameworks.py's
    FRAMEWORKS with an extra (its lock section and image build value), asked at each check."""
    optional = [n for n, fw in FRAMEWORKS.items() if fw.extra]
    if name not in optional:
        shown = [repr(n) for n in optional]
        raise ValueError(" or ".join([", ".join(shown[:-1]), shown[-1]] if len(shown) > 1 else shown))
    return name


class ImagesConfig(_Model):
    """Where the training and interactive images are pushed (ECR on AWS, kind's registry on dev)."""

    registry: str | None = Field(None, description="a registry/prefix such as registry.lab:5000/alchemist")
    registry_user: str | None = None
    registry_insecure: bool = Field(
        False,
        description="true when the registry speaks plain HTTP (k3s nodes are told so in registries.yaml)",
    )
    frameworks: list[Annotated[str, AfterValidator(_optional_framework)]] = Field(
        default_factory=list,
        description="training frameworks besides torch in the training image: tensorflow, jax (docs/frameworks.md)",
    )


# Receiver integrations of Alertmanager 0.28 (the one kube-prometheus-stack 75.15.1 runs;
# prometheus/alertmanager config/config.go, type Receiver).
ALERTMANAGER_INTEGRATIONS = tuple(f"{k}_configs" for k in (
    "discord", "email", "jira", "msteams", "msteamsv2", "opsgenie", "pagerduty", "pushover",
    "rocketchat", "slack", "sns", "telegram", "victorops", "webex", "webhook", "wechat"))  # fmt: skip


class AlertmanagerConfig(_Model):
    """Where alerts go. Without this key they go nowhere (the chart's `null` receiver): they
    show in Alertmanager and Grafana only."""

    receivers: list[dict[str, Any]] = Field(
        min_length=1,
        description="Alertmanager receivers, such as [{name: oncall, webhook_configs: [{url_file: ...}]}]",
    )
    route: dict[str, Any] | None = Field(
        None, description="an Alertmanager route (default: every alert to the first receiver)"
    )
    secrets: list[DnsLabel] = Field(
        default_factory=list,
        description="Secrets of the monitoring namespace, mounted at /etc/alertmanager/secrets/<name>/",
    )

    @model_validator(mode="after")
    def _receivers_are_alertmanagers(self) -> AlertmanagerConfig:
        names = []
        for r in self.receivers:
            name = r.get("name")
            if not isinstance(name, str) or not name or name == "null" or name in names:
                raise ValueError(f"receiver name {name!r}: a unique non-empty name other than 'null'")
            names.append(name)
            extra = sorted(set(r) - {"name", *ALERTMANAGER_INTEGRATIONS})
            if extra or not set(r) & set(ALERTMANAGER_INTEGRATIONS):
                raise ValueError(f"receiver {name}: keys {extra or sorted(r)}; accepted: name and one or more of "
                                 + ", ".join(ALERTMANAGER_INTEGRATIONS))  # fmt: skip
        target = (self.route or {}).get("receiver")
        if target is not None and target not in names:
            raise ValueError(f"route.receiver {target!r}: one of the receivers {names}")
        return self


class ObjectStoreConfig(_Model):
    """Object storage for datasets (infra/object_store.py). On AWS the stack creates the bucket
    (`bucket` optionally names it); elsewhere these name an existing S3-compatible service."""

    endpoint: str | None = Field(
        None,
        pattern=r"^https?://[^\s/]+(:[0-9]+)?/?$",
        description="the S3 API URL, such as https://minio.lab:9000",
    )
    bucket: str | None = Field(
        None,
        pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
        description="an S3 bucket name (3-63 of a-z 0-9 . -)",
    )
    region: str = Field("us-east-1", min_length=1, description="the region the service signs requests for")
    access_key_id: str | None = Field(
        None, min_length=1, description="with the secret alchemist:objectStoreSecretKey"
    )
    # Job pods reach the store through a NetworkPolicy, which matches addresses, not names.
    cidrs: list[ipaddress.IPv4Network] = Field(
        default_factory=list,
        description="the addresses the endpoint's host resolves to, such as 10.20.0.9/32",
    )


class StackConfig(_Model):
    """All `alchemist:*` keys of one stack."""

    provider: str = Field(description="a provider of infra/providers/")
    kubernetes_version: Literal[KUBERNETES_VERSIONS] = Field(  # type: ignore[valid-type]
        description=" or ".join(repr(v) for v in KUBERNETES_VERSIONS) + " (a quoted string)"
    )
    teams: list[Team] = Field(min_length=1, description="a list of {name, quota: {gpu, cpu, memory}}")
    pod_security: Literal["restricted", "baseline", "privileged"] = "restricted"
    shared_fs: SharedFs = Field(description="{kind: efs|fsx-lustre|nfs|hostpath, ...}")
    images: ImagesConfig = Field(default_factory=lambda: ImagesConfig.model_validate({}))
    allow_open_endpoints: bool = Field(
        False, description="true only to let SSH or API endpoints accept 0.0.0.0/0"
    )
    kind: KindConfig | None = None
    onprem: OnpremConfig | None = None
    existing: ExistingConfig | None = None
    aws: AwsConfig | None = None
    kubeconfig: SecretStr | None = None
    ssh_private_key: SecretStr | None = None
    registry_password: SecretStr | None = None
    grafana_admin_password: SecretStr | None = None
    alertmanager: AlertmanagerConfig | None = None
    object_store: ObjectStoreConfig | None = None
    object_store_secret_key: SecretStr | None = None
    # {team: secret key} (YAML or JSON) for the teams that set objectStoreAccessKeyId
    object_store_team_secret_keys: SecretStr | None = None

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, value: str) -> str:
        if value not in providers.names():
            raise ValueError(_choices(providers.names()))
        return value

    @property
    def default_team(self) -> Team:
        """Jobs go to the first team unless they name another."""
        return self.teams[0]

    def object_store_keys(self) -> dict[str, tuple[str, SecretStr]]:
        """Each team's S3 key pair on a non-AWS store: its own, else the stack's (at most one team
        may have the stack's: _check_object_store); teams without either get none."""
        own = _team_secret_keys(self)
        out = {}
        store = self.object_store
        for team in self.teams:
            if team.object_store_access_key_id is not None:
                out[team.name] = (team.object_store_access_key_id, own[team.name])
            elif (
                store is not None
                and store.access_key_id is not None
                and self.object_store_secret_key is not None
            ):
                out[team.name] = (store.access_key_id, self.object_store_secret_key)
        return out

    def identity(self, team: str) -> tuple[int, int]:
        """The POSIX (uid, gid) of a team's job pods and shared-FS subtree: 1000 + its index by default."""
        for i, t in enumerate(self.teams):
            if t.name == team:
                uid = t.uid if t.uid is not None else 1000 + i
                return uid, t.gid if t.gid is not None else uid
        raise KeyError(team)


def pulumi_value(value: Any) -> str:
    """A YAML config value as the Pulumi engine hands it to a program: a string."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value)


def parse(config: dict[str, str], secret_keys: set[str] | frozenset[str] = frozenset(),
          where: str = "") -> StackConfig:  # fmt: skip
    """Validate raw engine config (`alchemist:key` -> string) into a StackConfig.

    Raises StackConfigError (prefixed with `where`) for the first problem found.
    """
    try:
        return _parse(config, set(secret_keys))
    except StackConfigError as e:
        if where:
            e.args = (f"{where}: {e.args[0]}",)
        raise


def _parse(config: dict[str, str], secret_keys: set[str]) -> StackConfig:
    fields = {f.alias or n: f for n, f in StackConfig.model_fields.items()}  # aliases: camelCase
    data: dict[str, Any] = {}
    for full_key, raw in sorted(config.items()):
        ns, _, key = full_key.partition(":")
        if ns == "pulumi":  # engine settings, not ours
            continue
        if ns != NAMESPACE or key not in fields:
            raise StackConfigError(full_key, None, f"{NAMESPACE}:" + f", {NAMESPACE}:".join(fields),
                                   unknown=True)  # fmt: skip
        is_secret = full_key in secret_keys
        if key in SECRET_KEYS and not is_secret:
            raise StackConfigError(
                full_key, "<plain text>",
                f"a secret: `pulumi config set --secret {full_key} ...` (it is never stored in clear)",
            )  # fmt: skip
        if key not in SECRET_KEYS and is_secret:
            raise StackConfigError(full_key, "<secret>", "a plain value; only "
                                   + ", ".join(SECRET_KEYS) + " are secrets")  # fmt: skip
        data[key] = _decode(full_key, raw) if key not in SECRET_KEYS else raw
    try:
        cfg = StackConfig.model_validate(data)
    except ValidationError as e:
        raise _one_line(e) from None
    _check_consistency(cfg)
    return cfg


def _decode(key: str, raw: Any) -> Any:
    """Objects and lists reach a program as JSON text; decode them, leave scalars as text."""
    if isinstance(raw, str) and raw[:1] in ("{", "["):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            raise StackConfigError(key, raw, "valid YAML (a mapping or list)") from None
    return raw


def _one_line(e: ValidationError) -> StackConfigError:
    err = e.errors(include_url=False)[0]
    loc = [p for p in err["loc"]]
    # A discriminated union puts the tag in the location (sharedFs.nfs.server): drop it.
    clean: list[str] = []
    for i, p in enumerate(loc):
        if i and loc[i - 1] == "sharedFs" and p in ("efs", "fsx-lustre", "nfs", "hostpath"):
            continue
        clean.append(f"[{p}]" if isinstance(p, int) else str(p))
    key = f"{NAMESPACE}:" + ".".join(clean).replace(".[", "[")
    kind = err["type"]
    if kind == "missing":
        return StackConfigError(key, None, _describe(loc), missing=True)
    if kind == "extra_forbidden":
        return StackConfigError(key, None, ", ".join(_aliases_at(loc[:-1])), unknown=True)
    if kind == "union_tag_invalid":
        tags = err.get("ctx", {}).get("expected_tags", "")
        return StackConfigError(key + ".kind", err["input"].get("kind"), f"one of {tags}")
    if kind == "union_tag_not_found":
        return StackConfigError(key + ".kind", None, "efs, fsx-lustre, nfs or hostpath", missing=True)
    msg = err["msg"]
    if kind == "string_pattern_mismatch" and _describe(loc) != _NO_DESCRIPTION:
        msg = _describe(loc)
    for prefix in ("Input should be ", "Value error, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return StackConfigError(key, err.get("input"), msg)


def _model_at(loc: list[Any]) -> type[BaseModel] | None:
    model: Any = StackConfig
    for p in loc:
        if isinstance(p, int) or model is None:
            continue
        field = next((f for f in model.model_fields.values() if f.alias == p), None)
        if field is None:
            # a discriminated-union tag such as "nfs"
            model = {"efs": EfsFs, "fsx-lustre": FsxLustreFs, "nfs": NfsFs, "hostpath": HostPathFs}.get(p)
            continue
        model = _inner_model(field.annotation)
    return model


def _inner_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _aliases_at(loc: list[Any]) -> list[str]:
    model = _model_at(loc)
    return [f.alias or n for n, f in model.model_fields.items()] if model else []


def _describe(loc: list[Any]) -> str:
    model = _model_at(loc[:-1])
    if model is not None:
        for f in model.model_fields.values():
            if f.alias == loc[-1] and f.description:
                return f.description
    return _NO_DESCRIPTION


_NO_DESCRIPTION = "a value (see docs/infra.md)"
# The providers' own sections of the config (each checked against `provider`).
PROVIDER_SECTIONS = ("kind", "onprem", "existing", "aws")


def _choices(values: list[str]) -> str:
    quoted = [repr(v) for v in values]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def _providers_with(rule: str) -> str:
    """`provider 'x'` (or `providers 'x' or 'y'`): those whose `rule` holds."""
    found = [n for n in providers.names() if getattr(providers.rules(n), rule)]
    return f"provider{'s' if len(found) > 1 else ''} {_choices(found)}"


def _check_consistency(cfg: StackConfig) -> None:
    """Rules that span keys: the provider's section, its file system, its secrets."""
    ns = NAMESPACE
    provider = cfg.provider
    rules = providers.rules(provider)
    for section in PROVIDER_SECTIONS:
        present = getattr(cfg, section) is not None
        if section == provider and not present and rules.section_required:
            raise StackConfigError(f"{ns}:{section}", None,
                                   f"provider {provider!r} needs an `{section}` section", missing=True)  # fmt: skip
        if section != provider and present:
            raise StackConfigError(f"{ns}:{section}", "{...}",
                                   f"only the `{provider}` section with provider {provider!r}")  # fmt: skip
    allowed_fs = rules.shared_fs_kinds
    if cfg.shared_fs.kind not in allowed_fs:
        raise StackConfigError(f"{ns}:sharedFs.kind", cfg.shared_fs.kind,
                               f"{' or '.join(allowed_fs)} with provider {provider!r}")  # fmt: skip
    if rules.reads_kubeconfig and cfg.kubeconfig is None:
        raise StackConfigError(f"{ns}:kubeconfig", None,
                               "the cluster's kubeconfig, set with `pulumi config set --secret "
                               "alchemist:kubeconfig < kubeconfig.yaml`", missing=True)  # fmt: skip
    if rules.reads_kubeconfig and cfg.kubeconfig is not None:
        import yaml

        try:  # jobs get this cluster with a team token (infra/team_credential.py)
            cluster_entry(cfg.kubeconfig.get_secret_value())
        except (ValueError, AttributeError, TypeError, KeyError, yaml.YAMLError):
            raise StackConfigError(
                f"{ns}:kubeconfig",
                "<secret>",
                "a kubeconfig whose current-context names a cluster with a server",
            ) from None
    if not rules.reads_kubeconfig and cfg.kubeconfig is not None:
        raise StackConfigError(f"{ns}:kubeconfig", "<secret>",
                               f"no kubeconfig: only {_providers_with('reads_kubeconfig')} reads one")  # fmt: skip
    if not rules.reads_ssh_key and cfg.ssh_private_key is not None:
        raise StackConfigError(
            f"{ns}:sshPrivateKey", "<secret>", f"only with {_providers_with('reads_ssh_key')}"
        )
    if rules.own_registry is not None and cfg.images.registry is not None:
        raise StackConfigError(f"{ns}:images.registry", cfg.images.registry,
                               f"no registry: provider {provider!r} pushes to {rules.own_registry} it creates")  # fmt: skip
    if rules.own_registry is None and cfg.images.registry is None:
        raise StackConfigError(f"{ns}:images.registry", None,
                               "the registry the cluster pulls from, such as registry.lab:5000/alchemist",
                               missing=True)  # fmt: skip
    if cfg.registry_password is not None and cfg.images.registry_user is None:
        raise StackConfigError(f"{ns}:images.registryUser", None,
                               "the user that goes with alchemist:registryPassword", missing=True)  # fmt: skip
    names = [t.name for t in cfg.teams]
    for i, name in enumerate(names):
        if name in SYSTEM_NAMESPACES:
            raise StackConfigError(f"{ns}:teams[{i}].name", name,
                                   "a name other than " + ", ".join(SYSTEM_NAMESPACES))  # fmt: skip
        if name in names[:i]:
            raise StackConfigError(f"{ns}:teams[{i}].name", name, "a name no other team has")
    _check_identities(cfg)
    _check_object_store(cfg)
    if cfg.onprem is not None:
        _check_onprem(cfg.onprem, cfg.kubernetes_version)
    if cfg.aws is not None:
        _check_aws(cfg.aws)


def _check_identities(cfg: StackConfig) -> None:
    """Each team owns its subtree of the shared FS by uid: two teams with one uid share everything."""
    seen: dict[int, str] = {}
    for i, team in enumerate(cfg.teams):
        uid, _ = cfg.identity(team.name)
        if uid in seen:
            raise StackConfigError(f"{NAMESPACE}:teams[{i}].uid", uid,
                                   f"a uid no other team has (team {seen[uid]!r} has {uid})")  # fmt: skip
        seen[uid] = team.name
        if team.principals and not providers.rules(cfg.provider).iam:
            raise StackConfigError(f"{NAMESPACE}:teams[{i}].principals", team.principals,
                                   f"IAM principals only with {_providers_with('iam')} (elsewhere: groups)")  # fmt: skip


def _check_onprem(onprem: OnpremConfig, kubernetes_minor: str) -> None:
    if onprem.k3s_installer_sha256 is None:
        # The deployer states which installer they read; a shipped stack cannot say it for them.
        url = k3s_installer(K3S_VERSIONS[kubernetes_minor])
        raise StackConfigError(f"{NAMESPACE}:onprem.k3sInstallerSha256", None,
                               f"the sha256 of the k3s installer you reviewed, as `curl -sfL {url} | sha256sum` "
                               f"prints it, set with `pulumi config set --path '{NAMESPACE}:onprem.k3sInstallerSha256' "
                               "<digest>`", missing=True)  # fmt: skip
    key = f"{NAMESPACE}:onprem.hosts"
    if not any(h.role == "server" for h in onprem.hosts):
        raise StackConfigError(key, [h.name for h in onprem.hosts], "at least one host with role 'server'")
    seen: set[str] = set()
    for i, h in enumerate(onprem.hosts):
        if h.gpus and h.role != "agent":
            raise StackConfigError(f"{key}[{i}].role", h.role, "'agent' for a GPU host (gpus > 0)")
        if h.name in seen or h.address in seen:
            raise StackConfigError(f"{key}[{i}]", h.name, "a name and address no other host has")
        if h.host_key is None:
            # Without it the first connection trusts whoever answers, and gets the k3s token.
            raise StackConfigError(f"{key}[{i}].hostKey", None,
                                   "the host's public SSH key, such as the line `ssh-keyscan -t ed25519 "
                                   f"{h.address}` prints after the address", missing=True)  # fmt: skip
        seen.update((h.name, h.address))


def _check_aws(aws: AwsConfig) -> None:
    key = f"{NAMESPACE}:aws"
    for i, zone in enumerate(aws.availability_zones):
        if not (zone.startswith(aws.region) and len(zone) == len(aws.region) + 1):
            raise StackConfigError(f"{key}.availabilityZones[{i}]", zone,
                                   f"a zone of {aws.region}, such as {aws.region}a")  # fmt: skip
    if not 16 <= aws.vpc_cidr.prefixlen <= 20:
        raise StackConfigError(f"{key}.vpcCidr", str(aws.vpc_cidr), "a /16 to /20 network")
    if aws.endpoint_public_access and not aws.public_access_cidrs:
        raise StackConfigError(f"{key}.publicAccessCidrs", None,
                               f"{NOT_A_DEPLOYER_NETWORK}, set by the deployer with `pulumi config set --path "
                               f"'{key}.publicAccessCidrs[0]' <cidr>` (or endpointPublicAccess: false)",
                               missing=True)  # fmt: skip
    for i, cidr in enumerate(aws.public_access_cidrs):
        if cidr.prefixlen and not cidr.is_global:  # 0.0.0.0/0 is judged by policy no-open-endpoints
            raise StackConfigError(f"{key}.publicAccessCidrs[{i}]", str(cidr),
                                   f"{NOT_A_DEPLOYER_NETWORK} ({cidr} is private or reserved for "
                                   "documentation: nobody can reach the API from it)")  # fmt: skip
    _check_gpu_pool(aws)
    for pool_key, pool in (("systemNodes", aws.system_nodes), ("gpuNodes", aws.gpu_nodes)):
        if not pool.min_size <= pool.desired_size <= pool.max_size:
            raise StackConfigError(f"{key}.{pool_key}",
                                   {"minSize": pool.min_size, "desiredSize": pool.desired_size,
                                    "maxSize": pool.max_size},
                                   "minSize <= desiredSize <= maxSize")  # fmt: skip


def endpoint_address(endpoint: str) -> str | None:
    """An object-store endpoint's host as a /32 when it is an IP address; None for a host name."""
    try:
        return str(ipaddress.ip_network(urlsplit(endpoint).hostname or ""))
    except ValueError:
        return None


def _check_object_store(cfg: StackConfig) -> None:
    key, store = f"{NAMESPACE}:objectStore", cfg.object_store
    team_keys = [i for i, t in enumerate(cfg.teams) if t.object_store_access_key_id is not None]
    if store is None or providers.rules(cfg.provider).iam:
        where = (
            "only with an objectStore section"
            if store is None
            else f"no key: provider {cfg.provider!r} grants jobs access through IAM"
        )
        if team_keys:
            i = team_keys[0]
            raise StackConfigError(
                f"{NAMESPACE}:teams[{i}].objectStoreAccessKeyId",
                cfg.teams[i].object_store_access_key_id,
                where,
            )
        if cfg.object_store_team_secret_keys is not None:
            raise StackConfigError(f"{NAMESPACE}:objectStoreTeamSecretKeys", "<secret>", where)
    if store is None:
        if cfg.object_store_secret_key is not None:
            raise StackConfigError(f"{NAMESPACE}:objectStoreSecretKey", "<secret>",
                                   "only with an objectStore section")  # fmt: skip
        return
    if providers.rules(cfg.provider).iam:
        for field_, value in (
            ("endpoint", store.endpoint),
            ("accessKeyId", store.access_key_id),
            ("cidrs", [str(c) for c in store.cidrs] or None),
        ):
            if value is not None:
                raise StackConfigError(f"{key}.{field_}", value, f"no {field_}: provider {cfg.provider!r} "
                                       "creates its bucket and grants jobs access through IAM")  # fmt: skip
        if cfg.object_store_secret_key is not None:
            raise StackConfigError(f"{NAMESPACE}:objectStoreSecretKey", "<secret>",
                                   f"no key: provider {cfg.provider!r} grants jobs access through IAM")  # fmt: skip
        return
    for field_, value in (("endpoint", store.endpoint), ("bucket", store.bucket)):
        if value is None:
            raise StackConfigError(f"{key}.{field_}", None, f"the S3-compatible service's {field_} "
                                   f"with provider {cfg.provider!r}", missing=True)  # fmt: skip
    if (store.access_key_id is None) != (cfg.object_store_secret_key is None):
        raise StackConfigError(f"{key}.accessKeyId", store.access_key_id,
                               "an access key id together with the secret "
                               "alchemist:objectStoreSecretKey, or neither")  # fmt: skip
    _check_team_keys(cfg)
    assert store.endpoint is not None  # the loop above refuses a missing one
    if not store.cidrs and endpoint_address(store.endpoint) is None:
        raise StackConfigError(f"{key}.cidrs", None, f"the addresses {store.endpoint} resolves to "
                               "(CIDRs such as 10.20.0.9/32): job pods reach the store through a "
                               "NetworkPolicy, which matches addresses, not host names", missing=True)  # fmt: skip


def _team_secret_keys(cfg: StackConfig) -> dict[str, SecretStr]:
    """alchemist:objectStoreTeamSecretKeys as {team: secret key}; never shows a value."""
    key = f"{NAMESPACE}:objectStoreTeamSecretKeys"
    if cfg.object_store_team_secret_keys is None:
        return {}
    try:
        raw = yaml.safe_load(cfg.object_store_team_secret_keys.get_secret_value())
    except yaml.YAMLError:
        raw = None
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in raw.items()
    ):
        raise StackConfigError(key, "<secret>", "a mapping of team name to that team's secret key")
    return {k: SecretStr(v) for k, v in raw.items()}


def _check_team_keys(cfg: StackConfig) -> None:
    """One key pair per team: a pair two teams hold reaches both teams' prefixes."""
    store, key = cfg.object_store, f"{NAMESPACE}:objectStoreTeamSecretKeys"
    assert store is not None  # called for a stack with an objectStore section only
    own = _team_secret_keys(cfg)
    with_key = {t.name for t in cfg.teams if t.object_store_access_key_id is not None}
    for name in sorted(set(own) ^ with_key):
        raise StackConfigError(
            key,
            "<secret>",
            f"a secret key for each team that sets objectStoreAccessKeyId "
            f"({', '.join(sorted(with_key)) or 'none does'}), no other; team {name!r} differs",
        )
    shared = [i for i, t in enumerate(cfg.teams) if t.object_store_access_key_id is None]
    if store.access_key_id is not None and len(shared) > 1:
        i = shared[1]
        raise StackConfigError(f"{NAMESPACE}:teams[{i}].objectStoreAccessKeyId", None,
                               "the team's own access key id (and its secret key in "
                               f"{key}): teams {cfg.teams[shared[0]].name!r} and {cfg.teams[i].name!r} would "
                               "share the key pair of alchemist:objectStore.accessKeyId, which reaches both "
                               "teams' prefixes", missing=True)  # fmt: skip
    seen: dict[str, str] = {}
    for i, t in enumerate(cfg.teams):
        kid = t.object_store_access_key_id or (store.access_key_id if t.name not in with_key else None)
        if kid is None:
            continue
        if kid in seen:
            raise StackConfigError(
                f"{NAMESPACE}:teams[{i}].objectStoreAccessKeyId",
                kid,
                f"a key no other team holds (team {seen[kid]!r} has it)",
            )
        seen[kid] = t.name


def _check_gpu_pool(aws: AwsConfig) -> None:
    key = f"{NAMESPACE}:aws.gpuNodes"
    gpu = aws.gpu_nodes
    if gpu.ami_type != "AL2023_x86_64_NVIDIA":
        # Bottlerocket's NVIDIA variant runs its own device plugin and toolkit; the GPU Operator
        # would run a second set on the same nodes.
        raise StackConfigError(f"{key}.amiType", gpu.ami_type,
                               "AL2023_x86_64_NVIDIA (the GPU Operator manages the device plugin, "
                               "DCGM and feature discovery; Bottlerocket's NVIDIA AMI runs its own)")  # fmt: skip
    if gpu.efa:
        for i, t in enumerate(gpu.instance_types):
            if not efa_interfaces(t):
                raise StackConfigError(
                    f"{key}.instanceTypes[{i}]",
                    t,
                    "an EFA instance type with efa: true (see infra/providers/aws/instance_types.py)",
                )


def cluster_entry(deployer_kubeconfig: str) -> dict[str, Any]:
    """The cluster (server, CA) of the kubeconfig's current context; ValueError if it has none."""
    import yaml

    doc = yaml.safe_load(deployer_kubeconfig) or {}
    current = doc.get("current-context")
    ctx = next((c["context"] for c in doc.get("contexts") or [] if c.get("name") == current), None)
    cluster = next(
        (c["cluster"] for c in doc.get("clusters") or [] if ctx and c.get("name") == ctx.get("cluster")), None
    )
    if not cluster or not cluster.get("server"):
        raise ValueError("no current-context whose cluster has a server")
    return dict(cluster)
