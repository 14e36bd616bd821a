"""Issue 41.7: a user's Keras `model.fit` feeds `report()` through
alchemist_jobs.keras_report.ReportCallback: the run's progress shows the fit's steps, loss and
total, and the epoch's metrics, from a real TensorFlow worker under the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.integration.test_local_runs import only_run

pytestmark = pytest.mark.timeout(900)

FIT = """
import numpy as np
import keras
from alchemist_jobs.keras_report import ReportCallback
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[ReportCallback(samples_per_step=16)])
"""


def test_a_keras_fit_reports_its_steps_loss_and_metrics(home, tmp_path):
    (tmp_path / "fit.py").write_text(FIT)
    (tmp_path / "job.yaml").write_text(
        "name: fit\ntask: {script: fit.py, framework: tensorflow}\nmax_restarts: 0\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "alchemist_jobs", "run", str(tmp_path / "job.yaml"), "--quiet"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=800,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run = only_run(home)
    prog = run.progress()
    # 64 samples / 16 a batch = 4 steps an epoch, 2 epochs
    assert prog["step"] == 8 and prog["total_steps"] == 8, prog
    assert isinstance(prog["loss"], float) and prog["loss"] > 0, prog
    text = json.dumps(prog)
    assert "accuracy" in text, prog  # the epoch's metric, as report() keeps it


# Keras metrics named as report()'s own parameters (a metric function's name is its key in
# the epoch's logs): each was passed twice to report() and the fit died with a TypeError at
# the first epoch's end.
COLLIDING = """
import numpy as np
import keras
from alchemist_jobs import keras_report
calls = []
keras_report.report = lambda **kw: calls.append(kw)  # what the callback hands report()
def step(y, p): return keras.ops.mean(p)
def samples(y, p): return keras.ops.mean(p) + 1.0
def total_steps(y, p): return keras.ops.mean(p) + 2.0
def epoch(y, p): return keras.ops.mean(p) + 3.0
x = np.ones((8, 2), "float32"); y = np.zeros(8, "int32")
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, activation="softmax")])
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy",
              metrics=[step, samples, total_steps, epoch])
model.fit(x, y, epochs=1, batch_size=4, verbose=0, callbacks=[keras_report.ReportCallback(4)])
import json; print("CALLS " + json.dumps(calls[-1]))
"""


def test_keras_metrics_named_like_reports_parameters_are_reported_not_a_type_error(tmp_path):
    (tmp_path / "fit.py").write_text(COLLIDING)
    r = subprocess.run(
        [sys.executable, str(tmp_path / "fit.py")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    last = json.loads(r.stdout.split("CALLS ", 1)[1])
    # report()'s own arguments keep their meaning: the fit's step count, its epoch
    assert last["step"] == 2 and last["epoch"] == 1.0 and last.get("samples") is None, last
    assert last["total_steps"] == 2, last
    # each colliding metric arrives under its keras_ name, with its own value
    for name in ("step", "samples", "total_steps", "epoch"):
        assert isinstance(last[f"keras_{name}"], float), last
    assert last["keras_samples"] == pytest.approx(last["keras_step"] + 1.0), last
