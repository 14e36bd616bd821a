"""A script's own output while it runs (issue 35, item 1): rank 0's lines reach the terminal
above the progress bar during `alchemist run`, as torchrun and `ray job submit` show them;
`--quiet` silences them, `--rank N` shows another rank's; the bar never says "starting
workers" once a worker has started; `logs --follow` and `submit --follow` follow a local run
to its end. The job is a plain torch script, written as a user writes one (no report())."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alchemist_jobs.rundir import RunDir
from tests.conftest import REPO, cli
from tests.integration.test_local_runs import no_process_of, only_run, wait_for

pytestmark = pytest.mark.timeout(420)

# What a user writes: torch.distributed from torchrun's environment, print() for output, no
# alchemist import. It waits (after its first lines) until the test lets it finish, so the
# test sees those lines arrive while the job is still running.
TRAIN = """
import os, time
from pathlib import Path
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
x = torch.randn(64, 8)
y = (x[:, 0] > 0).long()
for epoch in range(3):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    print(f"rank {rank} epoch {epoch} loss {loss.item():.4f}")
print(f"rank {rank} is waiting for the test")
go = Path(os.environ["GO_FILE"])
deadline = time.monotonic() + 300
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
accuracy = (model(x).argmax(1) == y).float().mean().item()
print(f"rank {rank} final accuracy {accuracy:.3f}")
dist.destroy_process_group()
"""


@pytest.fixture
def job(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    (d / "train.py").write_text(TRAIN)
    (d / "job.yaml").write_text("name: mine\ntask: {script: train.py}\nprocs_per_node: 2\n"
                                "max_restarts: 0\n")
    return d


def _env(home: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home), TERM="xterm",
                COLUMNS="120", **extra)


class Terminal:
    """A command on a pseudo-terminal, its screen output read as it comes."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     cwd=REPO, close_fds=True)
        os.close(slave)
        self.out = bytearray()

    def read(self, wait: float = 0.2) -> bool:
        """Read what is there; False once the terminal is closed."""
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            return False
        self.out += chunk
        return bool(chunk)

    @property
    def text(self) -> str:
        return self.out.decode(errors="replace")

    def until(self, pred, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not pred(self.text):
            if time.monotonic() > deadline or not self.read() and not pred(self.text):
                raise AssertionError(f"timed out waiting for {what}; shown:\n{self.text[-3000:]}")

    def finish(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.read() and time.monotonic() < deadline:
            if self.proc.poll() is not None and not select.select([self.master], [], [], 0.5)[0]:
                break
        os.close(self.master)
        return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))


def test_rank_0_output_streams_above_the_bar_while_the_job_runs(home: Path, job: Path):
    go = job / "go"
    term = Terminal([sys.executable, "-m", "alchemist_jobs", "run", str(job / "job.yaml"),
                     "--set", f"env.GO_FILE={go}"], _env(home))
    try:
        # Rank 0's lines appear while the script is still running (it waits for `go`).
        term.until(lambda t: "rank 0 is waiting for the test" in t, 180, "rank 0's own lines")
        assert term.proc.poll() is None
        shown = term.text
        assert "rank 0 epoch 0 loss " in shown and "rank 0 epoch 2 loss " in shown, shown[-3000:]
        run = only_run(home)
        assert run.worker_records(), "a worker printed, so its record exists"
        # From now on the bar redraws several times; none of them may say "starting workers".
        mark = len(term.text)
        term.until(lambda t: t[mark:].count("mine") >= 3, 60, "the bar redrawn after the lines")
        assert "starting workers" not in term.text[mark:], term.text[mark:][-2000:]
        assert "running" in term.text[mark:], term.text[mark:][-2000:]
    finally:
        go.write_text("")
    code = term.finish(180)
    shown = term.text
    assert code == 0, shown[-3000:]
    assert "Traceback" not in shown, shown[-3000:]
    # The script's own summary line, then the run's; rank 1's lines are not rank 0's.
    assert "rank 0 final accuracy " in shown, shown[-3000:]
    assert shown.index("rank 0 final accuracy ") < shown.index(f"run {run.run_id}: succeeded")
    assert "rank 1 " not in shown, shown[-3000:]
    assert no_process_of(run) == []


def test_quiet_silences_the_script_and_rank_picks_another(home: Path, job: Path):
    go = job / "go"
    go.write_text("")  # no waiting: these runs are read once they end
    quiet = cli("run", str(job / "job.yaml"), "--quiet", "--set", f"env.GO_FILE={go}", home=home)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert "rank 0" not in quiet.stdout + quiet.stderr and "succeeded" in quiet.stdout
    other = cli("run", str(job / "job.yaml"), "--rank", "1", "--set", f"env.GO_FILE={go}",
                home=home)
    assert other.returncode == 0, other.stdout + other.stderr
    assert "rank 1 epoch 0 loss " in other.stdout and "rank 1 final accuracy " in other.stdout
    assert "rank 0 " not in other.stdout, other.stdout
    # Without a terminal the lines go to stdout too, and the summary follows them.
    assert other.stdout.index("rank 1 final accuracy") < other.stdout.index("succeeded")


def test_a_rank_the_job_has_not_is_one_line(home: Path, job: Path):
    r = cli("run", str(job / "job.yaml"), "--rank", "2", "--set", "env.GO_FILE=x", home=home)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: --rank 2: "), r.stderr
    assert "0..1" in r.stderr and not (home / "runs").exists()


@pytest.mark.parametrize("how", ["logs", "submit"])
def test_follow_a_local_run_to_its_end(home: Path, job: Path, how: str):
    go = job / "go"
    if how == "logs":
        started = cli("run", str(job / "job.yaml"), "--detach", "--set", f"env.GO_FILE={go}",
                      home=home)
        assert started.returncode == 0, started.stderr
        argv = ["logs", started.stdout.strip(), "--follow"]
    else:
        argv = ["submit", str(job / "job.yaml"), "--stack", "local", "--follow",
                "--set", f"env.GO_FILE={go}"]
    follower = subprocess.Popen([sys.executable, "-m", "alchemist_jobs", *argv], cwd=REPO,
                                env=_env(home), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 180
        while not any("rank 0 is waiting for the test" in ln for ln in lines):
            line = follower.stdout.readline()
            if not line:
                raise AssertionError(f"the follower ended early: {lines} "
                                     f"{follower.communicate(timeout=60)[1]}")
            lines.append(line)
            assert time.monotonic() < deadline, lines
        run = only_run(home)
        # The run waits for `go`: the follower must still be following it.
        state = wait_for(lambda: run.state().get("state"), 30, "the run's state")
        assert state == "running" and follower.poll() is None
    finally:
        go.write_text("")
    out, err = follower.communicate(timeout=180)
    assert follower.returncode == 0, err
    assert "rank 0 final accuracy " in out, out
    assert RunDir(run.path).state()["state"] == "succeeded", RunDir(run.path).state()
    assert no_process_of(run) == []
