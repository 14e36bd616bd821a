#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): every training path on a real GPU, one table, < 6 min.
# Needs only this repository and `pip install -r requirements.lock` (a CUDA build of torch).
#   bench/gpu_check.sh [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PY="${PYTHON:-.venv/bin/python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec timeout 360 "$PY" bench/gpu_check.py "$@"
