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
from typing import Annotated, Any, Literal, Union, cast, get_args
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

import infra.providers.registry as providers
from alchemist_jobs.frameworks import FRAMEWORKS
from infra.versions import KUBERNETES_VERSIONS

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


class ConfigModel(BaseModel):
    """A part of the stack config: camelCase keys, no unknown ones, frozen (providers' sections too)."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class Quota(ConfigModel):
    """What one team's jobs may use at once: Kueue nominal quota and the namespace's ResourceQuota."""

    gpu: Size = Field(description="GPUs (nvidia.com/gpu), an integer >= 0")
    cpu: Annotated[int, Field(ge=1, le=100000)] = Field(description="CPU cores, an integer >= 1")
    memory: Quantity = Field(description="memory as a quantity such as 256Gi")


class Team(ConfigModel):
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
    principals: list[str] = Field(
        default_factory=list,
        description="the provider's own identities (its principals) that submit for the team, where it has them",
    )
    object_store_access_key_id: str | None = Field(
        None,
        min_length=1,
        description="the team's own access key id on the S3-compatible service (not a provider's own store), which the service's "
        "admin restricts to the prefix <team>/; its secret key in alchemist:objectStoreTeamSecretKeys",
    )


# A node label (apimachinery validation.IsQualifiedName and IsValidLabelValue).
LABEL_KEY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
# What the GPU Operator, which the platform installs on every stack, labels every node Node
# Feature Discovery found an NVIDIA GPU on (gpu-operator v25.10.1 controllers/state_manager.go).
GPU_PRESENT_LABELS = {"nvidia.com/gpu.present": "true"}


class SharedFsConfig(ConfigModel):
    """A shared file system's section; `kind` picks the model (`nfs`, `hostpath`, or a provider's own)."""

    kind: str


class NfsFs(SharedFsConfig):
    kind: Literal["nfs"]
    server: str = Field(min_length=1, description="the NFS server's address")
    share: str = Field(pattern=r"^/", description="the exported path, such as /export/alchemist")


class HostPathFs(SharedFsConfig):
    kind: Literal["hostpath"]


# The kinds every provider may offer; a provider adds its own (ProviderRules.shared_fs_models).
NEUTRAL_SHARED_FS: tuple[type[SharedFsConfig], ...] = (NfsFs, HostPathFs)


def _optional_framework(name: str) -> str:
    """A framework the training image may add to torch: one of alchemist_jobs/frameworks.py's
    FRAMEWORKS with an extra (its lock section and image build value), asked at each check."""
    optional = [n for n, fw in FRAMEWORKS.items() if fw.extra]
    if name not in optional:
        shown = [repr(n) for n in optional]
        raise ValueError(" or ".join([", ".join(shown[:-1]), shown[-1]] if len(shown) > 1 else shown))
    return name


class ImagesConfig(ConfigModel):
    """Where the training and interactive images are pushed (a registry of the provider's own, or `registry`)."""

    registry: str | None = Field(None, description="a registry/prefix such as registry.lab:5000/alchemist")
    registry_user: str | None = None
    registry_insecure: bool = Field(
        False,
        description="true when the registry speaks plain HTTP (the cluster's nodes are told so where the provider configures them)",
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


class AlertmanagerConfig(ConfigModel):
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


class ObjectStoreConfig(ConfigModel):
    """Object storage for datasets (infra/object_store.py). Where the provider has a store of its
    own the stack creates the bucket (`bucket` optionally names it); elsewhere these name an
    existing S3-compatible service."""

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


class StackConfig(ConfigModel):
    """All `alchemist:*` keys of one stack. `parse` checks them with a subclass that adds each
    provider's own section (`alchemist:<section>`) and shared-FS kinds (`stack_model`)."""

    provider: str = Field(description="a provider of infra/providers/")
    kubernetes_version: Literal[KUBERNETES_VERSIONS] = Field(  # type: ignore[valid-type]
        description=" or ".join(repr(v) for v in KUBERNETES_VERSIONS) + " (a quoted string)"
    )
    teams: list[Team] = Field(min_length=1, description="a list of {name, quota: {gpu, cpu, memory}}")
    pod_security: Literal["restricted", "baseline", "privileged"] = "restricted"
    shared_fs: SharedFsConfig = Field(description="{kind: ..., ...}")
    images: ImagesConfig = Field(default_factory=lambda: ImagesConfig.model_validate({}))
    allow_open_endpoints: bool = Field(
        False, description="true only to let SSH or API endpoints accept 0.0.0.0/0"
    )
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
    def section(self) -> BaseModel | None:
        """The provider's own section (`alchemist:<its section>`), if the stack has one."""
        key = providers.rules(self.provider).section
        return cast(BaseModel | None, getattr(self, key, None)) if key else None

    @property
    def default_team(self) -> Team:
        """Jobs go to the first team unless they name another."""
        return self.teams[0]

    def object_store_keys(self) -> dict[str, tuple[str, SecretStr]]:
        """Each team's S3 key pair on a store the stack does not create: its own, else the stack's (at most one team
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


def shared_fs_models() -> tuple[type[SharedFsConfig], ...]:
    """Every sharedFs kind's model: the providers' own (by provider name), then nfs and hostpath."""
    own = [m for n in providers.names() for m in providers.rules(n).shared_fs_models]
    return (*own, *NEUTRAL_SHARED_FS)


def _kind(model: type[BaseModel]) -> str:
    return str(get_args(model.model_fields["kind"].annotation)[0])


def stack_model() -> type[StackConfig]:
    """StackConfig with the registered providers' sections and shared-FS kinds, asked at each call
    (a provider registered after this module was imported counts too)."""
    kinds = shared_fs_models()
    sections: dict[str, Any] = {
        rules.section: (rules.config_model | None, None)
        for rules in (providers.rules(n) for n in providers.names())
        if rules.section and rules.config_model is not None
    }
    fs_description = "{kind: " + "|".join(_kind(m) for m in kinds) + ", ...}"
    # A union of the models the registry holds now: a type made at run time, which no static
    # checker can see (hence the ignore); pydantic picks the model by `kind`.
    union = Annotated[Union[kinds], Field(discriminator="kind")]  # type: ignore[valid-type]  # noqa: UP007
    shared_fs: Any = (union, Field(description=fs_description))
    return create_model("StackConfig", __base__=StackConfig, shared_fs=shared_fs, **sections)


def _parse(config: dict[str, str], secret_keys: set[str]) -> StackConfig:
    model = stack_model()
    fields = {f.alias or n: f for n, f in model.model_fields.items()}  # aliases: camelCase
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
        cfg = model.model_validate(data)
    except ValidationError as e:
        raise _one_line(e, model) from None
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


def _one_line(e: ValidationError, model: type[StackConfig]) -> StackConfigError:
    err = e.errors(include_url=False)[0]
    loc = [p for p in err["loc"]]
    # A discriminated union puts the tag in the location (sharedFs.nfs.server): drop it.
    kinds = {_kind(m): m for m in shared_fs_models()}
    clean: list[str] = []
    for i, p in enumerate(loc):
        if i and loc[i - 1] == "sharedFs" and p in kinds:
            continue
        clean.append(f"[{p}]" if isinstance(p, int) else str(p))
    key = f"{NAMESPACE}:" + ".".join(clean).replace(".[", "[")
    kind = err["type"]
    if kind == "missing":
        return StackConfigError(key, None, _describe(loc, model), missing=True)
    if kind == "extra_forbidden":
        return StackConfigError(key, None, ", ".join(_aliases_at(loc[:-1], model)), unknown=True)
    if kind == "union_tag_invalid":
        tags = err.get("ctx", {}).get("expected_tags", "")
        return StackConfigError(key + ".kind", err["input"].get("kind"), f"one of {tags}")
    if kind == "union_tag_not_found":
        tags = list(kinds)
        return StackConfigError(key + ".kind", None, f"{', '.join(tags[:-1])} or {tags[-1]}", missing=True)
    msg = err["msg"]
    if kind == "string_pattern_mismatch" and _describe(loc, model) != _NO_DESCRIPTION:
        msg = _describe(loc, model)
    for prefix in ("Input should be ", "Value error, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return StackConfigError(key, err.get("input"), msg)


def _model_at(loc: list[Any], top: type[StackConfig]) -> type[BaseModel] | None:
    kinds = {_kind(m): m for m in shared_fs_models()}
    model: Any = top
    for p in loc:
        if isinstance(p, int) or model is None:
            continue
        field = next((f for f in model.model_fields.values() if f.alias == p), None)
        if field is None:
            # a discriminated-union tag such as "nfs"
            model = kinds.get(p)
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


def _aliases_at(loc: list[Any], top: type[StackConfig]) -> list[str]:
    model = _model_at(loc, top)
    return [f.alias or n for n, f in model.model_fields.items()] if model else []


def _describe(loc: list[Any], top: type[StackConfig]) -> str:
    model = _model_at(loc[:-1], top)
    if model is not None:
        for f in model.model_fields.values():
            if f.alias == loc[-1] and f.description:
                return f.description
    return _NO_DESCRIPTION


_NO_DESCRIPTION = "a value (see docs/infra.md)"


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
    sections = [r.section for r in map(providers.rules, providers.names()) if r.section and r.config_model]
    for section in sections:
        present = getattr(cfg, section, None) is not None
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
    rules.check_config(cfg)


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
        pattern = providers.rules(cfg.provider).principal_pattern
        for j, principal in enumerate(team.principals):
            if pattern is not None and not re.match(pattern, principal):
                raise StackConfigError(f"{NAMESPACE}:teams[{i}].principals[{j}]", principal,
                                       providers.rules(cfg.provider).principals_accepted)  # fmt: skip


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
