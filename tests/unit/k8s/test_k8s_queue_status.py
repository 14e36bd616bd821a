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
