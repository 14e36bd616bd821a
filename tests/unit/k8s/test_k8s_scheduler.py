"""The Kubernetes backend at the API-client boundary: a fake client records every call the
backend makes (tests/unit/k8s/fake_kube.py; no API server can run on these machines), and
the tests assert on those calls and on how the backend reads the objects back."""

from __future__ import annotations

import json
import threading

import pytest

from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.scheduler import FAILED, PENDING, RESTARTING, RUNNING, SUCCEEDED
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack
from tests.unit.k8s.conftest import EXAMPLES, outputs
from tests.unit.k8s.fake_kube import _api_error

RUN = "digits-20260101-120000-ab12"


def _submit(fake, stack_name="dev", spec="digits.yaml", overrides=(), run_id=RUN):
    sched = KubernetesScheduler(stack(stack_name).output)
    spec_obj = load_spec(EXAMPLES / spec, list(overrides))
    handle = sched.schedule(sched.dryrun(spec_obj, EXAMPLES, run_id=run_id))
    return sched, handle


# --- submit / cancel ---------------------------------------------------------------------------


def test_submit_creates_the_config_map_and_policy_before_the_jobset(fake, run_cli):
    code, out, err = run_cli("submit", "examples/digits.yaml", "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 0, err
    assert [k for k, _ in fake.creates()] == ["ConfigMap", "NetworkPolicy", "JobSet"]
    names = {n for _, n in fake.creates()}
    assert len(names) == 1
    run_id = err.split("submitted ")[1].split()[0]
    assert run_id.startswith("digits-")
    # Then the JobSet owns the other two, so its TTL (or a delete) removes them all.
    job_uid = fake.objects[("JobSet", run_id)]["metadata"]["uid"]
    for kind in ("ConfigMap", "NetworkPolicy"):
        owners = fake.objects[(kind, run_id)]["metadata"]["ownerReferences"]
        assert owners[0]["kind"] == "JobSet" and owners[0]["uid"] == job_uid
        assert owners[0]["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert fake.methods()[-2:] == ["patch_namespaced_config_map", "patch_namespaced_network_policy"]
    # The namespace is the stack's, on every call.
    assert {kw["namespace"] for _, kw in fake.calls} == {"research"}


def test_a_refused_job_leaves_nothing_behind(fake, run_cli):
    fake.fail["create_namespaced_custom_object"] = _api_error(
        403, "Forbidden", 'jobsets.jobset.x-k8s.io is forbidden: User "alice" cannot create'
    )
    code, out, err = run_cli("submit", "examples/digits.yaml", "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 1
    assert err.count("\n") == 1 and "create_namespaced_custom_object was refused: 403 Forbidden" in err
    assert [k for k, _ in fake.deletes()] == ["NetworkPolicy", "ConfigMap"]
    assert not fake.objects


def test_cancel_deletes_the_jobset_and_what_it_owns(fake, run_cli):
    _submit(fake)
    fake.set_job(RUN, spec={"suspend": False})
    fake.add_pod(RUN, 0)
    fake.calls.clear()
    code, out, err = run_cli("cancel", RUN[:12], "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 0, err
    assert f"run {RUN}: cancelled" in out
    assert sorted(fake.deletes()) == sorted([("JobSet", RUN), ("NetworkPolicy", RUN), ("ConfigMap", RUN)])
    job_delete = next(
        kw for m, kw in fake.calls if m == "delete_namespaced_custom_object" and kw["plural"] == "jobsets"
    )
    assert job_delete["propagation_policy"] == "Background"  # its pods go with it


def test_cancel_of_a_finished_run_deletes_nothing(fake):
    sched, _ = _submit(fake)
    fake.set_job(
        RUN,
        spec={"suspend": False},
        status={
            "conditions": [
                {"type": "Completed", "status": "True", "lastTransitionTime": "2026-01-01T13:00:00Z"}
            ]
        },
    )
    fake.calls.clear()
    assert sched.cancel(RUN).state == SUCCEEDED
    assert fake.deletes() == []


# --- status ------------------------------------------------------------------------------------


def _running(index: int) -> dict:
    return {"containerStatuses": [{"name": "train", "state": {"running": {}}}]}


def test_status_queued(fake):
    sched, _ = _submit(fake)
    st = sched.status(RUN)
    assert st.state == "queued"
    assert "waiting in Kueue queue research" in st.message


def test_status_pending_pods_say_why(fake):
    sched, _ = _submit(fake, overrides=["nodes=2", "procs_per_node=1"])
    fake.set_job(RUN, spec={"suspend": False}, status={"active": 2, "startTime": "2026-01-01T12:00:00Z"})
    fake.add_pod(RUN, 0, "Running")
    fake.add_pod(
        RUN,
        1,
        "Pending",
        status={
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient cpu.",
                }
            ]
        },
    )
    st = sched.status(RUN)
    assert st.state == PENDING
    assert "1/2 worker pods running" in st.message and "Insufficient cpu" in st.message
    # An image that cannot be pulled is named, too.
    fake.objects[("Pod", f"{RUN}-worker-0-1-abcde")]["status"] = {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "train",
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
            }
        ],
    }
    assert "ImagePullBackOff" in sched.status(RUN).message


