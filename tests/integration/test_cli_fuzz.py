"""Property-based hostile input for the CLI (hypothesis): generated job specs (text and
bytes), `--set` flags, stack outputs files, run ids and corrupted state files of a run.

Whatever the input: no traceback; an error is one line of at most 300 characters that
names where the problem is (the file, the flag, the run id); nothing is written under
ALCHEMIST_HOME; no process is left. `cli.main` runs in this process (with --dry-run where
a valid input would start a job), so thousands of examples take seconds, not hours."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alchemist_jobs import cli
from tests.conftest import EXAMPLES, REPO

pytestmark = pytest.mark.timeout(900)
settings.register_profile(
    "alchemist-fuzz",
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
FUZZ = settings.get_profile("alchemist-fuzz")
COUNTS: dict[str, int] = {}
GOOD = yaml.safe_load((EXAMPLES / "digits.yaml").read_text())
OUTPUTS = json.loads((REPO / "tests/fixtures/stack_outputs/dev.json").read_text())
FIELDS = [
    "name",
    "task",
    "task.builtin",
    "task.script",
    "task.args",
    "task.digits.hidden",
    "nodes",
    "procs_per_node",
    "resources.cpu",
    "resources.memory",
    "resources.gpu",
    "algorithm",
    "algorithm.name",
    "algorithm.servers",
    "algorithm.tau",
    "hyper.lr",
    "hyper.batch_size",
    "hyper.epochs",
    "hyper.steps",
    "hyper.optimizer",
    "data.path",
    "checkpoint.every_steps",
    "env",
    "env.FOO",
    "secret_env",
    "secret_env.TOKEN",
    "priority",
    "image",
    "max_restarts",
    "metrics",
    "epochz",
    "hyper.lrr",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.text(min_size=5000, max_size=6000),
    st.sampled_from(
        [
            "../../etc",
            "/tmp/x",
            "a\0b",
            "é",
            "sync",
            "async",
            "bmuf",
            "-1",
            "1e309",
            "2Gi",
            "digits",
            "x" * 300,
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
    max_leaves=12,
)


def deep(n: int) -> str:
    return "a: " + "[" * n + "]" * n + "\n"


BOMB = (
    "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    + "name: *i\n"
)


def set_path(doc: dict, dotted: str, value) -> dict:
    node = doc
    *parents, last = dotted.split(".")
    for key in parents:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[last] = value
    return doc


@st.composite
def spec_files(draw) -> bytes:
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "bytes", "special"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "special":
        return draw(
            st.sampled_from(
                [
                    deep(500).encode(),
                    deep(2000).encode(),
                    BOMB.encode(),
                    b"\xff\xfe name: x",
                    (yaml.safe_dump(GOOD) + "name: again\n").encode(),
                    b"name: [" * 3000,
                    b"- 1\n- 2\n",
                    b"",
                    b"{" * 1000,
                    ("name: " + "x" * 5_000_000).encode(),
                ]
            )
        )
    doc = json.loads(json.dumps(GOOD))
    for _ in range(draw(st.integers(1, 3))):
        set_path(doc, draw(st.sampled_from(FIELDS)), draw(values))
    return yaml.safe_dump(doc, allow_unicode=draw(st.booleans())).encode()


def children() -> list[int]:
    """Live child processes of this test process."""
    me, found = str(os.getpid()), []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] != "Z":
                found.append(int(d.name))
    return found


TRACEBACK = re.compile(r"(?m)^Traceback \(most recent call last\):")


def check(
    argv: list[str], names: tuple[str, ...], home: Path, counter: str, exit_codes: tuple[int, ...] = (0, 2)
) -> str:
    """Run the CLI in process; check the properties every input must keep."""
    out, err = io.StringIO(), io.StringIO()
    # Children this process had before the call (an earlier test's multiprocessing resource
    # tracker lives as long as the interpreter) are not the call's to clean up.
    before = set(children())
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    text = err.getvalue()
    assert code in exit_codes, (argv[:4], code, text[:500])
    # Python's traceback header at the start of a line: a generated input that is the word
    # "Traceback" may be echoed inside the one error line.
    assert not TRACEBACK.search(text) and not TRACEBACK.search(out.getvalue()), text[:500]
    if code != 0:
        lines = text.rstrip("\n").split("\n")
        assert len(lines) == 1 and lines[0].startswith("error: "), text[:500]
        assert len(lines[0]) <= cli.MAX_ERROR_CHARS, len(lines[0])
        assert any(n in lines[0] for n in names), (names, lines[0])
    assert not home.exists() or counter == "state", "something was written under ALCHEMIST_HOME"
    assert sorted(set(children()) - before) == [], "a process was left running"
    COUNTS[counter] = COUNTS.get(counter, 0) + 1
    return text


@pytest.fixture
def scratch(monkeypatch):
    d = Path(tempfile.mkdtemp(prefix="alc-fuzz-"))
    monkeypatch.setenv("ALCHEMIST_HOME", str(d / "home"))
    monkeypatch.setenv("ALCHEMIST_WARM_AGENT", "0")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_generated_specs(scratch):
    spec = scratch / "job.yaml"

    @settings(FUZZ, max_examples=1000)
    @given(spec_files())
    def one(data: bytes):
        spec.write_bytes(data)
        check(["run", str(spec), "--dry-run"], (str(spec),), scratch / "home", "specs")

    one()
    assert COUNTS["specs"] >= 1000


def test_generated_set_flags(scratch):
    keys = st.one_of(st.sampled_from(FIELDS), st.text(max_size=30))
    raw = st.one_of(
        st.text(max_size=30),
        st.sampled_from(["[", "{a: 1, a: 2}", "*x", "&a [*a]", "[" * 600, "x" * 6000, "'", "5"]),
    )

    @settings(FUZZ, max_examples=1000)
    @given(st.lists(st.tuples(keys, st.sampled_from(["=", ""]), raw), min_size=1, max_size=3))
    def one(sets):
        argv = ["run", str(EXAMPLES / "digits.yaml"), "--dry-run"]
        for key, eq, value in sets:
            argv += ["--set", f"{key}{eq}{value}"]
        check(argv, ("--set", "digits.yaml", "alchemist run"), scratch / "home", "set flags")

    one()
    assert COUNTS["set flags"] >= 1000


def test_generated_stack_outputs_files(scratch):
    outputs = scratch / "outputs.json"
    keys = [
        "stack",
        "provider",
        "kubeconfig",
        "namespace",
        "queue",
        "shared_fs",
        "shared_fs.kind",
        "shared_fs.mount_path",
        "images",
        "images.train",
        "gpu",
        "gpu.per_node",
        "monitoring",
        "eks",
        "object_store",
        "alchemist",
    ]

    @st.composite
    def files(draw) -> bytes:
        kind = draw(st.sampled_from(["mutated", "mutated", "bytes", "special"]))
        if kind == "bytes":
            return draw(st.binary(max_size=200))
        if kind == "special":
            return draw(
                st.sampled_from(
                    [
                        b"[" * 5000,
                        b'{"a":' * 3000,
                        b"\xff\xfe",
                        b'{"stack": "dev", "stack": "x"}',
                        b"null",
                        b"[]",
                    ]
                )
            )
        doc = json.loads(json.dumps(OUTPUTS))
        for _ in range(draw(st.integers(1, 3))):
            set_path(doc, draw(st.sampled_from(keys)), draw(values))
        return json.dumps(doc).encode()

    @settings(FUZZ, max_examples=1000)
    @given(files())
    def one(data: bytes):
        outputs.write_bytes(data)
        check(
            ["run", str(EXAMPLES / "digits.yaml"), "--stack", "dev", "--outputs", str(outputs), "--dry-run"],
            (str(outputs), "--outputs", "stack"),
            scratch / "home",
            "outputs files",
        )

    one()
    assert COUNTS["outputs files"] >= 1000


def test_generated_run_ids(scratch):
    @settings(FUZZ, max_examples=1000)
    @given(
        st.sampled_from(["status", "logs", "cancel"]),
        st.one_of(
            st.text(max_size=300),
            st.sampled_from(["../decoy", "..", ".", "*", "digits-*", "[", "x" * 400, "a/b", "a\0b"]),
        ),
    )
    def one(command: str, ref: str):
        check([command, "--", ref], ("run id",), scratch / "home", "run ids")

    one()
    assert COUNTS["run ids"] >= 1000


def test_corrupt_state_files_never_break_list_or_status(scratch):
    home = scratch / "home"
    good = home / "runs" / "digits-20260101-000000-0000aaaa"
    bad = home / "runs" / "digits-20260101-000001-0000bbbb"
    for d in (good, bad):
        (d / "logs").mkdir(parents=True)
        (d / "spec.yaml").write_text(yaml.safe_dump(GOOD))
    (good / "run.json").write_text(json.dumps(dict(state="succeeded", workers=2, created=1.0)))
    junk = st.one_of(
        st.binary(max_size=200),
        values.map(lambda v: json.dumps(v).encode()),
        st.dictionaries(
            st.sampled_from(
                [
                    "state",
                    "workers",
                    "created",
                    "ended",
                    "step",
                    "total_steps",
                    "loss",
                    "samples_per_s",
                    "restarts",
                    "agents",
                    "launcher_pid",
                    "proc_starts",
                    "message",
                    "epoch",
                    "epochs",
                    "test_accuracy",
                ]
            ),
            values,
            max_size=8,
        ).map(lambda d: json.dumps(d).encode()),
    )

    @settings(FUZZ, max_examples=1000)
    @given(st.sampled_from(["run.json", "progress.json", "result.json"]), junk)
    def one(name: str, data: bytes):
        for f in ("run.json", "progress.json", "result.json"):
            (bad / f).unlink(missing_ok=True)
        (bad / name).write_bytes(data)
        out = check(["list"], ("list",), home, "state", exit_codes=(0,))
        check(["status", "0000bbbb"], ("run id",), home, "state", exit_codes=(0,))
        assert out is not None

    one()
    assert COUNTS["state"] >= 2000
