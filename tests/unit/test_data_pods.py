"""The datasets hook for cluster pods: what it adds is valid Kubernetes, per stack kind and cache mode."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest

from alchemist_jobs.contract import JOB_SERVICE_ACCOUNT, OBJECT_STORE_SECRET, StackOutput
from alchemist_jobs.data.pods import CACHE_MOUNT, pod_patch, upload_local_source
from alchemist_jobs.errors import UserError
from alchemist_jobs.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]


def stack(name: str, **extra) -> StackOutput:
    data = json.loads((REPO / f"tests/fixtures/stack_outputs/{name}.json").read_text())
    data.update(extra)
    return StackOutput.parse(data, name)


def spec(**data):
    return parse_spec({"name": "j", "task": {"builtin": "digits"}, "data": data}, "t")


def pod_with(patch: dict) -> dict:
    container = {"name": "train", "image": "img", "env": patch["env"], "envFrom": patch["env_from"],
                 "volumeMounts": patch["volume_mounts"]}
    pod_spec = {"containers": [container], "volumes": patch["volumes"]}
    if patch["service_account"]:
        pod_spec["serviceAccountName"] = patch["service_account"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod_spec}


@pytest.mark.parametrize("host_path", [None, "/var/cache/alchemist/datasets"])
def test_node_cache_volume_on_a_minio_stack_is_valid(host_path):
    s = stack("onprem-lab", object_store={"endpoint": "https://minio.lab:9000", "bucket": "data"})
    patch = pod_patch(spec(source="s3://data/datasets/digits"), s, host_path=host_path, cache_limit="50Gi")
    kubernetes_validate.validate(pod_with(patch), "1.31.0", strict=True)
    env = {e["name"]: e["value"] for e in patch["env"]}
    assert env == {"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "https://minio.lab:9000",
                   "ALCHEMIST_DATA_CACHE": CACHE_MOUNT}
    assert patch["env_from"] == [{"secretRef": {"name": OBJECT_STORE_SECRET, "optional": True}}]
    assert patch["service_account"] == JOB_SERVICE_ACCOUNT
    (vol,) = patch["volumes"]
    assert ("hostPath" in vol) == (host_path is not None) and ("emptyDir" in vol) == (host_path is None)


def test_aws_store_uses_the_irsa_service_account_and_no_keys():
    s = stack("aws-us-west-2", object_store={"bucket": "alchemist-data", "region": "us-west-2"})
    patch = pod_patch(spec(source="s3://alchemist-data/datasets/x", cache="shared"), s)
    kubernetes_validate.validate(pod_with(patch), "1.31.0", strict=True)
    assert patch["env"] == [{"name": "AWS_REGION", "value": "us-west-2"}]
    assert patch["env_from"] == [] and patch["volumes"] == []
    assert patch["service_account"] == JOB_SERVICE_ACCOUNT


def test_shared_fs_data_on_a_stack_without_store_adds_nothing():
    patch = pod_patch(spec(), stack("dev"))
    assert patch == {"env": [], "env_from": [], "volumes": [], "volume_mounts": [], "service_account": None}


def test_local_directory_without_an_object_store_is_one_line(tmp_path):
    s = spec(source=str(tmp_path))
    with pytest.raises(UserError, match=r"^data.source: .* is a local directory, and stack dev has no object store"):
        upload_local_source(s, stack("dev"))
    assert upload_local_source(spec(source="s3://b-1/x"), stack("dev")).data.source == "s3://b-1/x"
