"""Run the program for one stack under Pulumi's mocks (no CLI, no cloud) and print what it registers.

    python -m infra.render stacks/Pulumi.dev.yaml [--set key=value] [--secret key=value]
                           [--monitoring-dir DIR] [--stack NAME]
    python -m infra.render --jobs jobs.json      # a list of render() arguments -> a list

prints JSON: every registered resource (type chain, name, parent, inputs with secret values
replaced by "[secret]"), the stack outputs (secrets likewise, their paths listed), or the
one-line config error (exit 2). Mocks are process-wide, so each stack renders in a process
of its own (`--jobs` imports the SDKs once and forks one child per stack); the tests and
`alchemist stack diff` call this as a subprocess.

The mocks stand in for the Pulumi engine and the cloud providers only: they answer each
registration with the inputs plus the few outputs a real provider would compute (ids, a
service account's token, a pushed image digest; a cloud's own, such as its ARNs or its managed
cluster's kubeconfig, come from its provider's `RenderMocks`, `Provider.render_mocks`).
Everything the program does runs for real.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format

from infra import providers
from infra.render_mocks import RenderMocks

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # the program imports alchemist_jobs (the contract's labels)
    sys.path.append(str(REPO_ROOT))
SECRET = "[secret]"
PLACEHOLDER = "rendered-without-the-pulumi-cli-{key}"
DEFAULT_REGION = "us-east-1"  # a cloud resource's region when no explicit provider resource names one


def provider_mocks() -> list[RenderMocks]:
    """Every provider's mocks (infra/providers/)."""
    found = (providers.get(name).render_mocks() for name in providers.names())
    return [m for m in found if m is not None]


def load_stack_config(path: Path, sets: dict[str, Any], secrets: dict[str, str]
                      ) -> tuple[dict[str, str], set[str]]:  # fmt: skip
    """Engine-shaped config from a stack file: values as strings, `secure:` values as secrets.

    The CLI would decrypt `secure:` values; without it they become a placeholder (or the
    value given with --secret), still marked secret.
    """
    doc = yaml.safe_load(path.read_text()) or {}
    raw: dict[str, Any] = dict(doc.get("config") or {})
    for dotted, value in sets.items():
        set_path(raw, dotted, value)
    from infra.config import pulumi_value

    config: dict[str, str] = {}
    secret_keys: set[str] = set()
    for key, value in raw.items():
        if _has_secure(value):
            secret_keys.add(key)
            value = _unsecure(value, key)
        config[key] = pulumi_value(value)
    for key, value in secrets.items():
        config[key] = value
        secret_keys.add(key)
    return config, secret_keys


def set_path(config: dict[str, Any], dotted: str, value: Any) -> None:
    """Set a dotted key (`alchemist:<section>.a.b`) in a stack's config; a None value removes the key."""
    head, *rest = dotted.split(".")
    node: Any = config
    for part in [head, *rest][:-1]:
        node = node.setdefault(part, {})
    last = [head, *rest][-1]
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value


def _has_secure(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"secure"} or any(_has_secure(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_secure(v) for v in value)
    return False


def _unsecure(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return PLACEHOLDER.format(key=key)
        return {k: _unsecure(v, key) for k, v in value.items()}
    if isinstance(value, list):
        return [_unsecure(v, key) for v in value]
    return value


SIG = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
OUTPUT_SIG = "d0e6a833031e9bbcd3f4e8bde6ca49a4"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def _jsonable(value: Any, path: str, secret_paths: list[str]) -> Any:
    """Wire-format property values as JSON: secrets masked (paths kept), resources as URNs.

    Works on the engine's own encoding (google.protobuf Struct as a dict), so nothing is
    rehydrated and a secret anywhere in a value is seen exactly where the program put it.
    """
    if isinstance(value, dict):
        sig = value.get(SIG)
        if sig == SECRET_SIG:
            secret_paths.append(path)
            return SECRET
        if sig == RESOURCE_SIG:
            return {"$resource": value.get("urn")}
        if sig == OUTPUT_SIG:
            if value.get("secret"):
                secret_paths.append(path)
                return SECRET
            return _jsonable(value.get("value"), path, secret_paths)
        if sig is not None:  # asset or archive
            return {"$asset": value.get("path") or value.get("text") or value.get("uri")}
        return {k: _jsonable(v, f"{path}.{k}" if path else k, secret_paths) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v, f"{path}[{i}]", secret_paths) for i, v in enumerate(value)]
    if value == UNKNOWN:
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)  # protobuf numbers are doubles; Kubernetes wants integers back
    return value


