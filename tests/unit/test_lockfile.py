"""requirements.lock: every pin exact and hashed, in disjoint sections that the images and
scripts/setup select with scripts/lock-sections; the training image's section has no test or
infra packages."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements.lock"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(text: str) -> dict[str, list[str]]:
    """name -> hashes, from requirements text with backslash continuations."""
    out: dict[str, list[str]] = {}
    for entry in re.sub(r"\\\n\s*", " ", text).splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)(.*)$", entry)
        if m:
            out[_norm(m.group(1))] = re.findall(r"--hash=sha256:([0-9a-f]{64})", m.group(3))
    return out


def _section(*names: str) -> dict[str, list[str]]:
    text = subprocess.run([str(REPO / "scripts" / "lock-sections"), *names], check=True,
                          capture_output=True, text=True).stdout
    return _pins(text)


def test_every_pin_is_exact_and_hashed():
    text = LOCK.read_text()
    pins = _pins(text)
    assert pins and all(pins.values()), [n for n, h in pins.items() if not h]
    # nothing but comments, pins and their hash lines
    for line in text.splitlines():
        assert (line.startswith("#") or re.match(r"^[A-Za-z0-9_.-]+==\S+ \\$", line)
                or re.match(r"^    --hash=sha256:[0-9a-f]{64}( \\)?$", line)), line


def test_sections_are_disjoint_and_cover_the_lock():
    sections = {s: _section(s) for s in ("runtime", "interactive", "dev")}
    names = [n for s in sections.values() for n in s]
    assert len(names) == len(set(names))
    assert set(names) == set(_pins(LOCK.read_text()))


def test_training_image_section_holds_no_test_or_infra_packages():
    runtime = _section("runtime")
    assert {"torch", "numpy", "pydantic", "tensorboard"} <= set(runtime)
    assert not {"pytest", "moto", "pulumi", "hypothesis", "selenium", "jupyterlab"} & set(runtime)
    assert "jupyterlab" in _section("interactive")
    assert "pytest" in _section("dev")


def test_every_direct_dependency_is_locked():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    direct = list(project["dependencies"]) + [d for ds in project["optional-dependencies"].values() for d in ds]
    locked = set(_pins(LOCK.read_text()))
    missing = [d for d in direct if _norm(re.split(r"[<>=!~\[; ]", d)[0]) not in locked]
    assert not missing, missing


def test_unknown_section_is_one_line_and_exit_2():
    proc = subprocess.run([str(REPO / "scripts" / "lock-sections"), "runtime", "gpu"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"lock-sections: no section 'gpu' in {REPO / 'scripts' / '..' / 'requirements.lock'}; "
        "accepted: runtime, interactive, dev"]
