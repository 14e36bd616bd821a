"""The API server's own rules that strict schema validation misses, checked before any call.

Each case is a manifest kubernetes-validate (strict) accepts and the API server refuses, per
kubernetes/kubernetes release-1.33: pkg/apis/batch/validation/validation.go
(validatePodFailurePolicy: restartPolicy Never, podReplacementPolicy Failed, onExitCodes
containerName among the pod's containers), apimachinery pkg/util/validation/validation.go
(IsValidLabelValue, IsDNS1123Subdomain), pkg/apis/core/validation/validation.go
(ValidateConfigMap: 1 MiB)."""

from __future__ import annotations

import base64
import copy

import kubernetes_validate
import pytest

from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes.api_checks import ApiServerWouldRefuse, validate_for_api_server
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack
from tests.unit.k8s.conftest import EXAMPLES

RUN = "digits-20260101-120000-ab12"


def _objs():
    s = stack("dev").output
    spec = load_spec(EXAMPLES / "digits.yaml")
    return KubernetesScheduler(s).dryrun(spec, EXAMPLES, run_id=RUN).manifests


def _job_spec(objs):
    return objs[2]["spec"]["replicatedJobs"][0]["template"]["spec"]


def _as_job(objs):
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
            "spec": copy.deepcopy(_job_spec(objs))}


def test_what_we_render_passes():
    validate_for_api_server(_objs())


def _refused(objs, match):
    # Strict schema validation lets it through...
    for obj in objs:
        if obj["kind"] != "JobSet":
            kubernetes_validate.validate(obj, "1.33.0", strict=True)
    kubernetes_validate.validate(_as_job(objs), "1.33.0", strict=True)
    # ...the API server would not.
    with pytest.raises(ApiServerWouldRefuse, match=match) as e:
        validate_for_api_server(objs)
    assert "\n" not in str(e.value)


def test_pod_failure_policy_with_terminating_or_failed_replacement():
    objs = _objs()
    _job_spec(objs)["podReplacementPolicy"] = "TerminatingOrFailed"
    _refused(objs, r"podReplacementPolicy: 'TerminatingOrFailed'; accepted: 'Failed'")


def test_pod_failure_policy_with_restart_policy_on_failure():
    objs = _objs()
    _job_spec(objs)["template"]["spec"]["restartPolicy"] = "OnFailure"
    _refused(objs, r"restartPolicy: 'OnFailure'; accepted: 'Never'")


def test_label_value_over_63_characters():
    objs = _objs()
    objs[2]["metadata"]["labels"]["alchemist.io/name"] = "x" * 64
    _refused(objs, r"metadata\.labels\.alchemist\.io/name: 'x{64}' is not a valid label value")
    objs = _objs()
    _job_spec(objs)["template"]["metadata"]["labels"]["alchemist.io/run"] = "-bad"
    _refused(objs, r"template\.metadata\.labels\.alchemist\.io/run: '-bad'")


def test_name_not_a_dns_1123_subdomain():
    objs = _objs()
    objs[0]["metadata"]["name"] = "Digits_Run"
    _refused(objs, r"^ConfigMap Digits_Run: metadata\.name: 'Digits_Run' is not a DNS-1123")


def test_fail_job_rule_naming_a_missing_container():
    objs = _objs()
    _job_spec(objs)["podFailurePolicy"]["rules"][0]["onExitCodes"]["containerName"] = "trian"
    _refused(objs, r"containerName: 'trian' is not a container of the pod; "
                   r"accepted: one of \['setup', 'train'\]")


def test_config_map_over_1_mib():
    objs = _objs()
    objs[0]["binaryData"] = {"code.tar.gz": base64.b64encode(b"\0" * (1024 * 1024)).decode()}
    _refused(objs, r"^ConfigMap .*: data: 10\d{5} bytes; accepted: at most 1048576 bytes")


def test_schedule_refuses_before_any_call(fake):
    """`schedule` runs the checks too (a request built or edited elsewhere): one line, and
    the cluster is never called."""
    sched = KubernetesScheduler(stack("dev").output)
    request = sched.dryrun(load_spec(EXAMPLES / "digits.yaml"), EXAMPLES, run_id=RUN)
    request.manifests[2]["metadata"]["labels"]["alchemist.io/name"] = "n" * 64
    with pytest.raises(ApiServerWouldRefuse) as e:
        sched.schedule(request)
    assert "\n" not in str(e.value) and fake.calls == []
    assert issubclass(ApiServerWouldRefuse, UserError)  # exit 2 from the CLI
