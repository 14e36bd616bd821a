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
        "name: fit\ntask: {script: fit.py, framework: tensorflow}\nmax_restarts: 0\n")
    r = subprocess.run([sys.executable, "-m", "alchemist_jobs", "run", str(tmp_path / "job.yaml"),
                        "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=800,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stdout + r.stderr
    run = only_run(home)
    prog = run.progress()
    # 64 samples / 16 a batch = 4 steps an epoch, 2 epochs
    assert prog["step"] == 8 and prog["total_steps"] == 8, prog
    assert isinstance(prog["loss"], float) and prog["loss"] > 0, prog
    text = json.dumps(prog)
    assert "accuracy" in text, prog  # the epoch's metric, as report() keeps it
