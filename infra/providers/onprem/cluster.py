"""On-prem clusters: k3s installed over SSH on a list of hosts (pulumi-command remote), or an existing cluster."""

from __future__ import annotations

import base64
import functools
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_kubernetes as kubernetes
import yaml

from infra.cluster_facts import (
    GPU_NODE_LABELS,
    GPU_TAINT,
    SYSTEM_NODE_LABELS,
    ClusterArgs,
    ClusterFacts,
    Registry,
)
from infra.config import StackConfig
from infra.providers.existing.config import existing_config
from infra.providers.onprem.config import OnpremConfig, OnpremHost, onprem_config
from infra.providers.onprem.versions import K3S_VERSIONS, NVIDIA_CONTAINER_TOOLKIT_VERSION, k3s_installer


def _labels(labels: dict[str, str]) -> str:
    return " ".join(f"--node-label {k}={v}" for k, v in labels.items())


def _install(version: str, installer_sha256: str, args: str) -> str:
    """Download the installer to a private file, run it only if its sha256 is the reviewed one
    (`alchemist:onprem.k3sInstallerSha256`): a moved tag or a tampered download stops here, in
    one line, before anything runs as root."""
    return (
        'INSTALLER="$(mktemp)" && trap \'rm -f "$INSTALLER"\' EXIT && '
        f'curl -sfL {k3s_installer(version)} -o "$INSTALLER" && '
        f'if ! echo "{installer_sha256}  $INSTALLER" | sha256sum -c --status; then '
        f'echo "k3s install.sh of {version} does not match alchemist:onprem.k3sInstallerSha256 '
        f'{installer_sha256} (the download has $(sha256sum < "$INSTALLER" | cut -c1-64))" >&2; exit 1; fi && '
        f"sudo INSTALL_K3S_VERSION='{version}' sh \"$INSTALLER\" {args}"
    )


# The cluster token reaches a joining node on stdin and is written to a root-only file that
# k3s reads (`--token-file`): it never appears on a command line, where `ps` shows it to
# every user of the host.
TOKEN_FILE = "/etc/rancher/k3s/cluster-token"
_SAVE_TOKEN = f"sudo install -d -m 0700 /etc/rancher/k3s && sudo sh -c 'umask 077 && cat > {TOKEN_FILE}' && "


def server_script(version: str, host: OnpremHost, api: str, first: bool, ha: bool,
                  registries: bool = False, *, installer_sha256: str) -> str:  # fmt: skip
    """Install a k3s server. Joining servers read the cluster token from stdin (after registries.yaml, if any)."""
    flags = [
        "server",
        f"--node-name {host.name}",
        f"--tls-san {api}",
        "--disable traefik",
        "--write-kubeconfig-mode 0600",
        _labels(SYSTEM_NODE_LABELS),
    ]
    if first and ha:
        flags.insert(1, "--cluster-init")
    token = ""
    if not first:
        flags.insert(1, f"--server https://{api}:6443")
        flags.append(f"--token-file {TOKEN_FILE}")
        token = _SAVE_TOKEN
    return f"set -eu; {_registries_step(registries)}{token}{_install(version, installer_sha256, ' '.join(flags))}"


def agent_script(
    version: str, host: OnpremHost, api: str, registries: bool = False, *, installer_sha256: str
) -> str:
    """Join a k3s agent (token on stdin). GPU agents get the GPU label, taint and nvidia runtime."""
    flags = [f"--node-name {host.name}", f"--server https://{api}:6443", f"--token-file {TOKEN_FILE}"]
    if host.gpus:
        taint = f"{GPU_TAINT['key']}={GPU_TAINT['value']}:{GPU_TAINT['effect']}"
        flags += [_labels(GPU_NODE_LABELS), f"--node-taint {taint}", "--default-runtime nvidia"]
    else:
        flags.append(_labels({"alchemist.io/pool": "cpu"}))
    return (
        f"set -eu; {_registries_step(registries)}{_SAVE_TOKEN}"
        f"{_install(version, installer_sha256, 'agent ' + ' '.join(flags))}"
    )


def _registries_step(registries: bool) -> str:
    """Install /etc/rancher/k3s/registries.yaml, read as the first stdin line (base64), before k3s starts."""
    if not registries:
        return ""
    return (
        "sudo install -d -m 0700 /etc/rancher/k3s && read -r REGISTRIES && "
        "printf '%s' \"$REGISTRIES\" | base64 -d | sudo sh -c 'umask 077 && cat > /etc/rancher/k3s/registries.yaml' && "
    )


