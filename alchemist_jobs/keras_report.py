"""A Keras callback that feeds `alchemist_jobs.report()`: each batch's step and loss, and at
each epoch's end every metric Keras logged (val_* included; one named like report()'s own
arguments, `step`, `total_steps`, `samples` or `epoch`, as `keras_<name>`), so a `model.fit` shows in
`alchemist status`, Prometheus and TensorBoard like any script's loop.

    from alchemist_jobs.keras_report import ReportCallback

    model.fit(x, y, epochs=5, batch_size=32, callbacks=[ReportCallback()])

Keras is imported when the callback is made, not with this module.
"""

from __future__ import annotations

import math
from typing import Any

from alchemist_jobs.report import report


def ReportCallback(samples_per_step: int | None = None) -> Any:  # noqa: N802 (a class to users)
    """A `keras.callbacks.Callback` (tf.keras's when only that is installed). `step` counts
    optimizer steps over the whole fit; `total_steps` = epochs x steps per epoch when Keras
    knows them; `samples_per_step` (the global batch) feeds samples/s."""
    try:
        import keras  # Keras (and the TensorFlow it runs on) only when a fit asks for it

        base = keras.callbacks.Callback
    except ImportError:  # an older TensorFlow with its own Keras
        import tensorflow as tf

        base = tf.keras.callbacks.Callback

    class _Report(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.step = 0
            self.total: int | None = None

        def on_train_begin(self, logs: dict | None = None) -> None:
            p = self.params or {}
            if p.get("epochs") and p.get("steps"):
                self.total = int(p["epochs"]) * int(p["steps"])

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            self.step += 1
            loss = _number((logs or {}).get("loss"))
            report(step=self.step, loss=loss, total_steps=self.total, samples=samples_per_step)

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            # Keras's metrics, floats; Any since mypy cannot tell these names from report()'s own
            values: dict[str, Any] = {
                _metric_name(k): v
                for k, v in ((k, _number(v)) for k, v in (logs or {}).items())
                if v is not None and k != "loss"
            }
            report(
                step=self.step,
                loss=_number((logs or {}).get("loss")),
                total_steps=self.total,
                epoch=float(epoch + 1),
                **values,
            )

    return _Report()


# report()'s own arguments, as this callback passes them: a Keras metric of one of these names
# (a metric function's name is its key in the epoch's logs) is reported as keras_<name>.
_OWN_ARGUMENTS = frozenset({"step", "total_steps", "samples", "epoch"})


def _metric_name(name: str) -> str:
    return f"keras_{name}" if name in _OWN_ARGUMENTS else name


def _number(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
