"""Datasets on cluster stacks: job pods get what `data.source` needs (the object store's
service account and endpoint, the node cache volume), and a local-directory source is
planned at dry run (the URI it will be pushed to, nothing sent) and pushed at submit.

On the old backend the pods got none of it: a run with `data.source: s3://...` on a cluster
could not reach the bucket, and a local directory was shipped as a path no pod has."""

from __future__ import annotations

import kubernetes_validate
import pytest

from alchemist_jobs.contract import JOB_SERVICE_ACCOUNT, ObjectStore
from alchemist_jobs.data.pods import CACHE_MOUNT, CACHE_VOLUME, RUN_UPLOADS
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack_outputs

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[3] / "examples"
RUN = "digits-20260101-120000-aaaa"


def _stack(store: ObjectStore | None):
    out = next(s.output for s in stack_outputs() if s.name == "dev")
    return out.model_copy(update={"object_store": store})


def _pods(objs):
    js = next(o for o in objs if o["kind"] == "JobSet")
    return [rj["template"]["spec"]["template"]["spec"] for rj in js["spec"]["replicatedJobs"]]


def test_pods_reading_an_object_store_source_get_its_identity_endpoint_and_node_cache():
    stack = _stack(ObjectStore(endpoint="https://minio.lab:9000", bucket="data", region="us-east-1"))
    spec = load_spec(EXAMPLES / "digits.yaml", ["data.source=s3://data/datasets/digits/"])
    objs = KubernetesScheduler(stack).dryrun(spec, EXAMPLES, run_id=RUN).manifests
    for pod in _pods(objs):
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                                      "spec": pod}, "1.31.0", strict=True)
        assert pod["serviceAccountName"] == JOB_SERVICE_ACCOUNT
        train = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in train["env"]}
        assert env["AWS_ENDPOINT_URL"] == "https://minio.lab:9000" and env["AWS_REGION"] == "us-east-1"
        assert env["ALCHEMIST_DATA_CACHE"] == CACHE_MOUNT
        assert {"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT} in train["volumeMounts"]
        assert any(v["name"] == CACHE_VOLUME for v in pod["volumes"])
        assert train["envFrom"][0]["secretRef"]["name"].startswith("alchemist-job-")


def test_without_an_object_store_nothing_is_added():
    spec = load_spec(EXAMPLES / "digits.yaml")
    for pod in _pods(KubernetesScheduler(_stack(None)).dryrun(spec, EXAMPLES, run_id=RUN).manifests):
        assert "serviceAccountName" not in pod and "envFrom" not in pod["containers"][0]


def test_a_local_source_is_planned_at_dry_run_and_nothing_is_sent(tmp_path, monkeypatch):
    data = tmp_path / "ds"
    data.mkdir()
    (data / "train.npz").write_bytes(b"x" * 100)
    spec = load_spec(EXAMPLES / "digits.yaml", [f"data.source={data}"])
    stack = _stack(ObjectStore(endpoint="https://minio.lab:9000", bucket="data", region="us-east-1"))
    import alchemist_jobs.data.push as push

    monkeypatch.setattr(push, "push", lambda *a, **k: pytest.fail("a dry run sent data"))
    req = KubernetesScheduler(stack).dryrun(spec, EXAMPLES, run_id=RUN)
    assert req.spec.data.source.startswith(f"s3://data/{RUN_UPLOADS}")
    cm = next(o for o in req.manifests if o["kind"] == "ConfigMap")
    assert req.spec.data.source in "".join(cm["data"].values())  # the pods stage from the bucket
    assert str(data) not in "".join(cm["data"].values())
    assert req.data_upload is not None and req.data_upload[0] == data