def test_status_running(fake, run_cli):
    _submit(fake, overrides=["nodes=2", "procs_per_node=1"])
    fake.set_job(RUN, spec={"suspend": False}, status={"active": 2})
    fake.add_pod(RUN, 0, "Running")
    fake.add_pod(RUN, 1, "Running")
    code, out, err = run_cli("status", RUN, "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 0, err
    assert "state      running" in out and "workers    2" in out
    assert f"directory  /shared/runs/{RUN}" in out


def test_status_restarting_then_running_again(fake):
    """JobSet v0.12.0 (pkg/controllers/failure_policy.go): a failed Job restarts the group;
    status.restarts counts it and the new pods carry restart-attempt = restarts."""
    sched, _ = _submit(fake, overrides=["nodes=2", "procs_per_node=1"])
    fake.set_job(RUN, spec={"suspend": False}, status={"restarts": 0})
    fake.add_pod(RUN, 0, "Running", created="2026-01-01T12:00:00Z")
    fake.add_pod(
        RUN,
        1,
        "Failed",
        suffix="old01",
        created="2026-01-01T12:00:00Z",
        status={
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}]
        },
    )
    st = sched.status(RUN)
    assert st.state == RESTARTING
    assert "DeletionByTaintManager" in st.message and f"{RUN}-worker-0-1-old01" in st.message
    # JobSet recreates every Job: restarts 1, the new attempt's pods come up.
    fake.set_job(RUN, status={"restarts": 1, "restartsCountTowardsMax": 1})
    fake.add_pod(RUN, 0, "Pending", suffix="new00", created="2026-01-01T12:05:00Z", attempt=1)
    st = sched.status(RUN)
    assert st.state == RESTARTING and "restart 1 of at most 3" in st.message
    fake.objects[("Pod", f"{RUN}-worker-0-0-new00")]["status"]["phase"] = "Running"
    fake.add_pod(RUN, 1, "Running", suffix="new01", created="2026-01-01T12:05:00Z", attempt=1)
    st = sched.status(RUN)
    assert st.state == RUNNING and st.restarts == 1


