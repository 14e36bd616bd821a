"""Every class of bad stack config stops the program with one line naming key, value and what is accepted."""

from __future__ import annotations

import json

import pytest
from infra_helpers import DEPLOYER_CIDR, INSTALLER_SHA256, stack_config

from infra.config import StackConfigError, parse, pulumi_value

WHERE = "stacks/Pulumi.aws-us-west-2.yaml"


def engine_config(name: str, changes: dict) -> dict[str, str]:
    """A shipped stack's config as the engine hands it over, with dotted-key changes (None deletes)."""
    config = json.loads(json.dumps(stack_config(name)))
    if name.startswith("aws-"):  # what the deployer sets before the first preview
        config["alchemist:aws"]["publicAccessCidrs"] = [DEPLOYER_CIDR]
    if name.startswith("onprem"):
        config["alchemist:onprem"]["k3sInstallerSha256"] = INSTALLER_SHA256
    for dotted, value in changes.items():
        head, *rest = dotted.split(".")
        node, key = config, head
        for part in rest:
            node, key = node[key], part
        if value is None:
            node.pop(key)
        else:
            node[key] = value
    return {k: pulumi_value(v) for k, v in config.items()}


# (stack, changes, what the one line must say)
BAD = {
    "unknown key": ("aws-us-west-2", {"alchemist:gpuNodes": 2},
                    "alchemist:gpuNodes is not a known key; accepted keys here: alchemist:provider"),
    "unknown nested key": ("aws-us-west-2", {"alchemist:aws.gpuNodes.instanceType": "g5.xlarge"},
                           "alchemist:aws.gpuNodes.instanceType is not a known key; accepted keys here: instanceTypes"),
    "other namespace": ("aws-us-west-2", {"aws:region": "us-west-2"}, "aws:region is not a known key"),
    "missing key": ("aws-us-west-2", {"alchemist:kubernetesVersion": None},
                    "alchemist:kubernetesVersion is missing; accepted: '1.32' or '1.33' or '1.34' or '1.35'"),
    "missing nested key": ("aws-us-west-2", {"alchemist:aws.gpuNodes.gpusPerNode": None},
                           "alchemist:aws.gpuNodes.gpusPerNode is missing; accepted: GPUs per node"),
    "wrong choice": ("aws-us-west-2", {"alchemist:provider": "gcp"},
                     "alchemist:provider = 'gcp' is not accepted; accepted: 'aws', 'existing', 'kind' or 'onprem'"),
    "unsupported version": ("aws-us-west-2", {"alchemist:kubernetesVersion": "1.24"},
                            "alchemist:kubernetesVersion = '1.24' is not accepted"),
    "wrong type": ("aws-us-west-2", {"alchemist:aws.gpuNodes.maxSize": "many"},
                   "alchemist:aws.gpuNodes.maxSize = 'many' is not accepted; accepted: a valid integer"),
    "out of range": ("aws-us-west-2", {"alchemist:teams": [{"name": "research", "quota": {"gpu": -1, "cpu": 8, "memory": "8Gi"}}]},
                     "alchemist:teams[0].quota.gpu = -1 is not accepted; accepted: greater than or equal to 0"),
    "bad pattern": ("aws-us-west-2", {"alchemist:aws.gpuNodes.instanceTypes": ["m5.large"]},
                    "alchemist:aws.gpuNodes.instanceTypes[0] = 'm5.large' is not accepted; accepted: String should match"),
    "bad quantity": ("aws-us-west-2", {"alchemist:teams": [{"name": "research", "quota": {"gpu": 1, "cpu": 8, "memory": "8GB"}}]},
                     "alchemist:teams[0].quota.memory = '8GB' is not accepted; accepted: memory as a quantity such as 256Gi"),
    "unknown shared fs": ("aws-us-west-2", {"alchemist:sharedFs": {"kind": "ceph"}},
                          "alchemist:sharedFs.kind = 'ceph' is not accepted; accepted: one of 'efs', 'fsx-lustre'"),
    "fs not for provider": ("aws-us-west-2", {"alchemist:sharedFs": {"kind": "nfs", "server": "n", "share": "/x"}},
                            "alchemist:sharedFs.kind = 'nfs' is not accepted; accepted: efs or fsx-lustre with provider 'aws'"),
    "missing provider section": ("aws-us-west-2", {"alchemist:aws": None},
                                 "alchemist:aws is missing; accepted: provider 'aws' needs an `aws` section"),
    "foreign provider section": ("dev", {"alchemist:aws": stack_config("aws-us-west-2")["alchemist:aws"]},
                                 "alchemist:aws = '{...}' is not accepted; accepted: only the `kind` section"),
    "zone outside region": ("aws-us-west-2", {"alchemist:aws.availabilityZones": ["us-west-2a", "eu-west-1b"]},
                            "alchemist:aws.availabilityZones[1] = 'eu-west-1b' is not accepted; accepted: a zone of us-west-2"),
    "scaling bounds": ("aws-us-west-2", {"alchemist:aws.gpuNodes.desiredSize": 9},
                       "alchemist:aws.gpuNodes = {\"minSize\": 0, \"desiredSize\": 9, \"maxSize\": 4} is not accepted"),
    "public endpoint without cidrs": ("aws-us-west-2", {"alchemist:aws.publicAccessCidrs": []},
                                      "alchemist:aws.publicAccessCidrs is missing; accepted: a public network you deploy from"),
    "bad cidr": ("aws-us-west-2", {"alchemist:aws.vpcCidr": "10.40.0.0/33"}, "alchemist:aws.vpcCidr = '10.40.0.0/33'"),
    "registry where none is used": ("aws-us-west-2", {"alchemist:images": {"registry": "r/x"}},
                                    "alchemist:images.registry = 'r/x' is not accepted; accepted: no registry"),
    "registry missing": ("onprem-lab", {"alchemist:images": None}, "alchemist:images.registry is missing"),
    "reserved team name": ("dev", {"alchemist:teams": [{"name": "monitoring", "quota": {"gpu": 0, "cpu": 1, "memory": "1Gi"}}]},
                           "alchemist:teams[0].name = 'monitoring' is not accepted; accepted: a name other than"),
    "duplicate team": ("dev", {"alchemist:teams": [{"name": "a", "quota": {"gpu": 0, "cpu": 1, "memory": "1Gi"}}] * 2},
                       "alchemist:teams[1].name = 'a' is not accepted; accepted: a name no other team has"),
    "no teams": ("dev", {"alchemist:teams": []}, "alchemist:teams = [] is not accepted"),
    "gpu host as server": ("onprem-lab", {"alchemist:onprem.hosts": [{"name": "g", "address": "1.2.3.4", "role": "server", "gpus": 8}]},
                           "alchemist:onprem.hosts[0].role = 'server' is not accepted; accepted: 'agent' for a GPU host"),
    "no server": ("onprem-lab", {"alchemist:onprem.hosts": [{"name": "g", "address": "1.2.3.4", "role": "agent"}]},
                  "alchemist:onprem.hosts = [\"g\"] is not accepted; accepted: at least one host with role 'server'"),
    "existing without kubeconfig": ("onprem-lab", {"alchemist:provider": "existing", "alchemist:onprem": None,
                                                   "alchemist:existing": {}},
                                    "alchemist:kubeconfig is missing; accepted: the cluster's kubeconfig"),
    "secret in plain text": ("onprem-lab", {"alchemist:sshPrivateKey": "-----BEGIN KEY-----"},
                             "alchemist:sshPrivateKey = <secret> is not accepted; accepted: a secret"),
    "not YAML-shaped": ("dev", {"alchemist:kind": "{workers: 2"}, "alchemist:kind = '{workers: 2' is not accepted; accepted: valid YAML"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD)
def test_bad_config_is_one_line(case):
    name, changes, expected = BAD[case]
    with pytest.raises(StackConfigError) as e:
        parse(engine_config(name, changes), where=WHERE)
    message = str(e.value)
    assert message.startswith(f"{WHERE}: {expected}"), message
    assert "\n" not in message


@pytest.mark.parametrize("name", ["dev", "onprem-lab", "aws-us-west-2", "aws-eu-west-1"])
def test_shipped_configs_parse(name):
    cfg = parse(engine_config(name, {}))
    assert cfg.provider == stack_config(name)["alchemist:provider"]


def test_the_images_frameworks_are_the_framework_registrys(monkeypatch):
    """`alchemist:images.frameworks` accepts what alchemist_jobs/frameworks.py FRAMEWORKS holds
    beyond torch (those with an extra), so a framework added there is accepted here too."""
    from alchemist_jobs.frameworks import FRAMEWORKS, Framework

    class Mxnet(Framework):
        name = "mxnet"
        module = "mxnet"
        extra = "mxnet"

    monkeypatch.setitem(FRAMEWORKS, "mxnet", Mxnet())
    cfg = parse(engine_config("dev", {"alchemist:images": {"frameworks": ["jax", "mxnet"]}}))
    assert cfg.images.frameworks == ["jax", "mxnet"]
    with pytest.raises(StackConfigError) as e:
        parse(engine_config("dev", {"alchemist:images": {"frameworks": ["torch"]}}), where=WHERE)
    assert str(e.value) == (f"{WHERE}: alchemist:images.frameworks[0] = 'torch' is not accepted; "
                            "accepted: 'tensorflow', 'jax' or 'mxnet'")  # fmt: skip


def test_a_provider_brings_its_own_section_and_shared_fs_kind(monkeypatch):
    """A provider's config section and sharedFs kinds come from the provider (its model, through
    the registry), not from infra/config.py: one registered here is parsed, checked and refused
    in the same one-line way as the shipped ones."""
    from typing import Literal

    from infra.config import ConfigModel, SharedFsConfig
    from infra.providers import Provider, registry

    class VaultSection(ConfigModel):
        racks: int = 1

    class VaultFs(SharedFsConfig):
        kind: Literal["vaultfs"]
        tier: Literal["hot", "cold"] = "hot"

    class Vault(Provider):
        name = "vault"
        section = "vault"
        config_model = VaultSection
        shared_fs_models = (VaultFs,)
        shared_fs_kinds = ("vaultfs",)
        own_registry = "the vault's registry"

        def check_config(self, cfg):
            if cfg.section is not None and cfg.section.racks > 8:
                raise StackConfigError("alchemist:vault.racks", cfg.section.racks, "at most 8 racks")

    monkeypatch.setattr(registry, "_registered", dict(registry._registered))
    registry.register(Vault())
    config = {k: v for k, v in engine_config("dev", {}).items() if k != "alchemist:kind"}
    config |= {
        "alchemist:provider": "vault",
        "alchemist:sharedFs": pulumi_value({"kind": "vaultfs", "tier": "cold"}),
    }
    cfg = parse({**config, "alchemist:vault": pulumi_value({"racks": 3})})
    assert isinstance(cfg.section, VaultSection) and cfg.section.racks == 3
    assert isinstance(cfg.shared_fs, VaultFs) and cfg.shared_fs.tier == "cold"
    bad = {
        "alchemist:vault": ({"racks": "many"}, "alchemist:vault.racks = 'many' is not accepted; accepted: a valid integer"),
        "alchemist:sharedFs": ({"kind": "vaultfs", "tier": "warm"}, "alchemist:sharedFs.tier = 'warm' is not accepted"),
    }  # fmt: skip
    for key, (value, expected) in bad.items():
        with pytest.raises(StackConfigError) as e:
            parse({**config, key: pulumi_value(value)})
        assert str(e.value).startswith(expected), str(e.value)
    with pytest.raises(StackConfigError) as e:
        parse({**config, "alchemist:vault": pulumi_value({"racks": 9})})
    assert str(e.value) == "alchemist:vault.racks = 9 is not accepted; accepted: at most 8 racks"
    # the other providers' sections and kinds still belong to them only
    with pytest.raises(StackConfigError) as e:
        parse({**engine_config("dev", {}), "alchemist:sharedFs": pulumi_value({"kind": "vaultfs"})})
    assert (
        str(e.value)
        == "alchemist:sharedFs.kind = 'vaultfs' is not accepted; accepted: hostpath with provider 'kind'"
    )
    with pytest.raises(StackConfigError) as e:
        parse({**engine_config("dev", {}), "alchemist:vault": pulumi_value({"racks": 1})})
    assert str(e.value).startswith(
        "alchemist:vault = '{...}' is not accepted; accepted: only the `kind` section"
    )
