"""requirements.lock through scripts/lock-sections (a process): the sections are disjoint and
cover the lock, frameworks add to runtime, the training image has no test or infra packages,
runtime and cuda close over torch's CUDA build, and an unknown section is one line."""

from __future__ import annotations

import re
import subprocess

from tests.unit.test_lockfile import LOCK, REPO, _norm, _pins


def _section(*names: str) -> dict[str, list[str]]:
    text = subprocess.run(
        [str(REPO / "scripts" / "lock-sections"), *names], check=True, capture_output=True, text=True
    ).stdout
    return _pins(text)


FRAMEWORKS = ("tensorflow", "jax")


def _raw_sections() -> dict[str, str]:
    """section name -> its text, as the lock file holds it (before lock-sections' dedupe)."""
    parts = LOCK.read_text().split("# --- section: ")[1:]
    return {p.split(" ---", 1)[0]: p.split("---\n", 1)[1] for p in parts}


def test_sections_are_disjoint_and_cover_the_lock():
    sections = {s: _section(s) for s in ("runtime", "interactive", "dev", "cuda")}
    names = [n for s in sections.values() for n in s]
    assert len(names) == len(set(names))
    frameworks = {n for fw in FRAMEWORKS for n in _section(fw)}
    assert set(names) | frameworks == set(_pins(LOCK.read_text()))


def test_framework_sections_add_to_runtime_and_share_only_identical_pins():
    """A framework's section is what its extra adds to runtime (the image installs `runtime
    tensorflow` alone); a pin it shares with another section is the very same pin, and
    lock-sections prints it once (pip refuses a requirement given twice)."""
    raw = {name: _pins(text) for name, text in _raw_sections().items()}
    for fw in FRAMEWORKS:
        assert not set(raw[fw]) & set(raw["runtime"]), fw
    assert "tensorflow-cpu" in raw["tensorflow"] and {"jax", "jaxlib"} <= set(raw["jax"])
    assert not {"tensorflow-cpu", "jax", "jaxlib", "keras"} & (set(raw["dev"]) | set(raw["runtime"]))
    for name in {n for pins in raw.values() for n in pins}:
        versions = {
            re.search(rf"^{re.escape(name)}==(\S+)", _norm_text(t), re.M).group(1)
            for s, t in _raw_sections().items()
            if name in raw[s]
        }
        assert len(versions) == 1, (name, versions)
    shared = set(raw["tensorflow"]) & set(raw["jax"])
    assert shared, "tensorflow and jax share ml-dtypes and opt-einsum at these pins"
    text = subprocess.run(
        [str(REPO / "scripts" / "lock-sections"), "runtime", "interactive", "dev", *FRAMEWORKS],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    heads = [_norm(ln.split("==")[0]) for ln in text.splitlines() if "==" in ln]
    assert len(heads) == len(set(heads)) and shared <= set(heads)


def _norm_text(text: str) -> str:
    """Pin lines with normalised names, so a name found by _pins is found in the text."""
    return re.sub(r"^([A-Za-z0-9_.-]+)==", lambda m: _norm(m.group(1)) + "==", text, flags=re.M)


def test_training_image_section_holds_no_test_or_infra_packages():
    runtime = _section("runtime")
    assert {"torch", "numpy", "pydantic", "tensorboard"} <= set(runtime)
    assert not {"pytest", "moto", "pulumi", "hypothesis", "selenium", "jupyterlab"} & set(runtime)
    assert "jupyterlab" in _section("interactive")
    assert "pytest" in _section("dev")


def test_unknown_section_is_one_line_and_exit_2():
    proc = subprocess.run(
        [str(REPO / "scripts" / "lock-sections"), "runtime", "gpu"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"lock-sections: no section 'gpu' in {REPO / 'scripts' / '..' / 'requirements.lock'}; "
        "accepted: runtime, interactive, tensorflow, jax, dev, cuda"
    ]


def _cuda_requires() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, Requires-Dist) from the cuda section's `# requires:` lines."""
    out = {}
    for line in LOCK.read_text().split("# --- section: cuda ---")[1].splitlines():
        m = re.match(r"^# ([A-Za-z0-9_.-]+)==(\S+) requires: ?(.*)$", line)
        if m:
            reqs = [r.strip() for r in m.group(3).split(" | ") if r.strip()]
            out[_norm(m.group(1))] = (m.group(2), reqs)
    return out


def test_runtime_and_cuda_sections_are_a_closed_set_for_torchs_cuda_build():
    """What the training image built with `--torch cuda` installs (runtime + cuda, with
    --no-deps) must hold everything PyPI's Linux x86_64 torch wheel requires, recursively, at
    versions that satisfy each requirement: else `pip check` fails the build, or worse, a
    library is missing at the first CUDA call. The requirements are the index's own
    (Requires-Dist, recorded by scripts/lockcuda.py); markers are evaluated for the image."""
    from packaging.requirements import Requirement

    runtime, cuda = _section("runtime"), _section("cuda")
    versions = {}
    for entry in re.sub(r"\\\n\s*", " ", LOCK.read_text()).splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", entry)
        if m:
            versions[_norm(m.group(1))] = m.group(2)
    requires = _cuda_requires()
    assert "torch" in requires and {"nvidia-nccl-cu13", "nvidia-cudnn-cu13", "triton"} <= set(cuda)
    assert set(cuda) <= set(requires), set(cuda) - set(requires)
    assert not set(runtime) & set(cuda)
    env = {
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "python_version": "3.11",
        "python_full_version": "3.11.2",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
    todo, seen, reached = [(Requirement(r), "") for r in requires["torch"][1]], set(), set()
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate(dict(env, extra=extra)):
            continue
        name = _norm(req.name)
        reached.add(name)
        assert name in versions, f"{req} (needed by torch's CUDA build) is not locked"
        assert req.specifier.contains(versions[name], prereleases=True), (str(req), versions[name])
        for ex in sorted(req.extras) or [""]:
            if (name, ex) in seen or name not in requires:
                continue  # a runtime package: its own closure is the runtime section's test
            seen.add((name, ex))
            todo += [(Requirement(r), ex) for r in requires[name][1]]
    assert set(cuda) == reached - set(runtime), "cuda pins torch's CUDA build does not need"
