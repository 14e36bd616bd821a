"""One call per optimizer step turns the loop's measurements into the contract's metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from alchemist_jobs.runtime.metrics import WorkerMetrics
from alchemist_jobs.runtime.strategies.comm_stats import OFF_STEP, CommStats


@dataclass
class TimeSplit:
    """Cumulative seconds of this attempt: computing, waiting for communication, waiting for
    data (together the steps' time), and communication hidden behind compute (apart)."""

    compute: float = 0.0
    communication: float = 0.0
    data: float = 0.0
    overlapped: float = 0.0


@dataclass
class StepMetrics:
    """The per-step metric updates, and this attempt's running time split and sample count."""

    metrics: WorkerMetrics
    split: TimeSplit = field(default_factory=TimeSplit)
    samples: int = 0
    _exported: dict[str, float] = field(default_factory=lambda: {"sent": 0.0, "recv": 0.0, "rounds": 0})

    def record(
        self,
        *,
        step_s: float,
        data_s: float,
        samples: int,
        lr: float,
        epoch: float,
        comm: CommStats,
        read: bool = False,
    ) -> None:
        """One optimizer step: its wall time and how it divides, samples, lr and position.
        Its communication is read with the step's window now on CPU; on a GPU only where
        `read` says the loop syncs with the device anyway (settle())."""
        m = self.metrics
        self.split.data += data_s
        self.samples += samples
        m["alchemist_steps_total"].inc()
        m["alchemist_samples_total"].inc(samples)
        m["alchemist_learning_rate"].set(lr)
        m["alchemist_epoch"].set(epoch)
        m["alchemist_step_seconds"].observe(step_s)
        m["alchemist_data_seconds_total"].inc(data_s)
        m["alchemist_last_step_timestamp_seconds"].set(time.time())
        comm.close_window(tag=max(0.0, step_s - data_s))  # the step's busy seconds
        self.settle(comm, block=read)

    def settle(self, comm: CommStats, block: bool) -> None:
        """Book the communication windows readable now: what each step waited for is
        communication, the rest of its busy time compute; hidden communication apart."""
        m = self.metrics
        for busy, exposed, overlapped in comm.settle(block):
            if busy == OFF_STEP:
                continue  # in comm's totals (result.json), but in no step's time
            compute = max(0.0, busy - exposed) if busy is not None else 0.0
            self.split.compute += compute
            self.split.communication += exposed
            self.split.overlapped += overlapped
            m["alchemist_compute_seconds_total"].inc(compute)
            m["alchemist_communication_seconds_total"].inc(exposed)
            m["alchemist_communication_overlapped_seconds_total"].inc(overlapped)
        self.export_comm(comm)

    def record_loss(self, loss: float) -> None:
        """The loss is read from the device only now and then (a host sync), not per step."""
        self.metrics["alchemist_loss"].set(loss)

    def record_final_exchange(self, comm: CommStats) -> None:
        """The exchange after the last step (bmuf's last block, the PS's final model), and
        every window not read yet."""
        comm.close_window()
        self.settle(comm, block=True)

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
