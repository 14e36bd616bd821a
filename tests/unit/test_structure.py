"""The shape of the code: the job package and infra meet only at the contract (no import
of infra from alchemist_jobs, no import cycle in either), and functions stay short."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("alchemist_jobs", "infra")
# A function's size in statements (the lines where one begins), not physical lines: the
# formatter (ruff format) breaks one call over many lines, which makes a function no longer.
# 60 statements is about the 80 hand-wrapped lines this limit was first set at.
MAX_FUNCTION_STATEMENTS = 60


@functools.cache
def _parsed(path: Path) -> tuple[list[str], ast.Module]:
    """A module's lines and syntax tree, read and parsed once for all of this file's checks
    (each walks every module of the tree: parsing them afresh made the checks seconds long)."""
    text = path.read_text()
    return text.splitlines(), ast.parse(text, str(path))


def modules() -> dict[str, Path]:
    return _modules(REPO)  # the checkers' own tests point REPO at a planted tree


@functools.cache
def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of ours that `name` imports at module level, in any function or under
    `if TYPE_CHECKING:`: a type-only import never runs, but it is still a dependency (the
    module cannot be read, type-checked or moved without the other), so it counts."""
    tree = _parsed(path)[1]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            # the longest known module that t names (a.b.c -> a.b if c is a class)
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph() -> dict[str, set[str]]:
    return _graph(REPO)


@functools.cache
def _graph(root: Path) -> dict[str, set[str]]:
    known = _modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def test_the_job_package_never_imports_infra():
    bad = sorted(
        f"{m} -> {t}"
        for m, ts in graph().items()
        if m.startswith("alchemist_jobs")
        for t in ts
        if t == "infra" or t.startswith("infra.")
    )
    assert bad == [], bad


def cycles(prefix: str) -> list[list[str]]:
    """Import cycles among the modules under `prefix`."""
    full = graph()
    # Package __init__ edges are part of Python's import of a submodule, not a design
    # dependency: a cycle is between modules.
    g = {
        m: {t for t in ts if t in full and t.startswith(prefix) and not m.startswith(t + ".")}
        for m, ts in full.items()
        if m.startswith(prefix)
    }
    found, state, stack = [], {}, []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(g[m]):
            if state.get(t) == 1:
                found.append(stack[stack.index(t) :] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    return found


def test_no_import_cycles_in_the_job_package():
    assert cycles("alchemist_jobs") == [], "\n".join(" -> ".join(c) for c in cycles("alchemist_jobs"))


def test_no_import_cycles_in_infra():
    assert cycles("infra") == [], "\n".join(" -> ".join(c) for c in cycles("infra"))


def test_the_cycle_check_finds_a_cycle(tmp_path):
    """The checker itself, on a two-module cycle."""
    pkg = tmp_path / "alchemist_jobs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from alchemist_jobs import b\n")
    (pkg / "b.py").write_text("def f():\n    from alchemist_jobs.a import x\n")
    (tmp_path / "infra").mkdir()
    globals()["REPO"], old = tmp_path, REPO
    try:
        assert cycles("alchemist_jobs") == [["alchemist_jobs.a", "alchemist_jobs.b", "alchemist_jobs.a"]]
    finally:
        globals()["REPO"] = old


def test_the_cycle_check_counts_type_only_imports(tmp_path):
    """A cycle closed by an import under `if TYPE_CHECKING:` is still a cycle."""
    pkg = tmp_path / "infra"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from infra import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from infra.a import X\n"
    )
    (tmp_path / "alchemist_jobs").mkdir()
    globals()["REPO"], old = tmp_path, REPO
    try:
        assert cycles("infra") == [["infra.a", "infra.b", "infra.a"]]
    finally:
        globals()["REPO"] = old


def statement_lines(node: ast.AST) -> int:
    """How many lines of `node` begin a statement (its own `def` line included)."""
    return len({s.lineno for s in ast.walk(node) if isinstance(s, ast.stmt)})


def long_functions() -> list[str]:
    out = []
    for path in modules().values():
        for node in ast.walk(_parsed(path)[1]):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = statement_lines(node)
                if n > MAX_FUNCTION_STATEMENTS:
                    out.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({n} statements)")
    return sorted(out)