def test_status_succeeded_and_failed(fake):
    sched, _ = _submit(fake)
    fake.set_job(
        RUN,
        spec={"suspend": False},
        status={
            "conditions": [
                {"type": "Completed", "status": "True", "lastTransitionTime": "2026-01-01T13:00:00Z"}
            ]
        },
    )
    st = sched.status(RUN)
    assert st.state == SUCCEEDED and st.ended is not None
    fake.set_job(
        RUN,
        status={
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "ReachedMaxRestarts",
                    "message": "jobset failed due to reaching max number of restarts",
                    "lastTransitionTime": "2026-01-01T13:00:00Z",
                }
            ]
        },
    )
    fake.add_pod(
        RUN,
        0,
        "Failed",
        status={
            "containerStatuses": [
                {"name": "train", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
            ]
        },
    )
    st = sched.status(RUN)
    assert st.state == FAILED
    assert st.message.startswith("ReachedMaxRestarts: jobset failed")
    assert "train exited 1 (Error)" in st.message


def test_list_shows_every_run(fake, run_cli):
    _submit(fake, run_id="digits-20260101-120000-aaaa")
    _submit(fake, run_id="digits-20260101-130000-bbbb")
    fake.set_job(
        "digits-20260101-130000-bbbb",
        spec={"suspend": False},
        status={"conditions": [{"type": "Completed", "status": "True"}]},
    )
    code, out, err = run_cli("list", "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()[1:]]
    # newest first
    assert [(r[0], r[1]) for r in rows] == [
        ("digits-20260101-130000-bbbb", "succeeded"),
        ("digits-20260101-120000-aaaa", "queued"),
    ]


def test_unknown_run_is_one_line(fake, run_cli):
    _submit(fake)
    code, out, err = run_cli("status", "nope", "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 2 and err.count("\n") == 1
    assert "run 'nope': no such run on stack dev" in err and RUN in err


# --- logs --------------------------------------------------------------------------------------


def _log_calls(fake):
    return [kw for m, kw in fake.calls if m == "read_namespaced_pod_log"]


def test_logs_follow_the_pod_of_the_rank(fake, run_cli):
    _submit(fake, overrides=["nodes=2", "procs_per_node=2"])
    fake.set_job(
        RUN, spec={"suspend": False}, status={"conditions": [{"type": "Completed", "status": "True"}]}
    )
    fake.add_pod(RUN, 0, "Succeeded", log="[rank0]: zero\n[rank1]: one\n")
    fake.add_pod(RUN, 1, "Succeeded", log="agent line\n[rank2]: two\n[rank3]: three a\n[rank3]: three b\n")
    code, out, err = run_cli(
        "logs", RUN, "--rank", "3", "--follow", "--stack", "dev", "--outputs", outputs("dev")
    )
    assert code == 0, err
    # Its own rank's lines without the prefix, and torchrun's agent lines of its pod (where
    # the agent reports a worker's failure); never another rank's lines.
    assert out == "agent line\nthree a\nthree b\n"
    calls = _log_calls(fake)
    assert [c["name"] for c in calls] == [f"{RUN}-worker-0-1-abcde"]
    assert calls[0]["follow"] is True and calls[0]["container"] == "train"


def test_logs_of_rank_on_a_many_pod_job_use_torchruns_order(fake):
    sched, _ = _submit(fake, overrides=["nodes=12", "procs_per_node=1"])
    fake.set_job(RUN, spec={"suspend": False}, status={"active": 12})
    for i in range(12):
        fake.add_pod(
            RUN, i, "Running", log=f"[rank{[0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9].index(i)}]: pod {i}\n"
        )
    assert list(sched.logs(RUN, rank=2)) == ["pod 10\n"]
    assert _log_calls(fake)[-1]["name"] == f"{RUN}-worker-0-10-abcde"
    assert _log_calls(fake)[-1]["follow"] is False


def test_logs_bad_rank_is_one_line(fake, run_cli):
    _submit(fake)
    code, out, err = run_cli("logs", RUN, "--rank", "2", "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 2 and "--rank 2: run" in err and "has ranks 0..1" in err


# --- run: submit and follow -----------------------------------------------------------------


PROGRESS = (
    '[rank0]: alchemist-progress {"step": 100, "epoch": 3.9, "loss": 0.2}\n'
    '[rank0]: alchemist-progress {"step": 120, "epoch": 4.2, "loss": 0.1234}\n'
)


def _timeline(final: str):
    """The cluster's side of a run, advanced by the backend's own status reads."""
    state = {"lists": 0}

    def on_call(fake, method):
        # Counted on the main thread only: the --follow log thread reads at its own pace.
        if (
            method != "list_namespaced_custom_object"
            or threading.current_thread() is not threading.main_thread()
        ):
            return
        state["lists"] += 1
        (name,) = [n for (k, n) in fake.objects if k == "JobSet"]
        if state["lists"] == 5:  # Kueue admits it, the pod runs
            fake.set_job(name, spec={"suspend": False}, status={"active": 1})
            fake.add_pod(name, 0, "Running", log="[rank0]: hello from rank 0\n" + PROGRESS)
        if state["lists"] == 16:
            cond = (
                {"type": "Completed", "status": "True"}
                if final == "ok"
                else {
                    "type": "Failed",
                    "status": "True",
                    "reason": "ReachedMaxRestarts",
                    "message": "jobset failed due to reaching max number of restarts",
                }
            )
            fake.set_job(name, status={"conditions": [cond]})

    return on_call


def test_run_follows_a_cluster_job_to_success(fake, run_cli):
    fake.on_call = _timeline("ok")
    code, out, err = run_cli(
        "run", "examples/digits.yaml", "--stack", "dev", "--outputs", outputs("dev"), "--follow"
    )
    assert code == 0, err
    assert "queued: waiting in Kueue queue research" in err
    assert "running: 1 pod(s) running" in err
    # Rank 0's newest progress line, read from its pod log tail through the API server.
    assert "step 120  epoch 4.20/10  loss 0.1234" in err
    assert "hello from rank 0\n" in out  # --follow: rank 0's log, rank prefix removed
    assert "alchemist-progress" not in out  # the channel's lines are not the user's log
    assert "succeeded" in out
    tails = [kw for m, kw in fake.calls if m == "read_namespaced_pod_log" and "tail_lines" in kw]
    assert tails and tails[0]["name"].endswith("-worker-0-0-abcde")
    assert all(kw["_request_timeout"] for m, kw in fake.calls)  # nothing can hang the CLI
    assert not [m for m, _ in fake.calls if m.startswith("connect_")]  # no pods/proxy


def test_run_follow_leaves_no_log_thread_behind(fake, run_cli):
    """The fake's pod stays Running after the JobSet completes (a pod lingers while the
    kubelet reports): the --follow log thread must end with the command, not keep
    re-reading that pod's log for as long as the process lives."""
    fake.on_call = _timeline("ok")
    code, out, err = run_cli(
        "run", "examples/digits.yaml", "--stack", "dev", "--outputs", outputs("dev"), "--follow"
    )
    assert code == 0, err
    assert "hello from rank 0\n" in out, (err, [m for m, _ in fake.calls][-30:])
    assert [t.name for t in threading.enumerate() if t.name == "alchemist-logs"] == []


class _CountingStop(threading.Event):
    """A stop event that records each pause of the log follower and is set after `limit`."""

    def __init__(self, limit: int):
        super().__init__()
        self.pauses, self.limit = 0, limit

    def wait(self, timeout=None):
        self.pauses += 1
        if self.pauses >= self.limit:
            self.set()
        return self.is_set()


def test_a_log_stream_that_keeps_ending_is_reattached_after_a_pause(fake):
    """A Running pod whose log stream ends at once (an API server or proxy that drops
    streams) is re-read once per pause, not in a busy loop against the API server."""
    sched, _ = _submit(fake)
    fake.set_job(RUN, spec={"suspend": False}, status={"active": 1})
    fake.add_pod(RUN, 0, "Running", log="[rank0]: line\n")
    stop = _CountingStop(limit=3)
    lines = list(sched.logs(RUN, rank=0, follow=True, stop=stop))
    assert lines == ["line\n"]  # read again after each drop, each line shown once
    reads = len(_log_calls(fake))
    assert stop.pauses == 3 and reads <= stop.pauses + 1, (reads, stop.pauses)


def test_run_reports_a_failed_cluster_job(fake, run_cli):
    fake.on_call = _timeline("fail")
    code, out, err = run_cli(
        "run", "examples/digits.yaml", "--stack", "dev", "--outputs", outputs("dev"), "--quiet"
    )
    assert code == 1
    assert "ReachedMaxRestarts" in err.splitlines()[-1]


def test_submit_returns_at_once(fake, run_cli):
    code, out, err = run_cli("submit", "examples/digits.yaml", "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 0
    assert not any(m.startswith(("list_", "read_")) for m in fake.methods())


# --- bad input: one line, nothing created ---------------------------------------------------------


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["--stack", "aws-us-west-2", "--set", "resources.gpu=8", "--set", "procs_per_node=1"],
            "resources.gpu: 8 GPUs per node is more than the 4 GPUs per node of stack aws-us-west-2; "
            "accepted: resources.gpu <= 4",
        ),
        (
            ["--stack", "dev", "--set", "resources.gpu=1"],
            "resources.gpu: 1 GPUs per node is more than stack dev, which has no GPU nodes",
        ),
    ],
)
def test_gpu_over_ask_is_one_line_and_creates_nothing(fake, run_cli, args, expected):
    stack_name = args[1]
    code, out, err = run_cli("submit", "examples/digits.yaml", *args, "--outputs", outputs(stack_name))
    assert code == 2
    assert err.count("\n") == 1 and expected in err
    assert fake.calls == []


def test_missing_image_is_one_line_and_creates_nothing(fake, run_cli, tmp_path):
    data = json.loads(outputs("onprem-lab").read_text())
    data["images"]["train"] = ""
    path = tmp_path / "onprem-lab.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli("run", "examples/digits.yaml", "--stack", "onprem-lab", "--outputs", path)
    assert code == 2 and err.count("\n") == 1
    assert "image: the spec sets none and stack onprem-lab exports no images.train" in err
    assert fake.calls == []
    # The spec's own image is enough.
    code, out, err = run_cli(
        "submit",
        "examples/digits.yaml",
        "--stack",
        "onprem-lab",
        "--outputs",
        path,
        "--set",
        "image=registry.lab.internal:5000/mine:1",
    )
    assert code == 0, err
    jobset = next(o for (k, _), o in fake.objects.items() if k == "JobSet")
    job = jobset["spec"]["replicatedJobs"][0]["template"]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.lab.internal:5000/mine:1"


def test_unknown_stack_is_one_line_and_creates_nothing(fake, run_cli, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi CLI here: --outputs names the stack
    code, out, err = run_cli("submit", "examples/digits.yaml", "--stack", "aws-us-west-3")
    assert code == 2 and err.count("\n") == 1
    # a typo is said as one, with the stacks there are (not "install the Pulumi CLI")
    assert "--stack aws-us-west-3: no such stack; accepted: local, aws-eu-west-1" in err
    code, out, err = run_cli(
        "submit", "examples/digits.yaml", "--stack", "aws-us-west-3", "--outputs", outputs("aws-us-west-2")
    )
    assert code == 2 and err.count("\n") == 1
    assert "holds the outputs of stack 'aws-us-west-2', not of --stack 'aws-us-west-3'" in err
    assert fake.calls == []


def test_a_run_deleted_while_watched_ends_the_watch(fake, run_cli):
    def on_call(f, method):
        if (
            method == "list_namespaced_custom_object"
            and threading.current_thread() is threading.main_thread()
        ):
            f.objects.clear()  # someone else cancelled it

    fake.on_call = on_call
    code, out, err = run_cli("run", "examples/digits.yaml", "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 1 and "is gone from stack dev (cancelled elsewhere?)" in err


def test_a_missing_namespace_is_one_line(fake, run_cli):
    fake.fail["create_namespaced_config_map"] = _api_error(404, "NotFound", 'namespaces "research" not found')
    code, out, err = run_cli("submit", "examples/digits.yaml", "--stack", "dev", "--outputs", outputs("dev"))
    assert code == 1 and err.count("\n") == 1
    assert 'create_namespaced_config_map was refused: 404 NotFound: namespaces "research"' in err
    assert fake.deletes() == []
