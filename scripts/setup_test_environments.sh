#!/usr/bin/env bash
# Set up the tests' side environments, each torch (pinned, installed first) and a set of pinned packages, without
# this package; the tests load folders the package saved there, with `trust_remote_code`:
#   .venv-tf4       transformers 4.x (the latest 4.57 release): tests/model/test_transformers4.py
#   .venv-serving   Infinity (its server and torch engine) and Optimum's ONNX Runtime classes, which both pin
#                   transformers 4.x: tests/model/test_serving.py and the blocks of docs/serving.md marked
#                   `<!-- runs in: .venv-serving -->`
# Safe to run again: an environment that holds its pins already (its requirements.txt says so) is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TORCH="torch==${TORCH_VERSION:-2.13.0}"
TRANSFORMERS4="transformers==${TRANSFORMERS4_VERSION:-4.57.6}"

side_environment() {  # FOLDER REQUIREMENT...
  local folder="$1"
  shift
  local wanted="$TORCH $*"
  if [ "$(cat "$folder/requirements.txt" 2>/dev/null)" = "$wanted" ] && "$folder/bin/python" -c "import torch" 2>/dev/null; then
    return
  fi
  [ -x "$folder/bin/python" ] || "$PYTHON" -m venv "$folder"
  # torch first, pinned, as in setup.sh: never a multi-GB CUDA build pulled in by a bare requirement
  "$folder/bin/python" -m pip install --quiet "$TORCH"
  "$folder/bin/python" -m pip install --quiet "$@"
  echo "$wanted" > "$folder/requirements.txt"
}

side_environment .venv-tf4 "$TRANSFORMERS4"
side_environment .venv-serving "infinity-emb[server,torch]==${INFINITY_VERSION:-0.0.78}" \
  "optimum-onnx[onnxruntime]==${OPTIMUM_ONNX_VERSION:-0.1.0}" "$TRANSFORMERS4"
