"""The one contract between infra/ and jobs: the typed shape of the stack output `alchemist`.

infra/ builds this output and its tests validate it against `StackOutput`; the job library
parses a stack's output with `StackOutput.parse` and reads nothing else about a stack.
The kubeconfig is a `SecretStr`, so printing or logging a parsed output never shows it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from alchemist_jobs.errors import UserError

# The fields that become object names or label values in a job's manifests, checked where the
# contract is read, with the API server's rules (k8s.io/apimachinery validation: IsDNS1123Label,
# IsValidLabelValue): a bad one is one line naming the outputs file and the field, not a
# refused JobSet later.
Dns1123Label = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
LabelValue = Annotated[str, Field(pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", max_length=63)]

# Labels every job pod carries. The platform's PodMonitor and NetworkPolicy select on them,
# so they are part of the contract (the stack exports the scrape label in
# `monitoring.pod_monitor_labels`; these two are fixed).
MANAGED_BY_LABEL = ("app.kubernetes.io/managed-by", "alchemist")
RUN_LABEL = "alchemist.io/run"
# Worker local rank r serves Prometheus metrics at /metrics on container port
# METRICS_BASE_PORT + r, named `metrics` (r = 0) or `metrics-<r>`. The platform's PodMonitor
# scrapes and its NetworkPolicy admits that many slots: workers of local rank >= the slots
# still train, but are not scraped.
# Secrets a job or session pod may read: the platform's admission policy admits only these
# names in pod volumes and environment (infra/admission.py).
JOB_SECRET_PREFIX = "alchemist-job-"
METRICS_PORT_NAME = "metrics"
METRICS_BASE_PORT = 9400
METRICS_PORT_SLOTS = 16
# On cluster stacks rank 0 prints its progress (JSON) on this prefix to its pod log; the CLI
# reads it back through the API server (pods/log), not from the pod's network.
PROGRESS_LINE_PREFIX = "alchemist-progress "


# Datasets (docs/datasets.md). On stacks with an object store, the platform creates in every
# job namespace the ServiceAccount JOB_SERVICE_ACCOUNT (where the store is the provider's own,
# bound to a cloud identity that may read and write the bucket) and, where the store takes access keys, the Secret
# OBJECT_STORE_SECRET holding AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
JOB_SERVICE_ACCOUNT = "alchemist-job"
OBJECT_STORE_SECRET = JOB_SECRET_PREFIX + "object-store"  # pods may read it (admission)


def metrics_port_name(local_rank: int) -> str:
    return METRICS_PORT_NAME if local_rank == 0 else f"{METRICS_PORT_NAME}-{local_rank}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SignedRequest(_Strict):
    """A cloud API request the CLI presigns (botocore, SigV4) with the user's own identity; its
    URL, base64url-encoded without padding after `token_prefix`, is the bearer token. The
    cluster's authenticator replays the URL to learn who calls; the signed header (when named)
    ties the token to one cluster."""

    service: str = Field(max_length=64)  # botocore service name of the API the URL calls
    operation: str = Field(max_length=64)  # botocore operation (the client's method name) the URL calls
    header: str | None = None  # a header the signature covers, sent by the authenticator
    header_value: str | None = None
    token_prefix: str = ""  # put before the encoded URL
    expires_s: int = Field(60, ge=1)  # how long the presigned URL is good for
    token_lifetime_s: int = Field(900, ge=60)  # how long the cluster accepts a token


class ClusterLookup(_Strict):
    """A cloud API call (botocore) that answers the cluster's API server and base64 CA, for an
    output that lacks them; the fields are dotted paths into its response."""

    service: str = Field(max_length=64)
    operation: str = Field(max_length=64)
    params: dict[str, str] = {}
    server_field: str
    certificate_authority_field: str


class ClusterAuth(_Strict):
    """How jobs reach the cluster when the output carries no kubeconfig: a short-lived token the
    CLI makes with the user's own identity. `method` names the way (a key of
    alchemist_jobs.kubernetes.auth's table, whose module makes the token); the provider's
    package writes this section (its `jobs_access`), with what the method needs to know."""

    method: Dns1123Label  # e.g. "presigned-request"
    cluster: str  # the cluster's name where its provider knows it (what the token is for)
    label: str = Field(default="cluster", max_length=40)  # what its provider calls it, for messages
    region: str | None = None  # where the provider's API for the cluster is
    server: str | None = None  # API server URL; the method looks it up when absent
    certificate_authority: str | None = None  # base64 CA data; looked up when absent
    kubeconfig_command: str | None = None  # what a person runs to get a kubeconfig of their own
    request: SignedRequest | None = None  # presigned-request: what to sign
    lookup: ClusterLookup | None = None  # how to find server and CA when absent


class SharedFs(_Strict):
    """A POSIX path every pod sees: a ReadWriteMany PVC in the job namespace.

    The PVC's root is the team's own subtree of the file system (an access point, an NFS
    subdirectory...), owned by `uid`:`gid`; job pods run as that identity, so they can write
    there and nowhere else.
    """

    # which file system, as the stack config names it (its provider's sharedFs kinds: nfs,
    # hostpath...); jobs mount the PVC whatever it is, so this is only shown
    kind: Dns1123Label
    pvc: str
    mount_path: str = Field(pattern=r"^/")
    uid: int = Field(1000, ge=1, description="POSIX user job pods run as; owns the PVC root")
    gid: int = Field(1000, ge=1, description="POSIX group job pods run as; owns the PVC root")


class Images(_Strict):
    """Image references, pinned by digest (`repo@sha256:...`) where the registry gives one."""

    train: str
    interactive: str
    # The Secret (type kubernetes.io/dockerconfigjson, in every job namespace) pods list in
    # imagePullSecrets; absent when the registry needs no login.
    pull_secret: str | None = None


class Fabric(_Strict):
    """A fast network between the GPU nodes, for multi-node NCCL: devices a device plugin offers
    as an extended resource, reached through an NCCL network plugin. The provider's package
    describes it; the job half asks for its devices and sets what it says, nothing more."""

    name: str = Field(min_length=1, max_length=40)  # what the provider calls it, for messages
    resource: str  # the devices' extended resource; a GPU worker asks for every one of the node
    per_node: int = Field(ge=1)  # devices of every GPU node
    gbit_per_device: float = Field(gt=0)  # nominal; what the planner takes a node's link to be
    # What NCCL and its network plugin need in a GPU worker (the plugin's library, its
    # transport's settings); the worker then checks that the plugin loads (runtime/nccl_net.py).
    nccl_env: dict[str, str] = {}


class Gpu(_Strict):
    """How a pod asks for GPUs on this stack."""

    resource: str = "nvidia.com/gpu"
    node_selector: dict[str, LabelValue] = {}
    tolerations: list[dict[str, Any]] = []
    per_node: int = Field(0, ge=0)  # GPUs on the largest GPU node; 0 means no GPU nodes
    fabric: Fabric | None = None  # present when the GPU nodes have a network fabric


PREFIX = r"^([a-z0-9][-a-z0-9]*/)?$"  # a team's part of the object store: `<team>/`


class ObjectStore(_Strict):
    """An S3-compatible bucket where datasets live (`alchemist data push`, `data.source: s3://`).

    Where the store is the provider's own, the endpoint may be absent (boto3's regional default)
    and pods reach the bucket through the job service account's cloud identity; elsewhere it is the URL of an S3-compatible service
    (MinIO, Ceph RGW) named in the stack config.
    """

    endpoint: str | None = Field(None, pattern=r"^https?://")
    bucket: str = Field(min_length=3, max_length=63)
    region: str = "us-east-1"
    # The team's own part of the bucket: where the provider gives the team its own identity, it
    # reads and writes only keys under it.
    prefix: str = Field("", pattern=PREFIX)


class Monitoring(_Strict):
    prometheus_url: str
    grafana_url: str
    tensorboard_url: str
    pod_monitor_labels: dict[str, LabelValue]


class Team(_Strict):
    """One team of the stack (`alchemist:teams`): where its jobs go, who they run as, what they may reach."""

    name: Dns1123Label
    namespace: Dns1123Label
    queue: Dns1123Label  # its LocalQueue, in its namespace
    uid: int = Field(ge=1)  # POSIX identity its job pods run as; owns its shared-FS subtree
    gid: int = Field(ge=1)
    # Its part of the object store, where the stack has one; absent: `<name>/`, as the platform makes it.
    object_store_prefix: str | None = Field(None, pattern=PREFIX)
    # Its own credential, where the provider gives each team one (on-prem, existing); absent,
    # the stack's `kubeconfig` or `auth` serves every team (kind's, or each user's own cloud identity).
    kubeconfig: SecretStr | None = None


class StackOutput(_Strict):
    """The stack output `alchemist`: the one contract between infra and jobs (docs/kubernetes.md)."""

    stack: str
    provider: Dns1123Label  # the stack's infra provider (infra/providers/)
    kubeconfig: SecretStr | None = None
    auth: ClusterAuth | None = None  # how to reach the cluster without a kubeconfig
    namespace: Dns1123Label
    queue: Dns1123Label  # the LocalQueue's name, also the pods' kueue.x-k8s.io/queue-name label
    shared_fs: SharedFs
    images: Images
    gpu: Gpu
    monitoring: Monitoring
    object_store: ObjectStore | None = None  # absent: the stack has no object storage
    # The team the fields above belong to (the stack's default team, the first of its config),
    # and every team; both absent in the output of a stack from before teams were exported.
    team: Dns1123Label | None = None
    teams: list[Team] = []

    @model_validator(mode="after")
    def _teams_agree(self) -> StackOutput:
        if not self.teams:
            return self
        names = [t.name for t in self.teams]
        if len(set(names)) != len(names) or self.team not in names:
            raise ValueError(f"`team` must name one of `teams` ({', '.join(names)}), each once")
        mine = next(t for t in self.teams if t.name == self.team)
        prefix = (
            self.object_store.prefix if self.object_store and mine.object_store_prefix is not None else None
        )
        if (mine.namespace, mine.queue, mine.uid, mine.gid, mine.object_store_prefix) != (
            self.namespace,
            self.queue,
            self.shared_fs.uid,
            self.shared_fs.gid,
            prefix,
        ):
            raise ValueError(
                f"team {self.team}'s entry in `teams` differs from the top-level "
                "namespace, queue, shared_fs identity or object_store prefix"
            )
        return self

    def team_names(self) -> list[str]:
        """The stack's teams, the default one first."""
        return [t.name for t in self.teams] or [self.team or self.namespace]

    def for_team(self, name: str | None, given_as: str | None = None) -> StackOutput:
        """This output as team `name` sees it: its namespace, queue, identity, prefix and, where
        it has one, its own credential at the top level. None: the stack's default team. An
        unknown team is one UserError line naming the teams there are."""
        if name is None or name == (self.team or self.namespace):
            return self
        team = next((t for t in self.teams if t.name == name), None)
        if team is None:
            raise UserError(
                f"{given_as or f'--team {name}'}: stack {self.stack} has no such team; accepted: "
                f"{', '.join(self.team_names())}"
            )
        update: dict[str, Any] = {
            "team": team.name,
            "namespace": team.namespace,
            "queue": team.queue,
            "shared_fs": self.shared_fs.model_copy(update={"uid": team.uid, "gid": team.gid}),
        }
        if self.object_store is not None:
            prefix = team.object_store_prefix if team.object_store_prefix is not None else f"{team.name}/"
            update["object_store"] = self.object_store.model_copy(update={"prefix": prefix})
        if team.kubeconfig is not None:
            update["kubeconfig"] = team.kubeconfig
        return self.model_copy(update=update)

    @classmethod
    def parse(cls, data: Any, source: str) -> StackOutput:
        """Validate a stack's `alchemist` output; a break of the contract is one UserError line."""
        try:
            out = cls.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            if err["type"] == "extra_forbidden":  # a field of another version of the contract
                stack = data.get("stack") if isinstance(data, dict) else None
                stack = stack if isinstance(stack, str) and 0 < len(stack) <= 63 else "STACK"
                raise UserError(
                    f"{source}: stack output `alchemist` has `{where}`, which this alchemist's "
                    "contract does not have (the output was written by another version); accepted: "
                    f"the output as this version writes it: run `pulumi up -s {stack}` "
                    "to refresh it"
                ) from None
            raise UserError(
                f"{source}: stack output `alchemist` breaks the contract at {where}: {err['msg']}"
            ) from None
        if out.kubeconfig is None and out.auth is None:
            raise UserError(
                f"{source}: stack output `alchemist` has neither `kubeconfig` nor `auth`; "
                "one of them is needed to reach the cluster"
            )
        return out
