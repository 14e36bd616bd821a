#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): every training path on a real GPU, one table, < 6 min.
# Needs only this repository and the lock's runtime and cuda sections (torch's CUDA build):
#   scripts/lock-sections runtime cuda > /tmp/gpu.txt && pip install --require-hashes --no-deps -r /tmp/gpu.txt
# or the training image built with `images/build --torch cuda`.
#   bench/gpu_check.sh [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PY="${PYTHON:-.venv/bin/python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec timeout 360 "$PY" bench/gpu_check.py "$@"