def _struct(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message)


def _refs_to_urns(value: Any) -> None:
    """Replace resource references in a protobuf Struct/Value by their URN, in place.

    The mock engine would otherwise rehydrate each referenced resource on a thread of its
    own, racing the program's event loop; the mocks never need the referenced object.
    """
    if hasattr(value, "fields"):  # Struct
        for item in value.fields.values():
            _refs_to_urns(item)
        return
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        fields = value.struct_value.fields
        if SIG in fields and fields[SIG].string_value == RESOURCE_SIG:
            value.string_value = fields["urn"].string_value
        else:
            _refs_to_urns(value.struct_value)
    elif kind == "list_value":
        for item in value.list_value.values:
            _refs_to_urns(item)


class Recorder:
    """Builds the mocks and a monitor that records every registration with its parent."""

    def __init__(self) -> None:
        import pulumi
        from pulumi.runtime import rpc  # noqa: F401  (loads the module the mocks serialize with)
        from pulumi.runtime.mocks import MockMonitor

        self.resources: list[dict[str, Any]] = []
        self.regions: dict[str, str] = {}  # explicit cloud provider resource's URN -> its region
        self.clouds = {package: m for m in provider_mocks() for package in m.packages}
        # The provider references of the registration this thread is answering. The SDK
        # registers resources from a thread pool, so a shared "last providers map" raced: a
        # resource could be answered with another one's region (the default under load).
        self._current = threading.local()
        recorder = self

        class Mocks(pulumi.runtime.Mocks):
            def new_resource(self, args: pulumi.runtime.MockResourceArgs):
                return recorder.new_resource(args)

            def call(self, args: pulumi.runtime.MockCallArgs):
                return recorder.call(args), []

        class Monitor(MockMonitor):
            def RegisterResource(self, request):  # noqa: N802 (gRPC name)
                if request.type != "pulumi:pulumi:Stack":
                    inputs = _struct(request.object)
                    secret_paths: list[str] = []
                    urn = self.make_urn(request.parent, request.type, request.name)
                    recorder.resources.append({
                        "urn": urn,
                        "type": request.type,
                        "name": request.name,
                        "types": urn.split("::")[2].split("$"),
                        "parent": request.parent,
                        "custom": bool(request.custom),
                        "provider": request.provider,
                        "inputs": _jsonable(inputs, "", secret_paths),
                        "secret_inputs": secret_paths,
                        "additional_secret_outputs": list(request.additionalSecretOutputs),
                    })  # fmt: skip
                    _refs_to_urns(request.object)
                    if request.type.startswith("pulumi:providers:") and "region" in inputs:
                        recorder.regions[urn] = _jsonable(inputs.get("region", ""), "", [])
                # A component (a cloud SDK's own) names its cloud provider in `providers`, a custom resource in `provider`.
                recorder._current.refs = [request.provider, *dict(request.providers).values()]
                return super().RegisterResource(request)

        self.mocks = Mocks()
        self.monitor = Monitor(self.mocks)

    def _region(self, provider_ref: str | None) -> str:
        """The region of the explicit cloud provider a resource uses (refs are `urn::id`)."""
        for urn, region in self.regions.items():
            if provider_ref and provider_ref.startswith(urn + "::"):
                return region
        return DEFAULT_REGION

    def _current_ref(self) -> str | None:
        """The registration's own provider, else the first of its providers map with a region."""
        own, *others = getattr(self._current, "refs", [None])
        if own:
            return own
        return next((r for r in others if r and any(r.startswith(u + "::") for u in self.regions)), None)

    def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
        """What a provider would answer: the inputs plus the outputs it computes."""
        t, name, inputs = args.typ, args.name, dict(args.inputs)
        out = dict(inputs)
        rid = f"{name}-id"
        cloud = self.clouds.get(t.split(":", 1)[0])
        if cloud is not None:
            return cloud.new_resource(t, name, inputs, self._region(args.provider or self._current_ref()))
        if t == "kubernetes:core/v1:Secret" and inputs.get("type") == "kubernetes.io/service-account-token":
            # the token controller fills in the ServiceAccount's token and the cluster's CA
            out["data"] = {
                "token": base64.b64encode(b"mock-service-account-token").decode(),
                "ca.crt": base64.b64encode(b"mock-cluster-ca").decode(),
                "namespace": "",
            }
        elif t in ("command:local:Command", "command:remote:Command"):
            out["stdout"] = self._command_stdout(name, inputs)
            out["stderr"] = ""
        return rid, out

    @staticmethod
    def _command_stdout(name: str, inputs: dict[str, Any]) -> str:
        if name.endswith("-kubeconfig"):
            return yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "default",
                "clusters": [{"name": "default", "cluster": {"server": "https://127.0.0.1:6443",
                              "certificate-authority-data": "bW9jaw=="}}],
                "contexts": [{"name": "default", "context": {"cluster": "default", "user": "default"}}],
                "users": [{"name": "default", "user": {"client-key-data": "bW9jay1rZXk="}}],
            })  # fmt: skip
        if name.endswith("-team-credentials"):  # a client certificate and key, base64, one a line
            return "bW9jay1jZXJ0\nbW9jay10ZWFtLWtleQ==\n"
        if name.endswith("-token"):
            return "K10mock::server:mock-join-token\n"
        if name.endswith("-build"):
            digest = hashlib.sha256(json.dumps(inputs.get("triggers"), sort_keys=True).encode())
            return f"sha256:{digest.hexdigest()}\n"
        return ""

    def call(self, args: Any) -> dict[str, Any]:
        for cloud in dict.fromkeys(self.clouds.values()):
            answer = cloud.call(args.token, dict(args.args), self._region(args.provider))
            if answer is not None:
                return answer
        return {}


