#!/usr/bin/env bash
# The GPU command: the single-GPU tests (tests/model/test_gpu.py), then the GPU benchmark (benchmarks/gpu/run.py),
# results written to RESULTS_DIR. Needs no package registry: it runs with the Python that has CUDA torch ($PYTHON if
# set, else .venv/bin/python or python3, whichever has a CUDA build), installs what that Python lacks from a wheel
# folder (--wheels DIR; fill it beforehand where a registry is reachable: bash scripts/test_gpu.sh --fill_wheels DIR),
# and puts this checkout on the path when the package is not installed. Without a CUDA GPU it says so in one line.
#   bash scripts/test_gpu.sh RESULTS_DIR [--wheels DIR] [--no_benchmark] [--benchmark_budget SECONDS]
#       [--loop_budget SECONDS] [--loop_cells CELL ...] [-- PYTEST_ARGS]
# What it does is in scripts/gpu_check.py (its --help).
set -euo pipefail
cd "$(dirname "$0")/.."

has_torch() { "$1" -c "import torch" >/dev/null 2>&1; }
has_cuda_torch() { "$1" -c "import sys, torch; sys.exit(0 if torch.version.cuda else 1)" >/dev/null 2>&1; }

python="${PYTHON:-}"
if [ -z "$python" ]; then
  candidates=()
  for candidate in .venv/bin/python python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 && has_torch "$candidate"; then
      candidates+=("$candidate")
    fi
  done
  for candidate in "${candidates[@]}"; do  # a CUDA build first; else the first with torch (it says: no GPU)
    if has_cuda_torch "$candidate"; then python="$candidate" && break; fi
  done
  python="${python:-${candidates[0]:-}}"
fi
if [ -z "$python" ] || ! has_torch "$python"; then
  echo "test_gpu.sh: error: no Python with torch found (tried ${PYTHON:-.venv/bin/python, python3, python}):" \
    "install a CUDA build of torch, or name its Python: PYTHON=/path/to/python bash scripts/test_gpu.sh ..." >&2
  exit 2
fi
exec "$python" scripts/gpu_check.py "$@"
