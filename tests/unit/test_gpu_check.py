"""The GPU check's plan and staging, in process: one GPU is planned honestly (rows needing two
are skipped, with the reason), and only what the interpreter lacks comes from the stage. (The
check run as a process is an integration test.)"""

from __future__ import annotations

import json
import sys
from importlib import metadata

from tests.conftest import REPO

sys.path.insert(0, str(REPO))
from bench import gpu_check, gpu_deps  # noqa: E402


def test_one_gpu_runs_no_two_rank_rows_and_says_what_it_skips(tmp_path):
    mode = gpu_check.Mode(gpu=True, devices=1)
    names = [name for name, _, _ in gpu_check.plan(tmp_path, mode)]
    assert not any(n.startswith(("shared-gpu", "comm-time")) for n in names)
    two = {name for name, needs, _ in gpu_check.plan(tmp_path, mode) if needs >= 2}
    assert {f"multi/{gpu_check._label(a)}" for a in gpu_check.ALGOS} | {"local-nodes/2"} == two
    rows = gpu_check.run_rows(tmp_path, mode, only=two)  # none of them may start
    assert {r.name for r in rows} == two
    assert all(r.status == "SKIP" and r.detail == "needs 2 GPUs; this machine has 1" for r in rows)


def test_only_what_the_interpreter_lacks_is_taken_from_the_stage(tmp_path, monkeypatch):
    have = metadata.version("pydantic")
    for dist in ("pydantic", "no-such-dist", "typing_extensions"):
        (tmp_path / "any" / dist).mkdir(parents=True)
    versions = {"pydantic": have, "no-such-dist": "1.0", "typing_extensions": "0.1"}
    (tmp_path / "manifest.json").write_text(json.dumps({"versions": versions}))
    paths, said = gpu_deps.chosen(tmp_path)
    # pydantic at the lock's version stays the interpreter's; a missing one comes from the
    # stage; torch's own typing_extensions is never shadowed, whatever its version
    assert said == ["no-such-dist==1.0"] and paths == [str(tmp_path / "any" / "no-such-dist")]
    versions["pydantic"] = "0.0.1"
    (tmp_path / "manifest.json").write_text(json.dumps({"versions": versions}))
    assert gpu_deps.chosen(tmp_path)[1] == ["pydantic==0.0.1", "no-such-dist==1.0"]
