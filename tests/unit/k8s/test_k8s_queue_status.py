"""`status` and `list` through a run's life in the queue and on the cluster: queued (and
Kueue's reason), admitted, running, preempted and requeued, readmitted, restarting after pod
0 is lost, Unschedulable, ImagePullBackOff, OOMKilled, failed with the reason.

The cluster's side is driven by small controller steps whose effects come from the upstream
sources at the pinned versions:
* kueue v0.13.4, pkg/controller/jobframework/reconciler.go (`StopJob` on eviction: the job
  is suspended) and pkg/workload/workload.go + apis/kueue/v1beta1/workload_types.go
  (conditions QuotaReserved, Admitted, Evicted with reason `Preempted`, Requeued; a pending
  workload has QuotaReserved=False, reason `Pending`, message "couldn't assign flavors to
  pod set <name>: ...");
* jobset v0.12.0, pkg/controllers/jobset_controller.go (a suspended JobSet suspends its
  Jobs, whose pods the Job controller deletes: they get SIGTERM) and
  pkg/controllers/failure_policy.go (a failed Job restarts the group: `status.restarts`
  goes up, every Job is recreated, new pods carry `jobset.sigs.k8s.io/restart-attempt`);
* kubernetes v1.33 pkg/controller/job (backoffLimit 0: the first failed pod fails the Job).
"""

from __future__ import annotations

from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.scheduler import FAILED, PENDING, RESTARTING, RUNNING
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack
from tests.unit.k8s.conftest import EXAMPLES, outputs

RUN = "digits-20260101-120000-ab12"


def _submit(fake, nodes=2):
    sched = KubernetesScheduler(stack("dev").output)
    spec = load_spec(EXAMPLES / "digits.yaml", [f"nodes={nodes}", "procs_per_node=1"])
    sched.schedule(sched.dryrun(spec, EXAMPLES, run_id=RUN))
    return sched


def _workload(fake, conditions):
    """Kueue's Workload for the JobSet (labelled with its uid, as Kueue's JobUIDLabel)."""
    js = fake.objects[("JobSet", RUN)]
    fake.objects[("Workload", f"jobset-{RUN}-1a2b3")] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": f"jobset-{RUN}-1a2b3", "namespace": "research",
                     "labels": {"kueue.x-k8s.io/job-uid": js["metadata"]["uid"]}},
        "status": {"conditions": conditions}}


def _cond(type_, status, reason="", message=""):
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T12:00:00Z"}


def _admit(fake):
    """Kueue admits: QuotaReserved and Admitted True, the JobSet unsuspended."""
    _workload(fake, [_cond("QuotaReserved", "True", "QuotaReserved"),
                     _cond("Admitted", "True", "Admitted")])
    fake.set_job(RUN, spec={"suspend": False})


def _preempt(fake, attempt=0):
    """Kueue evicts (Preempted) and stops the JobSet: suspended, its pods deleted (SIGTERM:
    the pod script exits 143)."""
    _workload(fake, [_cond("QuotaReserved", "False", "Pending"),
                     _cond("Admitted", "False", "NoReservation"),
                     _cond("Evicted", "True", "Preempted",
                           "Preempted to accommodate a workload (UID: 77, JobUID: 78) due to "
                           "prioritization in the ClusterQueue"),
                     _cond("Requeued", "True", "Preempted")])
    fake.set_job(RUN, spec={"suspend": True})
    for key in [k for k in fake.objects if k[0] == "Pod"]:
        del fake.objects[key]


