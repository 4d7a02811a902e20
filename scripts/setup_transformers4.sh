#!/usr/bin/env bash
# Set up .venv-tf4: torch and the latest transformers 4.x release (4.57), without this package, where the tests load
# folders the package saved with `trust_remote_code=True` (tests/test_transformers4.py). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TRANSFORMERS4_VERSION="${TRANSFORMERS4_VERSION:-4.57.6}"
if [ ! -x .venv-tf4/bin/python ]; then
  "$PYTHON" -m venv .venv-tf4
fi
# torch first, pinned, as in setup.sh: never a multi-GB CUDA build pulled in by a bare requirement
if ! .venv-tf4/bin/python -c "import torch" 2>/dev/null; then
  .venv-tf4/bin/python -m pip install --quiet "torch==${TORCH_VERSION:-2.13.0}"
fi
if [ "$(.venv-tf4/bin/python -c 'import transformers; print(transformers.__version__)' 2>/dev/null)" != "$TRANSFORMERS4_VERSION" ]; then
  .venv-tf4/bin/python -m pip install --quiet "transformers==${TRANSFORMERS4_VERSION}"
fi