def test_no_function_longer_than_60_statements():
    assert long_functions() == [], "\n".join(long_functions())


def test_the_function_length_check_sees_long_functions(tmp_path):
    """The checker itself: it finds a long function planted in a package."""
    pkg = tmp_path / "alchemist_jobs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_STATEMENTS))
    (pkg / "long.py").write_text(f"def long():\n{body}")
    # one statement broken over many lines, as the formatter writes a long call, is one
    (pkg / "wrapped.py").write_text("def wrapped():\n    f(\n" + "        1,\n" * 200 + "    )\n")
    (tmp_path / "infra").mkdir()
    globals()["REPO"], old = tmp_path, REPO
    try:
        assert long_functions() == [
            f"alchemist_jobs/long.py:1 long ({MAX_FUNCTION_STATEMENTS + 1} statements)"
        ]
    finally:
        globals()["REPO"] = old
    src = "def f():\n" + "    x = 1\n" * (MAX_FUNCTION_STATEMENTS + 1)
    assert statement_lines(ast.parse(src).body[0]) > MAX_FUNCTION_STATEMENTS


def test_the_dashboards_default_port_is_no_other_training_tools_default():
    """Issue 24.13: 8265 is Ray's dashboard, which often runs on the same machines."""
    from alchemist_jobs.ui.command import DEFAULT_PORT
    from alchemist_jobs.ui.manifests import PORT

    others = {
        8265: "Ray dashboard",
        6006: "TensorBoard",
        8888: "Jupyter",
        9090: "Prometheus",
        9091: "Pushgateway",
        3000: "Grafana",
        9100: "node exporter",
        29500: "torchrun",
        5000: "MLflow",
        8080: "Airflow and many others",
    }
    assert DEFAULT_PORT not in others and PORT not in others, others.get(DEFAULT_PORT)


