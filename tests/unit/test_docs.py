"""The docs stay true to the repository: every file they name exists, and they show
`alchemist` commands that can run here (no cluster, no job started); running each as written is
tests/integration/test_docs_commands.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TOP = {p.name for p in REPO.iterdir() if not p.name.startswith(".")}
# A backticked repository path: starts with a top-level entry, has a '/'.
PATH = re.compile(r"`([A-Za-z0-9_.-]+/[A-Za-z0-9_./<>*-]*)`")
LINK = re.compile(r"\]\(([^)#:\s]+)(#[^)]*)?\)")
GENERATED = ("bench/results/",)  # written by benchmark runs, not shipped


def referenced(doc: Path) -> list[str]:
    text = doc.read_text()
    out = [m.group(1) for m in LINK.finditer(text)]
    out += [m.group(1) for m in PATH.finditer(text) if m.group(1).split("/")[0] in TOP]
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_file_a_doc_names_exists(doc: Path):
    missing = []
    for ref in referenced(doc):
        if ref.startswith(GENERATED):
            continue
        if any(c in ref for c in "<>*"):  # a pattern (runs/<run id>/, *.yaml): its folder
            ref = re.split(r"[<>*]", ref)[0].rsplit("/", 1)[0]
        base = doc.parent if ref.split("/")[0] not in TOP else REPO
        if not (base / ref).exists() and not (REPO / ref).exists():
            missing.append(ref)
    assert missing == [], f"{doc.name} names files that do not exist: {missing}"


def commands() -> list[tuple[str, str]]:
    """(doc, command line) for every `alchemist ...` line in a fenced shell block."""
    out = []
    for doc in DOCS:
        fence, lang = False, ""
        for raw in doc.read_text().splitlines():
            if raw.strip().startswith("```"):
                fence, lang = not fence, raw.strip()[3:]
                continue
            if not fence or lang not in ("", "bash", "sh", "shell", "console"):
                continue
            for line in [raw]:
                line = re.sub(r"^\$ ", "", line.strip())
                line = line.replace(".venv/bin/alchemist", "alchemist")
                if line.startswith("alchemist "):
                    out.append((doc.name, line.split("  #")[0].split(" #")[0].strip()))
    return out


RUNNABLE = re.compile(r"--dry-run|--version|--help|^alchemist list|^alchemist stack list")


def runnable_here(line: str) -> bool:
    """Needs no cluster and starts no job; a template (an ALL-CAPS placeholder such as RUN
    or S, a spec that is only an example name) is not a command to run."""
    if not RUNNABLE.search(line) or line.endswith("\\"):
        return False  # a continued line: the command goes on below
    words = shlex.split(line)
    if any(re.fullmatch(r"[A-Z]+", w) for w in words):
        return False
    if any(w.endswith((".yaml", ".py")) and not (REPO / w).exists() for w in words):
        return False
    stack = words[words.index("--stack") + 1] if "--stack" in words else "local"
    return stack == "local" or "--outputs" in words


def test_the_docs_show_runnable_commands():
    assert sum(1 for _, c in commands() if runnable_here(c)) >= 4


def test_commands_in_docs_and_benchmarks_use_paths_relative_to_the_repository():
    """A reader's clone is elsewhere: `/home/me/alchemist/.venv/bin/python bench/x.py` in a doc or
    a benchmark's usage line works only on the machine it was written on."""
    absolute_venv = re.compile(r"(?<![\w.~-])/[\w.-]+(?:/[\w.-]+)*/\.venv/")
    files = [*DOCS, *sorted((REPO / "bench").rglob("*.py"))]
    found = [
        f"{p.relative_to(REPO)}:{n}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if absolute_venv.search(line)
    ]
    assert found == []


def test_every_doc_the_code_points_to_exists():
    """Docstrings, comments and messages send readers to docs/*.md: each of those pages exists."""
    pointed = {
        (p.relative_to(REPO).as_posix(), m.group(0))
        for top in ("alchemist_jobs", "infra", "monitoring", "bench", "images", "scripts")
        for p in sorted((REPO / top).rglob("*"))
        if p.is_file() and p.suffix != ".pyc"
        for m in re.finditer(r"docs/[A-Za-z0-9_-]+\.md", p.read_text(errors="replace"))
    }
    assert sorted((f, d) for f, d in pointed if not (REPO / d).exists()) == []
