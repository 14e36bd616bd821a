"""`env:` values travel in clear (the dry run, the run's spec.yaml, every checkpoint). A value
of a known token format (GitHub's fine-grained `github_pat_`, Hugging Face's `hf_`) or under a
name that holds a secret by convention (HF_TOKEN, *_API_TOKEN, *_SECRET, *_PASSWORD...) gets
one warning line naming the variable and `secret_env`, never the value; ordinary settings
whose names merely contain such a word get none."""

from __future__ import annotations

import pytest

from alchemist_jobs.spec import parse_spec

GITHUB_PAT = ("github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuV"
              "wXyZ01234")
HF_TOKEN = "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567"


def warnings_for(env: dict[str, str], capsys) -> list[str]:
    parse_spec({"name": "envs", "task": {"builtin": "digits"}, "env": env}, "job.yaml")
    return [x for x in capsys.readouterr().err.splitlines() if x.startswith("warning:")]


@pytest.mark.parametrize("name,value", [
    ("HF_TOKEN", HF_TOKEN),
    ("HUGGING_FACE_HUB_TOKEN", "plainvalue1234"),
    ("GITHUB_TOKEN", GITHUB_PAT),
    ("CI_NOTES", f"push with {GITHUB_PAT}"),
    ("HUB", HF_TOKEN),
    ("OPENAI_API_TOKEN", "abc123def456"),
    ("REPLICATE_API_TOKEN", "r8_notaknownformat"),
    ("SERVICE_TOKEN", "opaque-value"),
    ("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567"),
    ("JWT_SECRET", "change-me-in-prod"),
    ("SMTP_PASSWORD", "hunter2"),
    ("aws_secret_access_key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
])
def test_a_secret_looking_env_is_one_warning_without_its_value(capsys, name, value):
    warnings = warnings_for({name: value, "OMP_NUM_THREADS": "2"}, capsys)
    assert len(warnings) == 1, warnings
    assert f"env.{name}:" in warnings[0] and f"secret_env.{name}" in warnings[0]
    assert value not in warnings[0]


@pytest.mark.parametrize("name,value", [
    ("TOKENIZERS_PARALLELISM", "false"), ("MAX_TOKENS", "512"), ("HF_TOKEN_PATH", "/run/hf"),
    ("PASSWORD_FILE", "/run/secrets/db"), ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"),
    ("HF_HOME", "/data/hf"), ("SECRET_DIR", "/run/secrets"), ("TOKEN_BUDGET", "4096"),
    ("HF_TOKEN", ""), ("MODEL", "hf-internal-testing/tiny-random-bert"),
])
def test_ordinary_settings_get_no_warning(capsys, name, value):
    assert warnings_for({name: value}, capsys) == []
