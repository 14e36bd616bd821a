"""Write the `cuda` section of requirements.lock: what torch's CUDA build (PyPI's Linux x86_64
wheel of the locked torch version) needs beyond the runtime section, for the training image
built with `images/build --torch cuda`.

pip resolves the locked torch for Linux x86_64 and CPython 3.11 (the images' Python) from the
index's metadata alone (`pip install --dry-run --report`, nothing is downloaded or installed),
with every runtime pin as a constraint, so the section only adds packages and never moves a
runtime pin. Each pin gets the sha256 of every file the index offers (scripts/lockfile.py), and
a `# requires:` comment with its Requires-Dist as the index gives it, so a test can check
offline that runtime + cuda is a closed set on Linux (tests/unit/test_lockfile.py).

    python3 scripts/lockcuda.py            # rewrites the section in place
Needs the package index (PyPI) and `packaging`; scripts/lock runs it after the other sections.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "requirements.lock"
SECTION = "# --- section: cuda ---"
PYTHON = "3.11"  # the images' Python (Debian bookworm, python:3.11-slim-bookworm)
# pip matches --platform tags exactly: every manylinux tag a bookworm (glibc 2.36) machine takes.
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(36, 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]


def _lockfile():
    spec = importlib.util.spec_from_file_location("lockfile", REPO / "scripts" / "lockfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runtime_pins(text: str) -> dict[str, str]:
    """name -> version of the runtime section."""
    pins, section = {}, None
    for line in text.splitlines():
        if line.startswith("# --- section: "):
            section = line.split()[3]
        elif section == "runtime":
            m = re.match(r"^([A-Za-z0-9_.!-]+)==([^ \\]+)", line)
            if m:
                pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def resolve(pins: dict[str, str]) -> list[dict]:
    """pip's report of torch==<pinned> for Linux x86_64, constrained by the runtime pins."""
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "runtime.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in pins.items()))
        report = Path(tmp) / "report.json"
        # --isolated: no pip configuration or PIP_* variables, so no local CPU wheel of torch
        # (PIP_FIND_LINKS) and no CPU index can stand in for PyPI's CUDA build.
        cmd = [sys.executable, "-m", "pip", "--isolated", "install", "--quiet", "--dry-run",
               "--ignore-installed", "--only-binary=:all:", "--implementation", "cp",
               "--python-version", PYTHON, "--target", str(Path(tmp) / "target"),
               "--report", str(report), "-c", str(constraints), f"torch=={pins['torch']}"]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        subprocess.run(cmd, check=True)
        return json.loads(report.read_text())["install"]


def section(pins: dict[str, str], installs: list[dict], hashes) -> str:
    lines = [SECTION,
             f"# torch=={pins['torch']}'s CUDA build on Linux x86_64 (CPython {PYTHON}) needs these"
             " besides the runtime section;",
             '# each `# requires:` line is the package\'s Requires-Dist on the index, separated by " | ".']
    by_name = {canonicalize_name(i["metadata"]["name"]): i for i in installs}
    torch_requires = by_name["torch"]["metadata"].get("requires_dist", [])
    lines.append(f"# torch=={pins['torch']} requires: " + " | ".join(torch_requires))
    extra = sorted(n for n in by_name if n not in pins)
    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(lambda n: hashes(n, by_name[n]["metadata"]["version"]), extra))
    for name, files in zip(extra, found):
        meta = by_name[name]["metadata"]
        if not files:
            raise SystemExit(f"lockcuda: no file of {name}=={meta['version']} on the index")
        lines.append(f"# {meta['name']}=={meta['version']} requires: " +
                     " | ".join(meta.get("requires_dist", [])))
        lines.append(" \\\n".join([f"{meta['name']}=={meta['version']}"] +
                                  [f"    --hash=sha256:{h}" for h in sorted(files)]))
    return "\n".join(lines) + "\n"


def main() -> int:
    text = LOCK.read_text()
    pins = runtime_pins(text)
    lockfile = _lockfile()
    context = ssl.create_default_context(
        cafile=os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE"))
    body = section(pins, resolve(pins), lambda n, v: lockfile.index_hashes(n, v, context))
    head = text.split(SECTION)[0].rstrip("\n") + "\n"
    LOCK.write_text(head + body)
    pinned = sum(1 for line in body.splitlines() if re.match(r"^[A-Za-z0-9_.!-]+==", line))
    print(f"requirements.lock: cuda section with {pinned} pins")
    return 0


if __name__ == "__main__":
    sys.exit(main())
