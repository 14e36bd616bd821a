"""`env:` values are not secrets by contract (they travel in clear); one that looks like a secret
to detect-secrets gets one warning line pointing to `secret_env`, and never shows the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cli

TOKEN = "ghp_8fK2mQ9xZ1vB7nL3pR5tY6wE4sA0dC2hJ9kU"
PASSWORD = "Wq8vN2xL9pZr4Tk1mB7c"


def spec_file(tmp_path: Path, env: dict[str, str]) -> Path:
    lines = "".join(f"  {k}: {v!r}\n" for k, v in env.items())
    p = tmp_path / "job.yaml"
    p.write_text(f"name: envs\ntask: {{builtin: digits}}\nenv:\n{lines}")
    return p


def test_a_secret_looking_env_value_is_one_warning_line_each(tmp_path, home):
    """Finding 7: the token is in the dry run's output (env is clear by contract); the
    warning names each variable and secret_env, and holds no value."""
    spec = spec_file(
        tmp_path,
        {
            "GH": TOKEN,
            "DB_PASSWORD": PASSWORD,
            "NCCL_DEBUG": "INFO",
            "PASSWORD_FILE": "/run/secrets/db",
            "LR_SCALE": "0.5",
        },
    )
    r = cli("run", str(spec), "--dry-run", home=home)
    assert r.returncode == 0, r.stderr
    assert TOKEN in r.stdout  # what the warning is about: env travels in clear
    warnings = [x for x in r.stderr.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 2, r.stderr
    assert "env.GH:" in warnings[0] and "GitHub Token" in warnings[0]
    assert "env.DB_PASSWORD:" in warnings[1] and "secret_env.DB_PASSWORD" in warnings[1]
    assert TOKEN not in r.stderr and PASSWORD not in r.stderr


@pytest.mark.parametrize(
    "name,value",
    [
        ("OMP_NUM_THREADS", "4"),
        ("HF_HOME", "/data/hf"),
        ("MODEL", "bert-base-uncased"),
        ("SECRET_FILE", "/run/secrets/token"),
    ],
)
def test_ordinary_env_values_get_no_warning(tmp_path, home, name, value):
    r = cli("run", str(spec_file(tmp_path, {name: value})), "--dry-run", home=home)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
