"""Only the backends know which kind of stack they serve (issue 40.3): code outside them asks
the scheduler (`Scheduler` in alchemist_jobs/scheduler.py) what it can do, never compares a
stack's name with "local" nor keeps an `is_local` of its own."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

# The backends, and the places that map a stack name to its kind (stack_kinds.py) and to its
# scheduler (stacks.py).
ALLOWED = (
    "alchemist_jobs/stack_kinds.py",
    "alchemist_jobs/local_backend.py",
    "alchemist_jobs/local_servers.py",
    "alchemist_jobs/kubernetes/",
    "alchemist_jobs/stacks.py",
    # `stack new` refuses "local" as the NAME of a new cluster stack (it would shadow the
    # local stack's name): a question about the name, not about a stack's kind.
    "alchemist_jobs/commands/stack.py",
)


def _is_local_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == "local"
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_local_name(e) for e in node.elts)
    return (isinstance(node, ast.Name) and node.id == "LOCAL") or (
        isinstance(node, ast.Attribute) and node.attr == "LOCAL"
    )


def stack_kind_questions(path: Path) -> list[str]:
    """`file:line: code` for each comparison with "local" (or a LOCAL constant) and each
    `is_local` in the file."""
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    found = []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Compare):
            hit = any(_is_local_name(x) for x in [node.left, *node.comparators])
        elif isinstance(node, ast.Attribute) and node.attr == "is_local":
            hit = True
        elif (
            isinstance(node, (ast.FunctionDef, ast.Name))
            and getattr(node, "name", getattr(node, "id", "")) == "is_local"
        ):
            hit = True
        if hit:
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_code_outside_the_backends_asks_which_kind_of_stack_it_has():
    found = []
    for path in sorted((REPO / "alchemist_jobs").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(ALLOWED):
            continue
        found += stack_kind_questions(path)
    assert found == []


def test_the_stack_kind_check_finds_a_question(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text(
        "def f(args, s, st):\n"
        "    if args.stack == 'local':\n"
        "        pass\n"
        "    x = s.is_local\n"
        "    return st.get('stack') != LOCAL or args.stack in ('local', 'x')\n"
    )
    assert [line.split(": ", 1)[0].rsplit(":", 1)[1] for line in stack_kind_questions(src)] == [
        "2",
        "4",
        "5",
        "5",
    ]


def test_stacks_py_imports_no_cli_module():
    """stacks.py is read by every command and by the dashboard: it needs nothing of the CLI
    (the project's stack names come from pulumi_project.py)."""
    tree = ast.parse((REPO / "alchemist_jobs" / "stacks.py").read_text())
    imported = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    ]
    assert [m for m in imported if m and m.startswith("alchemist_jobs.commands")] == []


def test_a_stack_names_kind_is_its_schedulers_capabilities():
    from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
    from alchemist_jobs.local_backend import LocalScheduler
    from alchemist_jobs.stack_kinds import kind_of

    assert kind_of("local") is LocalScheduler.capabilities
    assert kind_of(None) is LocalScheduler.capabilities  # --stack's default
    assert kind_of("dev") is KubernetesScheduler.capabilities
    assert kind_of("org/project/local") is KubernetesScheduler.capabilities
    assert LocalScheduler.capabilities.runs_here and not LocalScheduler.capabilities.runs_on_its_own
    assert KubernetesScheduler.capabilities.runs_on_its_own and KubernetesScheduler.capabilities.has_outputs


def test_a_local_workers_metrics_bind_loopback_because_the_backend_says_so(tmp_path, monkeypatch):
    """The worker binds what ALCHEMIST_METRICS_ADDR says (runtime/metrics.py), not what its
    stack's name suggests: the local backend sets loopback, unless the user's environment
    names an address."""
    from alchemist_jobs import environment as E
    from alchemist_jobs.local_backend import LocalScheduler
    from alchemist_jobs.spec import load_spec

    spec_path = REPO / "examples" / "digits.yaml"
    monkeypatch.delenv(E.METRICS_ADDR.name, raising=False)
    request = LocalScheduler(tmp_path).dryrun(load_spec(spec_path, []), spec_path.parent)
    assert {p.env.get(E.METRICS_ADDR.name) for p in request.processes} == {"127.0.0.1"}
    monkeypatch.setenv(E.METRICS_ADDR.name, "0.0.0.0")
    request = LocalScheduler(tmp_path).dryrun(load_spec(spec_path, []), spec_path.parent)
    assert {p.env.get(E.METRICS_ADDR.name) for p in request.processes} == {"0.0.0.0"}
