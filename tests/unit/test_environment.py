"""Every ALCHEMIST_* variable is declared once, typed, in alchemist_jobs/environment.py: the
code names none by hand, what the backends really render (a worker's environment locally,
a job's manifests and a session pod on every stack) holds only declared ones, and
docs/environment.md lists exactly them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from alchemist_jobs import environment as E
from alchemist_jobs.kubernetes.interactive import session_pod
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.local_backend import LocalScheduler
from alchemist_jobs.spec import load_spec
from tests.conftest import EXAMPLES, REPO
from tests.k8s_stacks import stack_outputs

NAME = re.compile(r"ALCHEMIST_[A-Z][A-Z0-9_]*")
DECLARED = {v.name for v in E.VARS}


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings, f-string parts included."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_no_module_names_a_variable_by_hand():
    found = [f"{path.relative_to(REPO)}:{line}: {text.strip()[:70]!r}"
             for path in sorted((REPO / "alchemist_jobs").rglob("*.py"))
             if path.name != "environment.py"
             for line, text in _code_strings(path) if NAME.search(text)]
    assert found == [], "\n".join(found)


def test_the_check_sees_a_name_in_code_but_not_in_a_docstring(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Reads ALCHEMIST_RUN_DIR."""\nimport os\n'
                      'x = f"{os.sep}ALCHEMIST_NODE"\n')
    assert [t for _, t in _code_strings(module) if NAME.search(t)] == ["ALCHEMIST_NODE"]


def _names(env: dict[str, str] | list[dict]) -> set[str]:
    keys = env if isinstance(env, dict) else [e["name"] for e in env]
    return {k for k in keys if k.startswith("ALCHEMIST_")}


def _containers(objs: list[dict]) -> list[dict]:
    out = []
    for obj in objs:
        if obj["kind"] == "JobSet":
            for rj in obj["spec"]["replicatedJobs"]:
                pod = rj["template"]["spec"]["template"]["spec"]
                out += pod.get("initContainers", []) + pod["containers"]
        elif obj["kind"] == "Pod":
            out += obj["spec"].get("initContainers", []) + obj["spec"]["containers"]
    return out


@pytest.mark.parametrize("overrides", [[], ["algorithm.name=async", "algorithm.servers=2"]])
def test_what_the_backends_render_holds_only_declared_variables(tmp_path, overrides):
    spec_path = EXAMPLES / "digits.yaml"
    spec = load_spec(spec_path, overrides)
    rendered: set[str] = set()
    request = LocalScheduler(tmp_path).dryrun(spec, spec_path.parent)
    for p in request.processes + getattr(request, "servers", []):
        rendered |= _names(p.env)
    for s in stack_outputs():
        objs = KubernetesScheduler(s.output).dryrun(spec, spec_path.parent).manifests
        objs.append(session_pod(s.output, "alchemist-session-alice"))
        for c in _containers(objs):
            rendered |= _names(c.get("env", []))
            rendered |= set(NAME.findall(" ".join(c.get("command", []) + c.get("args", []))))
    assert rendered - DECLARED == set()
    assert {E.RUN_DIR.name, E.NODE.name, E.RESTART_ATTEMPT.name} <= rendered


def test_docs_list_exactly_the_declared_variables_with_their_values():
    rows = re.findall(r"^\| `(ALCHEMIST_\w+)` \| ([^|]+) \| ([^|]+) \|$",
                      (REPO / "docs" / "environment.md").read_text(), re.M)
    assert [(n, k.strip(), d.strip()) for n, k, d in rows] == \
        [(v.name, v.kind, v.doc) for v in sorted(E.VARS, key=lambda v: _ORDER.index(v.set_by))]


_ORDER = [E.BACKEND, E.USER, E.IMAGE, E.FAULT]


def test_a_value_that_does_not_parse_names_the_variable_and_unset_is_the_default():
    assert E.METRICS_PORT.get({}) is None
    assert E.METRICS_PORT.get({"ALCHEMIST_METRICS_PORT": ""}, 9400) == 9400
    assert E.METRICS_PORT.get({"ALCHEMIST_METRICS_PORT": "9401"}) == 9401
    with pytest.raises(ValueError, match=r"^ALCHEMIST_METRICS_PORT='x': invalid literal"):
        E.METRICS_PORT.get({"ALCHEMIST_METRICS_PORT": "x"})
    with pytest.raises(ValueError, match=r"^ALCHEMIST_ALLOW_NAN='yes': accepted: 0 or 1$"):
        E.ALLOW_NAN.get({"ALCHEMIST_ALLOW_NAN": "yes"})
    with pytest.raises(KeyError, match="ALCHEMIST_RUN_DIR is not set"):
        E.RUN_DIR.require({})
    assert E.HOME.get({"ALCHEMIST_HOME": "~/x"}) == Path.home() / "x"
