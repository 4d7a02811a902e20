#!/usr/bin/env bash
# Set up .venv-serving: torch and the serving engines that install from the package registry, Infinity
# (`infinity-emb`, its torch engine and server) and Optimum's ONNX Runtime classes (`optimum-onnx`), without this
# package: both pin transformers 4.x, so they get the latest 4.57 release, and load the package's folders with
# `trust_remote_code`. Used by tests/test_serving.py and by the blocks of docs/serving.md marked
# `<!-- runs in: .venv-serving -->`. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
INFINITY_VERSION="${INFINITY_VERSION:-0.0.78}"
OPTIMUM_ONNX_VERSION="${OPTIMUM_ONNX_VERSION:-0.1.0}"
TRANSFORMERS4_VERSION="${TRANSFORMERS4_VERSION:-4.57.6}"
if [ ! -x .venv-serving/bin/python ]; then
  "$PYTHON" -m venv .venv-serving
fi
# torch first, pinned, as in setup.sh: never a multi-GB CUDA build pulled in by a bare requirement
if ! .venv-serving/bin/python -c "import torch" 2>/dev/null; then
  .venv-serving/bin/python -m pip install --quiet "torch==${TORCH_VERSION:-2.13.0}"
fi
if ! .venv-serving/bin/python - "$INFINITY_VERSION" "$OPTIMUM_ONNX_VERSION" "$TRANSFORMERS4_VERSION" <<'CHECK' 2>/dev/null
import sys
from importlib.metadata import version
wanted = dict(zip(["infinity-emb", "optimum-onnx", "transformers"], sys.argv[1:]))
sys.exit(any(version(name) != pinned for name, pinned in wanted.items()))
CHECK
then
  .venv-serving/bin/python -m pip install --quiet "infinity-emb[server,torch]==${INFINITY_VERSION}" \
    "optimum-onnx[onnxruntime]==${OPTIMUM_ONNX_VERSION}" "transformers==${TRANSFORMERS4_VERSION}"
fi