def registries_yaml(registry: str, user: str | None, password: str | None, insecure: bool) -> str:
    """k3s's containerd registry config: where the host is, plain HTTP or TLS, and its login.

    Format: k3s docs "Private Registry Configuration" (`mirrors.<host>.endpoint`,
    `configs.<host>.auth` and `.tls.insecure_skip_verify`).
    """
    host = registry.split("/")[0]
    doc: dict[str, Any] = {"mirrors": {host: {"endpoint": [f"{'http' if insecure else 'https'}://{host}"]}}}
    if user is not None and password is not None:
        doc["configs"] = {host: {"auth": {"username": user, "password": password}}}
    return yaml.safe_dump(doc, sort_keys=True)


# With the GPU Operator's driver container, the driver's files live under this root on the
# host; the host toolkit must look there (NVIDIA GPU Operator docs, "Pre-installed NVIDIA
# Container Toolkit (but no drivers)": uncomment `root = "/run/nvidia/driver"` in
# /etc/nvidia-container-runtime/config.toml).
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"


def nvidia_runtime_script(driver_on_host: bool) -> str:
    """Install the NVIDIA container toolkit (Debian/Ubuntu) so k3s finds the nvidia runtime."""
    v = NVIDIA_CONTAINER_TOOLKIT_VERSION
    check = (
        'command -v nvidia-smi >/dev/null || { echo "no NVIDIA driver on $(hostname): install it '
        'or set alchemist:onprem.gpuDriver to operator" >&2; exit 1; }; '
        if driver_on_host
        else ""
    )
    keyring = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
    return (
        f"set -eu; {check}"
        f"curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | sudo gpg --dearmor --yes -o {keyring}; "
        "curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list"
        f" | sed 's#deb https://#deb [signed-by={keyring}] https://#g'"
        " | sudo tee /etc/apt/sources.list.d/nvidia-container-toolkit.list >/dev/null; "
        "sudo apt-get update -q; "
        f"sudo apt-get install -y -q nvidia-container-toolkit={v} nvidia-container-toolkit-base={v} "
        f"libnvidia-container-tools={v} libnvidia-container1={v}"
        + ("" if driver_on_host else
           f"; sudo sed -i 's|^#\\?root = .*|root = \"{OPERATOR_DRIVER_ROOT}\"|' {TOOLKIT_CONFIG}"
           f" && grep -q '^root = \"{OPERATOR_DRIVER_ROOT}\"' {TOOLKIT_CONFIG}")
    )  # fmt: skip


# k3s keeps the CA that signs client certificates here ("k3s certificate" docs: client-ca.crt
# and client-ca.key under the server's tls directory); the API server trusts what it signs,
# with the certificate's O fields as the user's groups.
K3S_TLS = "/var/lib/rancher/k3s/server/tls"
TEAM_CERT_DAYS = 365


def team_credentials_script(team: str, groups: list[str], tls_dir: str = K3S_TLS, sudo: str = "sudo ") -> str:
    """Make a key and a client certificate for a team's submitters; print both, base64, one per line.

    The key never leaves the pipe except on stdout (a secret output); the CA key is read as root.
    Only openssl runs under sudo, and it writes the certificate to stdout: the SSH user's own
    shell writes the file, so the user can read it back (a file root writes under `umask 077`
    would be root's alone).
    """
    subject = "".join(f"/O={g}" for g in groups) + f"/CN=alchemist-submitter-{team}"
    return (
        'set -eu; d="$(mktemp -d)"; trap \'rm -rf "$d"\' EXIT; umask 077; '
        "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        f'-keyout "$d/key.pem" -subj "{subject}" -out "$d/req.csr" 2>/dev/null; '
        f'{sudo}openssl x509 -req -in "$d/req.csr" -CA {tls_dir}/client-ca.crt -CAkey {tls_dir}/client-ca.key '
        f'-set_serial "0x$(openssl rand -hex 16)" -days {TEAM_CERT_DAYS} 2>/dev/null > "$d/cert.pem"; '
        'base64 -w0 "$d/cert.pem"; echo; base64 -w0 "$d/key.pem"; echo'
    )


