"""The framework registry as the scripts see it: `python -m alchemist_jobs.frameworks` prints the
optional frameworks, and images/build accepts exactly the registry."""

from __future__ import annotations

import subprocess
import sys

from alchemist_jobs.frameworks import EXTRAS, FRAMEWORKS
from tests.conftest import REPO as ROOT


def test_module_main_prints_the_optional_frameworks():
    out = subprocess.run(
        [sys.executable, "-m", "alchemist_jobs.frameworks", "--optional"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert out.split() == [FRAMEWORKS[n].extra for n in FRAMEWORKS if FRAMEWORKS[n].extra]


def test_image_build_accepts_the_registry_and_refuses_others_in_one_line():
    result = subprocess.run(
        [str(ROOT / "images/build"), "--frameworks", "jax,pytorch"], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"images/build: --frameworks 'jax,pytorch': 'pytorch'; accepted: {', '.join(EXTRAS.values())} (comma-separated)"
    ]
