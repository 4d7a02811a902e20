#!/usr/bin/env bash
# Set up .venv with the package (editable) and its training and development extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, pinned: with no torch installed, an unpinned requirement would pull a multi-GB CUDA build.
# (On a machine with a GPU, install the torch build you want before running this; it is kept.)
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "torch==${TORCH_VERSION:-2.13.0}"
fi
.venv/bin/python -m pip install --quiet -e ".[dev]"
