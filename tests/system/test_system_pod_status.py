"""What every job pod on every stack carries so that a run's status is right and a run never
sticks where it need not (issue 23, 13-16): /dev/shm as a share of the memory limit, the
JobSet restart attempt through the downward API, and the configuration-error path (the
termination message, the Job's FailJob rule, JobSet's FailJobSet rule)."""

from __future__ import annotations

import re

import pytest
from system_tier import ALL_SHAPES, SESSION, STACK_NAMES
from kubernetes.utils.quantity import parse_quantity

from alchemist_jobs.kubernetes import manifests as mf
from alchemist_jobs.environment import CONFIG_ERROR_FILE, RESTART_ATTEMPT
from alchemist_jobs.runtime.config_error import CONFIG_ERROR_EXIT_CODE

# kubernetes v1.33 pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy: the
# failed Job's condition message for a FailJob rule.
JOB_FAILJOB_MESSAGE = "Container {c} for pod {ns}/{pod} failed with exit code {code} matching FailJob rule at index {i}"


def _bytes(q: str) -> int:
    return int(parse_quantity(q))


@pytest.mark.parametrize("shape", ALL_SHAPES)
@pytest.mark.parametrize("stack", STACK_NAMES)
def test_dev_shm_leaves_the_processes_three_quarters_of_the_memory_limit(jobs, stack, shape):
    job = jobs(stack, shape)
    if job is None:
        pytest.skip(f"stack {stack} has no {shape} shape")
    for name, template in job.pod_templates():
        spec = template["spec"]
        shm = [v["emptyDir"] for v in spec.get("volumes", []) if v["name"] == "dshm"]
        if not shm:
            continue
        limit = sum(_bytes(c["resources"]["limits"]["memory"]) for c in spec["containers"])
        assert shm[0]["medium"] == "Memory"
        assert 0 < _bytes(shm[0]["sizeLimit"]) <= limit // 4, (stack, shape, name, shm)


@pytest.mark.parametrize("shape", [s for s in ALL_SHAPES if s != SESSION])
@pytest.mark.parametrize("stack", STACK_NAMES)
def test_worker_pods_know_their_restart_and_fail_at_once_on_a_configuration_error(
        jobs, stack, shape):
    job = jobs(stack, shape)
    if job is None:
        pytest.skip(f"stack {stack} has no {shape} shape")
    (jobset,) = job.objects("JobSet")
    ns, name = jobset["metadata"]["namespace"], jobset["metadata"]["name"]
    rules = jobset["spec"]["failurePolicy"]["rules"]
    for rj in jobset["spec"]["replicatedJobs"]:
        if rj["name"] != mf.WORKER_RJOB:
            continue
        tmpl = rj["template"]["spec"]
        train = next(c for c in tmpl["template"]["spec"]["containers"] if c["name"] == mf.CONTAINER)
        env = {e["name"]: e for e in train["env"]}
        assert env[RESTART_ATTEMPT.name]["valueFrom"]["fieldRef"]["fieldPath"] == \
            f"metadata.annotations['{mf.RESTART_ATTEMPT_LABEL}']"
        assert env[CONFIG_ERROR_FILE.name]["value"] == train["terminationMessagePath"]
        # The Job controller's message for the pod's exit code, through the Job's rules and
        # then JobSet's (first match wins in both: pod_failure_policy.go, failure_policy.go).
        index = next(i for i, r in enumerate(tmpl["podFailurePolicy"]["rules"])
                     if CONFIG_ERROR_EXIT_CODE in r["onExitCodes"]["values"])
        assert tmpl["podFailurePolicy"]["rules"][index]["action"] == "FailJob"
        message = JOB_FAILJOB_MESSAGE.format(c=mf.CONTAINER, ns=ns, pod=f"{name}-worker-0-1-x7k2p",
                                             code=CONFIG_ERROR_EXIT_CODE, i=index)
        hit = next(r for r in rules if "PodFailurePolicy" in r["onJobFailureReasons"]
                   and any(re.search(p, message) for p in r["onJobFailureMessagePatterns"]))
        assert hit["action"] == "FailJobSet", (stack, shape, hit)
