#!/usr/bin/env bash
# Set everything up, then lint and run the test suite (offline) on two workers. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_test_environments.sh  # .venv-tf4 (transformers 4.x) and .venv-serving (Infinity, Optimum)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# two workers (pytest-xdist) share the cores, one thread each; `-n 0` after this script runs in one process
.venv/bin/python -m pytest -n "${TEST_WORKERS:-2}" "$@"