def test_queued_says_why_in_kueues_words(fake, run_cli):
    sched = _submit(fake)
    assert sched.status(RUN).state == "queued"
    _workload(fake, [_cond("QuotaReserved", "False", "Pending",
                           "couldn't assign flavors to pod set worker: insufficient unused "
                           "quota for cpu in flavor default-flavor, 3 more needed")])
    st = sched.status(RUN)
    assert st.state == "queued"
    assert st.message == ("waiting in Kueue queue research: couldn't assign flavors to pod set "
                          "worker: insufficient unused quota for cpu in flavor default-flavor, "
                          "3 more needed")
    code, out, err = run_cli("list", "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 0 and out.splitlines()[1].split()[:2] == [RUN, "queued"]


def test_admitted_then_unschedulable_then_image_pull_then_running(fake):
    sched = _submit(fake)
    _workload(fake, [_cond("QuotaReserved", "True"), _cond("Admitted", "True")])
    assert sched.status(RUN).state == "admitted"  # Kueue has not unsuspended it yet
    fake.set_job(RUN, spec={"suspend": False})
    fake.add_pod(RUN, 0, "Pending", status={"conditions": [
        _cond("PodScheduled", "False", "Unschedulable",
              "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")]})
    st = sched.status(RUN)
    assert st.state == PENDING and "Unschedulable" not in st.message
    assert "not scheduled: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu." in st.message
    fake.objects[("Pod", f"{RUN}-worker-0-0-abcde")]["status"] = {
        "phase": "Pending", "containerStatuses": [{"name": "train", "state": {"waiting": {
            "reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}}}]}
    assert "train: ImagePullBackOff" in sched.status(RUN).message
    fake.objects[("Pod", f"{RUN}-worker-0-0-abcde")]["status"] = {"phase": "Running"}
    fake.add_pod(RUN, 1, "Running")
    assert sched.status(RUN).state == RUNNING


def test_preempted_requeued_readmitted_resumes(fake, run_cli):
    sched = _submit(fake)
    _admit(fake)
    fake.add_pod(RUN, 0)
    fake.add_pod(RUN, 1)
    assert sched.status(RUN).state == RUNNING
    _preempt(fake)
    st = sched.status(RUN)
    assert st.state == "preempted" and not st.finished
    assert "Preempted: Preempted to accommodate a workload" in st.message
    assert "requeued in queue research" in st.message
    code, out, err = run_cli("status", RUN, "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 0 and "preempted" in out
    # Readmitted: the SIGTERMed pods' FailJob (exit 143) made JobSet restart the group
    # without counting it; the new attempt's pods run.
    _admit(fake)
    fake.set_job(RUN, status={"restarts": 1, "restartsCountTowardsMax": 0})
    fake.add_pod(RUN, 0, suffix="new00", attempt=1, created="2026-01-01T13:00:00Z")
    fake.add_pod(RUN, 1, suffix="new01", attempt=1, created="2026-01-01T13:00:00Z")
    st = sched.status(RUN)
    assert st.state == RUNNING and st.restarts == 1


def test_losing_pod_0_restarts_the_group(fake):
    sched = _submit(fake)
    _admit(fake)
    fake.add_pod(RUN, 0, "Failed", status={"conditions": [
        _cond("DisruptionTarget", "True", "DeletionByTaintManager")]})
    fake.add_pod(RUN, 1, "Failed", status={"containerStatuses": [{"name": "train", "state": {
        "terminated": {"exitCode": 1, "reason": "Error"}}}]})
    st = sched.status(RUN)
    assert st.state == RESTARTING
    assert f"{RUN}-worker-0-0-abcde DeletionByTaintManager" in st.message
    # JobSet recreates every Job (restart 1); until the new pods run: restarting.
    fake.set_job(RUN, status={"restarts": 1, "restartsCountTowardsMax": 1})
    fake.add_pod(RUN, 0, "Pending", suffix="new00", attempt=1, created="2026-01-01T13:00:00Z")
    st = sched.status(RUN)
    assert st.state == RESTARTING and "restart 1 of at most 3" in st.message


def test_oom_killed_until_restarts_run_out(fake):
    sched = _submit(fake, nodes=1)
    _admit(fake)
    fake.add_pod(RUN, 0, "Failed", status={"containerStatuses": [{"name": "train", "state": {
        "terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
    st = sched.status(RUN)
    assert st.state == RESTARTING and "train exited 137 (OOMKilled)" in st.message
    # jobset v0.12.0 failure_policy.go: past maxRestarts the JobSet fails, reason
    # ReachedMaxRestarts.
    fake.set_job(RUN, status={"restarts": 3, "conditions": [_cond(
        "Failed", "True", "ReachedMaxRestarts",
        "jobset failed due to reaching max number of restarts")]})
    st = sched.status(RUN)
    assert st.state == FAILED and st.finished
    assert st.message.startswith("ReachedMaxRestarts: jobset failed due to reaching max")
    assert "train exited 137 (OOMKilled)" in st.message


# --- issue 23: restart counts, a pod stuck on a lost node, configuration errors ------------
# The pods' failures go through the fake's controllers (fake_kube.FakeKube.fail_pod): the Job
# controller's podFailurePolicy (kubernetes v1.33 pkg/controller/job/pod_failure_policy.go)
# and JobSet's failurePolicy (jobset v0.12.0 pkg/controllers/failure_policy.go), applied to
# the rules of the JobSet the backend created.


def _attempt(fake, attempt, phase="Running"):
    """The pods JobSet creates for restart `attempt` (the older attempt's are gone)."""
    for key in [k for k, o in fake.objects.items() if k[0] == "Pod"]:
        del fake.objects[key]
    return [fake.add_pod(RUN, i, phase, suffix=f"a{attempt}p{i}", attempt=attempt,
                         created=f"2026-01-01T13:0{attempt}:00Z")["metadata"]["name"]
            for i in range(2)]


def test_restarts_after_preemptions_say_how_many_spent_max_restarts(fake, run_cli):
    """Three preemptions (SIGTERM: exit 143, FailJob, rule StoppedFromOutside:
    RestartJobSetAndIgnoreMaxRestarts) then one crash (RestartJobSet): JobSet's
    status.restarts is 4, restartsCountTowardsMax 1. The run has spent 1 of its 3."""
    import json

    from alchemist_jobs.kubernetes import manifests as mf

    sched = _submit(fake)
    _admit(fake)
    for attempt in range(3):
        pods = _attempt(fake, attempt)
        assert fake.fail_pod(pods[0], mf.PREEMPTED_EXIT_CODE) == \
            "RestartJobSetAndIgnoreMaxRestarts"
    pods = _attempt(fake, 3)
    assert fake.fail_pod(pods[1], 1) == "RestartJobSet"
    _attempt(fake, 4, "Pending")
    js = fake.objects[("JobSet", RUN)]["status"]
    assert (js["restarts"], js["restartsCountTowardsMax"]) == (4, 1)
    st = sched.status(RUN)
    assert "restart 4 of at most 3" not in st.message
    assert "(restart 4: 1 of at most 3 counted, 3 after being stopped from outside)" \
        in st.message, st.message
    assert st.restarts == 4 and st.restarts_counted == 1
    code, out, err = run_cli("status", RUN, "--stack", "dev", "--outputs", outputs("dev"),
                             "--json")
    assert code == 0 and json.loads(out)["restarts_counted"] == 1
    code, out, err = run_cli("status", RUN, "--stack", "dev", "--outputs", outputs("dev"))
    assert "restarts   4 (1 counted towards max_restarts)" in out
    # Two more crashes spend the other two; the third past them fails the run.
    for attempt in (4, 5):
        assert fake.fail_pod(_attempt(fake, attempt)[0], 1) == "RestartJobSet"
    st = sched.status(RUN)
    assert st.restarts_counted == 3 and "3 of at most 3 counted" in st.message
    assert fake.fail_pod(_attempt(fake, 6)[0], 1) == "ReachedMaxRestarts"
    assert sched.status(RUN).state == FAILED


def _stamp(seconds_from_now: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds_from_now))


def _lost_node(fake, pod_name, node, deadline_in_s):
    """Node `node` stops reporting: the node lifecycle controller sets the pod's Ready to
    False (pkg/controller/util/node MarkPodsNotReady), and after the unreachable taint's
    tolerationSeconds the taint manager deletes it (pkg/controller/tainteviction
    taint_eviction.go: DisruptionTarget, reason DeletionByTaintManager; the API server sets
    deletionTimestamp = now + the grace period). No kubelet ever confirms: it stays."""
    pod = fake.objects[("Pod", pod_name)]
    pod["spec"]["nodeName"] = node
    pod["metadata"]["deletionTimestamp"] = _stamp(deadline_in_s)
    pod["metadata"]["deletionGracePeriodSeconds"] = 30
    pod["status"]["conditions"] = [
        _cond("Ready", "False"),
        _cond("DisruptionTarget", "True", "DeletionByTaintManager",
              "Taint manager: deleting due to NoExecute taint")]


def test_a_pod_on_a_lost_node_blocking_the_restart_is_named_with_what_to_do(fake, run_cli):
    import json

    sched = _submit(fake)
    _admit(fake)
    p0, p1 = _attempt(fake, 0)
    _lost_node(fake, p1, "gpu-node-7", deadline_in_s=30)
    # pod 0's torchrun loses its peer and exits 1: JobSet restarts the group, BlockingRecreate
    # deletes every Job (pod 0 goes: its kubelet confirms) and waits for pod 1.
    assert fake.fail_pod(p0, 1) == "RestartJobSet"
    del fake.objects[("Pod", p0)]
    st = sched.status(RUN)
    assert st.state == RESTARTING and "stuck" not in st.message  # within its grace period
    _lost_node(fake, p1, "gpu-node-7", deadline_in_s=-20 * 60)
    st = sched.status(RUN)
    assert st.state == RESTARTING
    assert st.message.startswith(f"stuck: pod {p1} on node gpu-node-7 is still terminating "
                                 "20 min after its deletion deadline: its node stopped "
                                 "reporting (DeletionByTaintManager"), st.message
    assert f"kubectl delete pod {p1} -n research --force --grace-period=0" in st.message
    assert "node.kubernetes.io/out-of-service" in st.message
    (stuck,) = st.stuck_pods
    assert (stuck["pod"], stuck["node"]) == (p1, "gpu-node-7") and stuck["overdue_s"] >= 1200
    code, out, err = run_cli("status", RUN, "--stack", "dev", "--outputs", outputs("dev"),
                             "--json")
    assert code == 0 and [p["pod"] for p in json.loads(out)["stuck_pods"]] == [p1]
    code, out, err = run_cli("status", RUN, "--stack", "dev", "--outputs", outputs("dev"))
    assert f"stuck      pod {p1} on node gpu-node-7: 20 min past its deletion deadline" in out
    # The operator force-deletes it (or podgc does, once the node is tainted out-of-service
    # or removed: pkg/controller/podgc gc_controller.go gcTerminating, gcOrphaned): JobSet
    # creates the new attempt and nothing is stuck any more.
    del fake.objects[("Pod", p1)]
    _attempt(fake, 1)
    st = sched.status(RUN)
    assert st.state == RUNNING and not st.stuck_pods and "stuck" not in st.message


def test_a_configuration_error_fails_the_run_at_once_and_says_why(fake, run_cli):
    """A worker without a GPU (or NCCL net plugin) exits CONFIG_ERROR_EXIT_CODE with its
    line in the termination message: the Job fails by its FailJob rule, JobSet by rule
    ConfigurationError (FailJobSet), no restart spent, and `status` says why."""
    from alchemist_jobs.runtime.config_error import CONFIG_ERROR_EXIT_CODE

    sched = _submit(fake)
    _admit(fake)
    p0, p1 = _attempt(fake, 0)
    why = ("rank 1: resources.gpu=1: no usable GPU (CUDA unavailable); set resources.gpu=0 "
           "to train on CPU, or resources.gpu_fallback=true to allow it\n")
    assert fake.fail_pod(p1, CONFIG_ERROR_EXIT_CODE, message=why) == \
        "FailJobSetFailurePolicyAction"
    st = sched.status(RUN)
    assert st.state == FAILED and st.finished and st.restarts == 0
    assert f"(pod {p1}: train exited {CONFIG_ERROR_EXIT_CODE}, a configuration error that no " \
        "restart fixes: rank 1: resources.gpu=1: no usable GPU (CUDA unavailable)" in st.message
    code, out, err = run_cli("status", RUN, "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 0 and "no usable GPU" in out and "failed" in out
