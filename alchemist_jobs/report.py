"""Report a script's progress and metrics to Alchemist; a no-op outside an Alchemist run.

    from alchemist_jobs.report import report

    for step in range(1, steps + 1):
        loss = train_one_step()
        report(step=step, loss=loss, total_steps=steps, samples=batch, accuracy=acc)

`step` and `loss` show in `alchemist run`/`list`/`status`, in Prometheus
(`alchemist_steps_total`, `alchemist_loss`) and TensorBoard (`train/loss`); `samples` counts
toward samples/s; every other keyword becomes `alchemist_script_metric{name="accuracy"}` and
the TensorBoard scalar `script/accuracy`. Every rank may call it; rank 0 writes progress and
TensorBoard. Cheap enough for every step (no I/O but a throttled progress file).
"""

from __future__ import annotations

from alchemist_jobs.runtime.script_report import current


def report(
    step: int | None = None,
    loss: float | None = None,
    total_steps: int | None = None,
    samples: int | None = None,
    **values: float,
) -> None:
    reporter = current()
    if reporter is not None:
        reporter.report(step=step, loss=loss, total_steps=total_steps, samples=samples, **values)