def team_kubeconfig(admin_kubeconfig: str, credentials: str, team: str, api: str) -> str:
    """The admin kubeconfig's cluster (server, CA) with the team's certificate as its only user."""
    admin = yaml.safe_load(admin_kubeconfig)
    cert, key = credentials.split()
    cluster = dict(admin["clusters"][0]["cluster"])
    cluster["server"] = f"https://{api}:6443"
    user = f"alchemist-submitter-{team}"
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": user,
        "clusters": [{"name": "alchemist", "cluster": cluster}],
        "contexts": [{"name": user, "context": {"cluster": "alchemist", "user": user, "namespace": team}}],
        "users": [{"name": user, "user": {"client-certificate-data": cert, "client-key-data": key}}],
    }, sort_keys=False)  # fmt: skip


def registry_facts(cfg: StackConfig) -> Registry:
    """A registry named in the config (on-prem and existing clusters)."""
    prefix = cfg.images.registry or ""
    password = cfg.registry_password
    return Registry(
        prefix=prefix,
        host=prefix.split("/")[0],
        user=cfg.images.registry_user,
        password=pulumi.Output.secret(password.get_secret_value()) if password else None,
    )


K3sClusterArgs = ClusterArgs


def _team_kubeconfig_of(made: list[Any], team: str, api: str) -> str:
    admin, credentials = made
    return team_kubeconfig(admin, credentials, team, api)


