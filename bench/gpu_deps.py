"""The few dependencies the GPU check stages for a GPU machine's own Python, and which it uses.

A GPU machine brings its own Python with its own CUDA build of torch (and numpy, which that
torch is built against), often no network, and not always the rest of what a worker imports.
`scripts/stage-gpu-deps` (run where PyPI is reachable) downloads the wheels below at the lock's
versions and hashes, for CPython 3.10 to 3.14 on Linux x86_64, and unpacks each into
`.gpu-deps/<cpXY, abi3 or any>/<dist>/` (git-ignored, under 64 MiB; name it when copying
the tree, as an ignored path travels only if named). On the GPU machine `bench/gpu_check.sh` runs
`python bench/gpu_deps.py`, which prints the PYTHONPATH entries of the staged distributions
this interpreter lacks or holds at another version than the lock: only the check's own
processes see them, and nothing torch itself imports is ever shadowed.

Standard library only: it runs before anything else is known to import.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGE = REPO / ".gpu-deps"
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")

# Distribution -> the module a worker imports from it. What a built-in task's worker, the
# local launcher and the check import beyond torch and numpy (tests/unit/test_gpu_check.py
# imports them all with nothing else on the path).
STAGED = {
    "pydantic": "pydantic", "pydantic_core": "pydantic_core",
    "annotated-types": "annotated_types", "typing-inspection": "typing_inspection",
    "typing_extensions": "typing_extensions", "PyYAML": "yaml",
    "prometheus_client": "prometheus_client", "psutil": "psutil",
    "nvidia-ml-py": "pynvml", "tensorboard": "tensorboard", "protobuf": "google.protobuf",
    "packaging": "packaging", "absl-py": "absl",
}
# torch imports these itself: a staged copy is used only where the interpreter has none.
TORCH_OWN = {"typing_extensions", "packaging"}


def tag(version: tuple[int, int] | None = None) -> str:
    major, minor = version or sys.version_info[:2]
    return f"cp{major}{minor}"


def chosen(stage: Path = STAGE) -> tuple[list[str], list[str]]:
    """(PYTHONPATH entries, 'dist==version' said for each) of the staged distributions this
    interpreter should take from the stage."""
    manifest = stage / "manifest.json"
    if not manifest.is_file():
        return [], []
    entries = json.loads(manifest.read_text())
    paths, said = [], []
    for dist, want in entries["versions"].items():
        try:
            have = metadata.version(dist)
        except metadata.PackageNotFoundError:
            have = None
        if have == want or (have is not None and dist in TORCH_OWN):
            continue
        for where in (stage / tag() / dist, stage / "abi3" / dist, stage / "any" / dist):
            if where.is_dir():
                paths.append(str(where))
                said.append(f"{dist}=={want}")
                break
    return paths, said


if __name__ == "__main__":
    print(":".join(chosen()[0]))