def test_the_wheels_package_list_holds_every_package_of_the_tree():
    """pyproject.toml lists the packages (it maps monitoring/ into alchemist_jobs): a new
    package folder must be listed, or the wheel would lack it."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "alchemist_jobs").rglob("__init__.py")
    }
    tree |= {"alchemist_jobs.ui.static"}  # the page's files: data, not code
    tree |= {
        "alchemist_jobs.monitoring_data" + ("." + p.name if p != REPO / "monitoring" else "")
        for p in [REPO / "monitoring", *(REPO / "monitoring").iterdir()]
        if p.is_dir() and p.name != "__pycache__"
    }
    assert listed == tree, listed ^ tree


def test_the_code_map_names_every_module_and_only_paths_that_exist():
    """docs/code-map.md: where each module is and where each kind of change goes."""
    text = (REPO / "docs" / "code-map.md").read_text()
    named = set(re.findall(r"`((?:alchemist_jobs|infra|monitoring)/[\w/]+\.py)`", text))
    tree = {
        p.relative_to(REPO).as_posix()
        for pkg in (*PACKAGES, "monitoring")
        for p in (REPO / pkg).rglob("*.py")
        if p.name != "__init__.py" or p.parent.name in ("commands", "strategies")
    }
    assert sorted(tree - named) == [], "modules the map does not name"
    assert sorted(named - tree) == [], "paths in the map that do not exist"


def test_the_config_layer_never_reaches_into_the_worker_runtime():
    """spec.py is read by the CLI, the backends and every worker: it imports no runtime module
    (which would pull the workers' dependencies into every command, and close a circle back
    to spec)."""
    assert sorted(t for t in graph()["alchemist_jobs.spec"] if t.startswith("alchemist_jobs.runtime")) == []


def test_the_training_loop_re_exports_nothing():
    """Names reach their users from the module that defines them, not through trainer.py."""
    tree = ast.parse((REPO / "alchemist_jobs" / "runtime" / "trainer.py").read_text())
    imported = {
        a.asname or a.name
        for n in tree.body
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("alchemist_jobs")
        for a in n.names
    }
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert sorted(imported - used) == []


# Third-party packages that take tens of milliseconds or more to import (`python -X importtime`
# on this project's lock): a command that does not need one must not pay for it, so importing
# one (or a module of ours that imports one) inside a function is start-up time well spent.
HEAVY = {
    "torch",
    "numpy",
    "sklearn",
    "matplotlib",
    "tensorflow",
    "jax",
    "kubernetes",
    "boto3",
    "botocore",
    "s3transfer",
    "pulumi",
    "pulumi_kubernetes",
    "pulumi_aws",
    "pulumi_eks",
    "pulumi_command",
    "tensorboard",
    "prometheus_client",
    "yaml",
    "pydantic",
    "fastapi",
    "uvicorn",
    "jinja2",
    "rich",
    "pathspec",
    "detect_secrets",
    "psutil",
    "pynvml",
    "argcomplete",
    "grafana_foundation_sdk",
    "requests",
    "urllib3",
    "cel",
}


@functools.cache
def _top_level_imports(path: Path) -> set[str]:
    tree = _parsed(path)[1]
    out = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for n in ast.walk(node) if isinstance(node, (ast.Import, ast.ImportFrom, ast.Try)) else ():
            if isinstance(n, ast.Import):
                out |= {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                out |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
    return out


def _heavy(target: str, known: dict[str, Path], seen: set[str]) -> bool:
    """Whether importing `target` imports a HEAVY package (following our modules' top-level
    imports)."""
    if target.split(".")[0] in HEAVY:
        return True
    while target and target not in known:
        target = target.rpartition(".")[0]
    if not target or target in seen:
        return False
    seen.add(target)
    return any(_heavy(t, known, seen) for t in _top_level_imports(known[target]))


def lazy_imports_without_reason() -> list[str]:
    """Imports inside functions that save no start-up time and give no reason."""
    known = modules()
    heavy = functools.cache(lambda target: _heavy(target, known, set()))
    out = []
    for path in known.values():
        lines, tree = _parsed(path)
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                targets = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                )
                if "#" in lines[node.lineno - 1] or any(heavy(t) for t in targets):
                    continue
                out.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    return sorted(set(out))


def test_imports_inside_functions_save_start_up_time_or_say_why():
    """A module's dependencies are at its top, where a reader sees them; an import inside a
    function is for start-up time (it pulls a HEAVY package) or carries its reason."""
    found = lazy_imports_without_reason()
    assert found == [], f"{len(found)} lazy imports:\n" + "\n".join(found)


def _algorithm_probes(path: Path) -> list[str]:
    """`getattr(<...algorithm...>, ...)` and comparisons of an algorithm's name with a name."""
    from alchemist_jobs.spec import ALGORITHMS

    found = []
    for node in ast.walk(_parsed(path)[1]):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", "") == "getattr"
            and node.args
            and re.search(r"\balgo(rithm)?\b", ast.unparse(node.args[0]))
        ):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = {
                c.value
                for s in sides
                for c in ast.walk(s)
                if isinstance(c, ast.Constant) and c.value in ALGORITHMS
            }
            if names and any(re.search(r"\balgo(rithm)?\.name$", ast.unparse(s)) for s in sides):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_an_algorithms_own_class_knows_what_it_is():
    """One home per algorithm (spec.py's class: strategy, servers, exchange, micro-batches):
    no module probes an algorithm's fields with getattr or asks its name."""
    found = [
        f
        for path in sorted((REPO / "alchemist_jobs").rglob("*.py"))
        if path.name != "spec.py"
        for f in _algorithm_probes(path)
    ]
    assert found == [], "\n".join(found)


def test_the_probe_check_finds_a_probe(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        'a = getattr(spec.algorithm, "tau", 1)\nb = algo.name in ("bmuf", "x")\n'
        "c = spec.algorithm.steps_per_exchange\n"
    )
    globals()["REPO"], old = tmp_path, REPO
    try:
        assert [f.split(": ")[1] for f in _algorithm_probes(module)] == [
            "getattr(spec.algorithm, 'tau', 1)",
            "algo.name in ('bmuf', 'x')",
        ]
    finally:
        globals()["REPO"] = old


def test_every_algorithm_names_a_strategy_that_exists():
    import importlib

    from alchemist_jobs.spec import ALGORITHMS

    for name, cls in ALGORITHMS.items():
        for target in filter(None, (cls.strategy, cls.local_update)):
            module, _, attr = target.partition(":")
            assert callable(getattr(importlib.import_module(module), attr)), (name, target)
