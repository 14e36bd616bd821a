"""One call per optimizer step turns the loop's measurements into the contract's metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from alchemist_jobs.runtime.metrics import WorkerMetrics
from alchemist_jobs.runtime.strategies.base import CommStats


@dataclass
class TimeSplit:
    """Cumulative seconds of this attempt: computing, communicating, waiting for data."""

    compute: float = 0.0
    communication: float = 0.0
    data: float = 0.0


@dataclass
class StepMetrics:
    """The per-step metric updates, and this attempt's running time split and sample count."""

    metrics: WorkerMetrics
    split: TimeSplit = field(default_factory=TimeSplit)
    samples: int = 0
    _exported: dict[str, float] = field(default_factory=lambda: {"sent": 0.0, "recv": 0.0, "rounds": 0})

    def record(self, *, step_s: float, comm_s: float, data_s: float, samples: int, lr: float,
               epoch: float, comm: CommStats) -> None:
        """One optimizer step: its wall time and how it divides, samples, lr and position."""
        m = self.metrics
        compute_s = max(0.0, step_s - comm_s - data_s)
        self.split.compute += compute_s
        self.split.communication += comm_s
        self.split.data += data_s
        self.samples += samples
        m["alchemist_steps_total"].inc()
        m["alchemist_samples_total"].inc(samples)
        m["alchemist_learning_rate"].set(lr)
        m["alchemist_epoch"].set(epoch)
        m["alchemist_step_seconds"].observe(step_s)
        m["alchemist_data_seconds_total"].inc(data_s)
        m["alchemist_communication_seconds_total"].inc(comm_s)
        m["alchemist_compute_seconds_total"].inc(compute_s)
        m["alchemist_last_step_timestamp_seconds"].set(time.time())
        self.export_comm(comm)

    def record_loss(self, loss: float) -> None:
        """The loss is read from the device only now and then (a host sync), not per step."""
        self.metrics["alchemist_loss"].set(loss)

    def record_final_exchange(self, comm_s: float, comm: CommStats) -> None:
        """The exchange after the last step (bmuf's last block, the PS's final model)."""
        self.split.communication += comm_s
        self.metrics["alchemist_communication_seconds_total"].inc(comm_s)
        self.export_comm(comm)

    def export_comm(self, c: CommStats) -> None:
        """Bring the contract's cumulative communication counters up to the strategy's totals."""
        last, m = self._exported, self.metrics
        if c.sent_bytes > last["sent"]:
            m["alchemist_communication_sent_bytes_total"].inc(c.sent_bytes - last["sent"])
        if c.received_bytes > last["recv"]:
            m["alchemist_communication_received_bytes_total"].inc(c.received_bytes - last["recv"])
        if c.rounds > last["rounds"]:
            m["alchemist_sync_rounds_total"].inc(c.rounds - last["rounds"])
        last.update(sent=c.sent_bytes, recv=c.received_bytes, rounds=c.rounds)