class K3sCluster(pulumi.ComponentResource):
    """k3s over SSH: servers first, then agents; GPU agents with the NVIDIA container runtime."""

    def __init__(self, name: str, args: K3sClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:K3sCluster", name, None, opts)
        onprem = onprem_config(args.cfg)
        installer = onprem.k3s_installer_sha256
        assert installer is not None  # config.parse refuses an onprem stack without it
        version = K3S_VERSIONS[args.cfg.kubernetes_version]
        key = args.cfg.ssh_private_key
        private_key = pulumi.Output.secret(key.get_secret_value()) if key else None
        servers = [h for h in onprem.hosts if h.role == "server"]
        agents = [h for h in onprem.hosts if h.role == "agent"]
        api = onprem.api_address or servers[0].address

        def connection(host: OnpremHost) -> command.remote.ConnectionArgs:
            return command.remote.ConnectionArgs(
                host=host.address,
                port=onprem.ssh_port,
                user=onprem.ssh_user,
                private_key=private_key,  # None: the deployer's ssh-agent
                host_key=host.host_key or None,
            )

        first = servers[0]
        images = args.cfg.images
        password = args.cfg.registry_password
        # Every node gets registries.yaml before k3s starts: the first stdin line (base64).
        registries = pulumi.Output.secret(base64.b64encode(registries_yaml(
            images.registry or "", images.registry_user, password.get_secret_value() if password else None,
            images.registry_insecure).encode()).decode() + "\n")  # fmt: skip
        self.first_server = command.remote.Command(
            f"{name}-server-{first.name}",
            connection=connection(first),
            create=server_script(
                version,
                first,
                api,
                first=True,
                ha=len(servers) > 1,
                registries=True,
                installer_sha256=installer,
            ),
            stdin=registries,
            delete="/usr/local/bin/k3s-uninstall.sh",
            opts=pulumi.ResourceOptions(parent=self),
        )
        token_cmd = self._read_secret(
            f"{name}-token", connection(first), "sudo cat /var/lib/rancher/k3s/server/node-token"
        )
        token = pulumi.Output.secret(token_cmd.stdout.apply(lambda s: s.strip()))
        self.nodes: list[Any] = [self.first_server]
        joining = pulumi.Output.concat(registries, token)  # stdin: registries.yaml, then the token
        for host in [*servers[1:], *agents]:
            self.nodes.append(
                self._join(name, host, connection(host), version, api, onprem, joining, token_cmd)
            )
        # The program itself deploys with the admin kubeconfig; jobs get each team's own
        # submitter certificate, so the contract never carries admin access.
        admin_cmd = self._read_secret(
            f"{name}-kubeconfig", connection(first), "sudo cat /etc/rancher/k3s/k3s.yaml"
        )
        admin = pulumi.Output.secret(
            admin_cmd.stdout.apply(lambda s: s.replace("https://127.0.0.1:6443", f"https://{api}:6443"))
        )
        self.team_kubeconfigs: dict[str, pulumi.Output[str]] = {}
        for i, team in enumerate(args.cfg.teams):  # the default team's keeps its first name
            team_cmd = self._read_secret(
                f"{name}-{'' if i == 0 else team.name + '-'}team-credentials", connection(first),
                team_credentials_script(team.name, team.groups or [f"alchemist:{team.name}"]),
            )  # fmt: skip
            made: pulumi.Output[str] = pulumi.Output.all(admin, team_cmd.stdout).apply(
                functools.partial(_team_kubeconfig_of, team=team.name, api=api)
            )
            self.team_kubeconfigs[team.name] = pulumi.Output.secret(made)
        self.kubeconfig = self.team_kubeconfigs[args.cfg.default_team.name]
        self.provider = kubernetes.Provider(
            f"{name}-k8s", kubeconfig=admin, opts=pulumi.ResourceOptions(parent=self)
        )
        self.facts = ClusterFacts(
            provider=self.provider,
            kubeconfig=self.kubeconfig,
            gpus_per_node=max((h.gpus for h in onprem.hosts), default=0),
            gpu_driver_by_operator=onprem.gpu_driver == "operator",
            toolkit_by_operator=False,  # configured over SSH before the agent joins
            registry=registry_facts(args.cfg),
            depends_on=list(self.nodes),
            team_kubeconfigs=dict(self.team_kubeconfigs),
        )
        self.register_outputs({"kubeconfig": self.kubeconfig, "api": api})

    def _join(self, name: str, host: OnpremHost, conn: command.remote.ConnectionArgs, version: str, api: str,
              onprem: OnpremConfig, stdin: pulumi.Output[str], token_cmd: Any) -> Any:  # fmt: skip
        """One more server or agent; a GPU agent gets the NVIDIA container toolkit first."""
        installer = onprem.k3s_installer_sha256
        assert installer is not None  # config.parse refuses an onprem stack without it
        deps: list[Any] = [token_cmd]
        if host.role == "server":
            create = server_script(
                version,
                host,
                api,
                first=False,
                ha=True,
                registries=True,
                installer_sha256=installer,
            )
            delete = "k3s-uninstall.sh"
        else:
            create = agent_script(version, host, api, registries=True, installer_sha256=installer)
            delete = "k3s-agent-uninstall.sh"
            if host.gpus:
                deps.append(command.remote.Command(
                    f"{name}-nvidia-runtime-{host.name}",
                    connection=conn,
                    create=nvidia_runtime_script(driver_on_host=onprem.gpu_driver == "host"),
                    opts=pulumi.ResourceOptions(parent=self),
                ))  # fmt: skip
        return command.remote.Command(
            f"{name}-{host.role}-{host.name}",
            connection=conn,
            create=create,
            stdin=stdin,
            delete=f"/usr/local/bin/{delete}",
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
        )

    def _read_secret(self, name: str, connection: command.remote.ConnectionArgs, create: str) -> Any:
        """A command on the first server whose output is a secret: never logged, secret in the state."""
        return command.remote.Command(
            name,
            connection=connection,
            create=create,
            logging=command.remote.Logging.NONE,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.first_server], additional_secret_outputs=["stdout"]
            ),
        )


ExistingClusterArgs = ClusterArgs


class ExistingCluster(pulumi.ComponentResource):
    """A cluster a team already has: a kubernetes.Provider from the `kubeconfig` secret."""

    def __init__(self, name: str, args: ExistingClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:ExistingCluster", name, None, opts)
        existing = existing_config(args.cfg)
        assert existing is not None and args.cfg.kubeconfig is not None  # checked by config.parse
        self.kubeconfig = pulumi.Output.secret(args.cfg.kubeconfig.get_secret_value())
        self.provider = kubernetes.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig, opts=pulumi.ResourceOptions(parent=self)
        )
        self.facts = ClusterFacts(
            provider=self.provider,
            kubeconfig=None,  # the deployer's, for `pulumi up` only: jobs get infra/team_credential.py's
            gpus_per_node=existing.gpus_per_node,
            gpu_driver_by_operator=existing.gpu_driver == "operator",
            toolkit_by_operator=existing.container_toolkit == "operator",
            registry=registry_facts(args.cfg),
            # nothing labels an existing cluster's nodes `alchemist.io/pool: gpu`
            gpu_node_labels=dict(existing.gpu_node_selector),
        )
        self.register_outputs({"kubeconfig": self.kubeconfig})
