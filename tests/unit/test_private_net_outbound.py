"""What a local job's private network does for outbound (alchemist_jobs/private_net.py): the
S3 endpoints a worker is given that name this machine's loopback are rewritten to the address
slirp4netns gives it inside (10.0.2.2); resolv.conf files whose nameservers are all loopback
(unreachable from inside) are told apart; a missing slirp4netns is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from alchemist_jobs import private_net


@pytest.mark.parametrize("given, seen", [
    ("http://127.0.0.1:9000", "http://10.0.2.2:9000"),
    ("http://localhost:9000/", "http://10.0.2.2:9000/"),
    ("https://LOCALHOST", "https://10.0.2.2"),
    ("http://[::1]:9000/minio", "http://10.0.2.2:9000/minio"),
    ("http://127.0.1.1:80", "http://10.0.2.2:80"),
    ("http://user@127.0.0.1:9000", "http://user@10.0.2.2:9000"),
])
def test_loopback_endpoints_name_the_host_as_seen_from_inside(given, seen):
    env = {"AWS_ENDPOINT_URL": given, "AWS_ENDPOINT_URL_S3": given, "OTHER": given}
    got = private_net.for_job(env)
    assert got == {"AWS_ENDPOINT_URL": seen, "AWS_ENDPOINT_URL_S3": seen, "OTHER": given}
    assert env["AWS_ENDPOINT_URL"] == given  # the launcher's own environment is left alone


@pytest.mark.parametrize("url", ["https://s3.eu-west-1.amazonaws.com", "http://10.1.2.3:9000",
                                 "http://minio.internal:9000", "http://[::1", ""])
def test_other_endpoints_are_left_as_given(url):
    assert private_net.for_job({"AWS_ENDPOINT_URL": url}) == {"AWS_ENDPOINT_URL": url}


@pytest.mark.parametrize("text, loopback", [
    ("nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch .\n", ["127.0.0.53"]),
    ("# Docker\nnameserver 127.0.0.11\n", ["127.0.0.11"]),
    ("nameserver 127.0.0.53\nnameserver 10.0.0.2\n", []),  # one reachable is enough
    ("nameserver 10.255.255.53\n", []),
    ("search example.com\n", []),
])
def test_loopback_only_nameservers_are_found(tmp_path: Path, text, loopback):
    (tmp_path / "resolv.conf").write_text(text)
    assert private_net.loopback_nameservers(str(tmp_path / "resolv.conf")) == loopback


def test_a_missing_slirp4netns_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert private_net.no_outbound() == "slirp4netns is not installed"
