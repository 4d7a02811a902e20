#!/usr/bin/env bash
# Set everything up, then run the main job. Extra arguments go to the job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/python training/quickstart.py "$@"
