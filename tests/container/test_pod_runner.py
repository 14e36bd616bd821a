"""The pod runner's own reading of podman: a container that finished is not a failed pod.

podman reports a container whose process has exited as "stopped" until its cleanup has run,
and only then as "exited" (containers/podman v5 libpod/define/containerstate.go:
ContainerStateStopped "was running but has exited", ContainerStateExited "has stopped and
been cleaned up"); both carry the exit code. On a loaded machine the "stopped" window is
long enough for a controller round to see it, and a pod that exited 0 must count as
succeeded there, as the kubelet counts it, not as a failure that restarts the group.
"""

from __future__ import annotations

import subprocess

from tests.container import pod_runner
from tests.container.pod_runner import Cluster

JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ns"},
       "spec": {"completionMode": "Indexed", "completions": 2, "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never",
                                      "containers": [{"name": "main", "image": "x"}]}}}}


def test_a_stopped_container_that_exited_zero_is_a_succeeded_pod(tmp_path, monkeypatch):
    # Each container goes running -> stopped (exit code set, not cleaned up) -> exited.
    timeline = {"c0": ["created 0", "running 0", "stopped 0", "stopped 0", "exited 0"],
                "c1": ["initialized 0", "running 0", "running 0", "stopped 0", "exited 0"]}

    def fake_podman(*args, check=True, timeout=600):
        # Only `inspect` is expected: recreating or removing a container would be a restart.
        assert args[0] == "inspect", f"the runner acted on a finished pod: podman {args}"
        name = args[-1]
        out = timeline[name].pop(0) if len(timeline[name]) > 1 else timeline[name][0]
        return subprocess.CompletedProcess(args, 0, out + "\n", "")

    monkeypatch.setattr(pod_runner, "podman", fake_podman)
    cluster = Cluster([JOB], {}, tmp_path, "t")
    cluster.containers = {p.name: f"c{p.index}" for p in cluster.pods}
    assert cluster.run(poll=0) == "succeeded", cluster.events
    assert cluster.restarts == 0 and cluster.events == []


def test_podman_states_map_to_the_kubelets_view():
    for state in ("created", "initialized", "configured"):
        assert pod_runner.container_phase(state, 0) == ("pending", None), state
    for state in ("running", "paused", "stopping"):
        assert pod_runner.container_phase(state, 0) == ("running", None), state
    assert pod_runner.container_phase("stopped", 0) == ("exited", 0)
    assert pod_runner.container_phase("stopped", 75) == ("exited", 75)
    assert pod_runner.container_phase("exited", 1) == ("exited", 1)
    assert pod_runner.container_phase("removing", 0) == ("failed", None)
