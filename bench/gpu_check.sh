#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): every training path on this machine's GPUs, one table,
# under 7 minutes on one GPU, offline. It runs with the interpreter it is given: PYTHON, else
# the active python3 (never a guessed virtual environment), and that interpreter's own torch
# (2.4 or newer, a CUDA build). What that Python lacks of the few other dependencies
# comes from .gpu-deps/ (scripts/stage-gpu-deps, run where PyPI is reachable; docs/gpu.md).
#   PYTHON=/usr/bin/python3 bench/gpu_check.sh [--out FILE]
# GPU_CHECK_TIMEOUT_S (default 420: the 7 minutes it is planned for) bounds the whole run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$(command -v python3 || command -v python || true)}"
[ -n "$PY" ] || { echo "gpu_check: no python3 on PATH; set PYTHON to an interpreter" >&2; exit 1; }
staged="$("$PY" bench/gpu_deps.py)"  # the staged dependencies this interpreter lacks
export PYTHONPATH="$PWD${staged:+:$staged}${PYTHONPATH:+:$PYTHONPATH}"
exec timeout --kill-after=10 "${GPU_CHECK_TIMEOUT_S:-420}" "$PY" bench/gpu_check.py "$@"
