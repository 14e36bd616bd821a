"""Which rank a failed run's summary names. torchrun's ChildFailedError calls the failure with
the smallest timestamp the root cause, but a failure's timestamp is whole seconds
(torch.distributed.elastic.multiprocessing.errors.ProcessFailure: `int(time.time())` without
an error file) and ties go to the first rank in its dict: when rank 1 dies of SIGABRT and rank 0
then fails on the broken connection within the same second, torchrun names rank 0. Its block
lists every failure, so the summary can name the one a signal ended. The blocks here are
written by light_agent.failed_block, torch's format_msg as the light agent writes it."""

from __future__ import annotations

import signal
from pathlib import Path

from alchemist_jobs import failures, light_agent

T = 1.8e9  # a whole second


def _agent_log(tmp_path: Path, root: light_agent.Failure, others: list[light_agent.Failure]) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    block = light_agent.failed_block("alchemist_jobs.runtime.bootstrap", root, others)
    (logs / "agent-0.log").write_text(block + "\n")
    return logs


def _failure(rank: int, exitcode: int, at: float, tmp_path: Path) -> light_agent.Failure:
    return light_agent.Failure(rank, rank, 1000 + rank, exitcode, at, str(tmp_path / "none.json"))


def test_a_rank_a_signal_ended_in_the_same_second_is_the_cause_not_the_peer_it_broke(tmp_path):
    peer = _failure(0, 1, T + 0.2, tmp_path)  # torchrun's pick: lowest rank of the tie
    aborted = _failure(1, -signal.SIGABRT, T + 0.1, tmp_path)
    logs = _agent_log(tmp_path, peer, [aborted])
    cause = failures.root_cause(logs)
    assert cause is not None and (cause.rank, cause.exitcode) == (1, -6)
    assert failures.failure_record(logs)["summary"].startswith("rank 1 failed: exit -6 (SIGABRT)")


def test_torchruns_root_cause_stands_when_it_was_seen_a_second_earlier(tmp_path):
    first = _failure(0, 1, T, tmp_path)
    later = _failure(1, -signal.SIGABRT, T + 1, tmp_path)
    cause = failures.root_cause(_agent_log(tmp_path, first, [later]))
    assert cause is not None and (cause.rank, cause.exitcode) == (0, 1)


def test_a_rank_its_agent_stopped_is_no_cause(tmp_path):
    """SIGTERM and SIGINT are how a group is stopped, not how a worker breaks."""
    first = _failure(0, 1, T, tmp_path)
    stopped = _failure(1, -signal.SIGTERM, T, tmp_path)
    cause = failures.root_cause(_agent_log(tmp_path, first, [stopped]))
    assert cause is not None and (cause.rank, cause.exitcode) == (0, 1)