def render(stack_file: Path, stack: str | None = None, sets: dict[str, Any] | None = None,
           secrets: dict[str, str] | None = None, monitoring_dir: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Run the program for one stack under mocks; return the registrations and outputs."""
    import pulumi
    from pulumi.runtime import rpc

    stack = stack or stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml")
    config, secret_keys = load_stack_config(stack_file, sets or {}, secrets or {})
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder.mocks, project="alchemist", stack=stack, preview=False,
                             monitor=recorder.monitor)  # fmt: skip
    pulumi.runtime.set_all_config(config, list(secret_keys))

    from infra import program
    from infra.config import StackConfigError

    result: dict[str, Any] = {"stack": stack, "error": None}

    @pulumi.runtime.test
    def run():
        try:
            program.run(stack, monitoring_dir=monitoring_dir or REPO_ROOT / "monitoring")
        except StackConfigError as e:
            result["error"] = str(e)
            return None
        outputs = dict(pulumi.runtime.get_root_resource().outputs)

        async def resolve() -> Any:
            return _struct(await rpc.serialize_properties(outputs, {}))

        return pulumi.Output.from_input(asyncio.ensure_future(resolve())).apply(
            lambda v: result.__setitem__("raw_outputs", v)
        )

    run()
    secret_paths: list[str] = []
    result["outputs"] = _jsonable(result.pop("raw_outputs", {}) or {}, "", secret_paths)
    result["secret_outputs"] = secret_paths
    result["resources"] = recorder.resources
    return result


def _provider_clusters() -> list[str]:
    """The cluster module of every provider package that has one (`infra/providers/<name>/cluster.py`)."""
    found = []
    for name in providers.names():
        try:
            if importlib.util.find_spec(f"{providers.__name__}.{name}.cluster") is not None:
                found.append(f"{providers.__name__}.{name}.cluster")
        except ModuleNotFoundError:  # a provider registered from outside the package
            continue
    return found


def _preload() -> None:
    """Import the SDK modules every render needs (most of a render's time) once, before forking."""
    for module in (
        "pulumi", "pulumi_command.local", "pulumi_command.remote",
        "pulumi_kubernetes.core.v1", "pulumi_kubernetes.apps.v1", "pulumi_kubernetes.rbac.v1",
        "pulumi_kubernetes.networking.v1", "pulumi_kubernetes.scheduling.v1", "pulumi_kubernetes.storage.v1",
        "pulumi_kubernetes.apiextensions", "pulumi_kubernetes.helm.v3", "pulumi_kubernetes.helm.v4",
        "pulumi_kubernetes.batch.v1",
        "infra.program", *_provider_clusters(), "infra.platform",
        "infra.gpu_operator", "infra.queueing", "infra.team_namespace", "infra.admission",
        "pulumi_kubernetes.admissionregistration.v1",
        "infra.shared_fs", "infra.monitoring", "infra.images", "infra.output",
        *(module for mocks in provider_mocks() for module in mocks.preload),
    ):  # fmt: skip
        importlib.import_module(module)


def render_many(jobs: list[dict[str, Any]], parallel: int = 2) -> list[dict[str, Any]]:
    """Render several stacks, each in its own forked process (the mocks are process-wide).

    The SDKs are imported once in this process first, so each fork only runs the program.
    """
    _preload()
    results: list[dict[str, Any]] = [{} for _ in jobs]
    with tempfile.TemporaryDirectory() as tmp:
        running: dict[int, int] = {}

        def reap() -> None:
            pid, _ = os.wait()
            i = running.pop(pid)
            path = Path(tmp) / f"{i}.json"
            results[i] = json.loads(path.read_text()) if path.exists() else {"error": f"render {i} died"}

        for i, job in enumerate(jobs):
            while len(running) >= parallel:
                reap()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the child renders one stack and leaves
                code = 0
                try:
                    result = render(**job)
                except BaseException:  # noqa: BLE001 - reported to the parent, never lost
                    result, code = {"error": "render crashed: " + traceback.format_exc(limit=-3)}, 1
                (Path(tmp) / f"{i}.json").write_text(json.dumps(result, sort_keys=True))
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            running[pid] = i
        while running:
            reap()
    return results


def _pairs(items: list[str], flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{flag} {item!r}: expected key=value")
        out[key if ":" in key else f"alchemist:{key}"] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.render", description=__doc__.splitlines()[0])
    parser.add_argument("stack_file", type=Path, nargs="?")
    parser.add_argument(
        "--jobs", type=Path, help="a JSON list of render() keyword arguments: render each, print a list"
    )
    parser.add_argument("--stack", help="stack name (default: from the file name)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=YAML")
    parser.add_argument("--secret", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--monitoring-dir", type=Path)
    args = parser.parse_args(argv)
    if args.jobs is not None:
        jobs = json.loads(args.jobs.read_text())
        for job in jobs:
            job["stack_file"] = Path(job["stack_file"])
            if job.get("monitoring_dir"):
                job["monitoring_dir"] = Path(job["monitoring_dir"])
        json.dump(render_many(jobs), sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    if args.stack_file is None:
        parser.error("a stack file or --jobs is needed")
    sets = {k: yaml.safe_load(v) for k, v in _pairs(args.set, "--set").items()}
    result = render(args.stack_file, args.stack, sets, _pairs(args.secret, "--secret"), args.monitoring_dir)
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 2 if result["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
