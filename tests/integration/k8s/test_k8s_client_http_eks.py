"""Every request of the real kubernetes client to an EKS stack carries a fresh bearer token
(real SigV4 presigning over a local HTTP server; over a second on a loaded machine, moved from
tests/unit/k8s/test_k8s_client_http.py, whose API-server fixture it uses)."""

from __future__ import annotations

import base64

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from tests.k8s_stacks import stack
from tests.unit.k8s.test_k8s_client_http import RUN, _Recorder, api_server  # noqa: F401  (api_server: a fixture)


class _Clock:
    """time.monotonic for presigned_token: minutes pass when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_every_eks_request_carries_a_fresh_bearer_token(api_server, monkeypatch, tmp_path):  # noqa: F811
    """An EKS stack (no kubeconfig: a boto3-made token) through the REAL kubernetes 36.0.3
    client. Upstream, kubernetes-client/python v36.0.3 kubernetes/client/configuration.py:
    `auth_settings()` adds the Authorization header only when `api_key` already holds
    'BearerToken' (or the legacy 'authorization'), and only then does
    `get_api_key_with_prefix('BearerToken', alias='authorization')` call
    `refresh_api_key_hook`; the prefix is looked up under 'BearerToken' only. So the token
    must be seeded, and kept under 'BearerToken' with its prefix there.

    A `logs --follow` that outlives a token: the log stream drops every few simulated
    minutes while pod 0 still runs, the backend reattaches, and every request (including
    those after 15 minutes) carries `Bearer k8s-aws-v1.` + a token made under 15 minutes
    before it, and the token was renewed on the way."""
    from alchemist_jobs.kubernetes import presigned_token
    from infra.providers.aws.auth import TOKEN_LIFETIME_S, cluster_auth

    for var, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_CONFIG_FILE", str(tmp_path / "none")),
        ("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none")),
    ):
        monkeypatch.setenv(var, value)
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    clock = _Clock()
    monkeypatch.setattr(presigned_token.time, "monotonic", clock)
    made: list[float] = []  # when each token was made (two in one second are equal)
    real_get_token = presigned_token.get_token

    def get_token(*args):
        made.append(clock.now)
        return real_get_token(*args)  # real SigV4 presigning: no network needed

    monkeypatch.setattr(presigned_token, "get_token", get_token)
    import alchemist_jobs.kubernetes.scheduler as scheduler

    monkeypatch.setattr(scheduler, "POLL_S", 0.0)

    url, requests = api_server
    data = stack("aws-us-west-2").output.model_dump(mode="json")
    data["auth"] = cluster_auth(
        "alchemist-aws", "us-west-2", url, base64.b64encode(b"unused over http").decode()
    )
    data.pop("kubeconfig", None)
    sched = KubernetesScheduler(StackOutput.parse(data, "test"))

    # Six stream drops, four simulated minutes apart: 24 minutes of following.
    _Recorder.log_payloads = [f"[rank0]: line {i}\n".encode() for i in range(6)]

    def minutes_pass() -> None:
        clock.now += 4 * 60

    _Recorder.hooks.update(on_log=minutes_pass, clock=clock)
    lines = []
    for line in sched.logs(RUN, rank=0, follow=True):
        lines.append(line)
        if len(lines) == 6:
            break
    assert lines == [f"line {i}\n" for i in range(6)]
    assert requests, "no request reached the server"
    for r in requests:
        assert r["auth"] and r["auth"].startswith("Bearer k8s-aws-v1."), r["auth"]
    assert len(made) >= 2, "the token was never renewed during a 24-minute follow"
    # Each request went out with a token made less than 15 minutes before it.
    for r in requests:
        newest = max(t for t in made if t <= r["at"])
        assert r["at"] - newest < TOKEN_LIFETIME_S
