#!/usr/bin/env bash
# The tests that need CUDA (tests/test_gpu.py): flash attention (varlen) against sdpa, bf16 training and save/load,
# accelerate launch with the single-GPU, multi-GPU and FSDP configurations, FSDP checkpoint + resume.
# On a machine with a GPU, install the CUDA build of torch you want into .venv first (setup.sh keeps it), and
# flash-attn for the flash attention test. Without a GPU it says so and exits 0. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if ! .venv/bin/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "No CUDA GPU visible to torch ($(.venv/bin/python -c 'import torch; print(torch.__version__)')):" \
    "skipping tests/test_gpu.py. Run this on a machine with a GPU and a CUDA build of torch."
  exit 0
fi
.venv/bin/python -c "import torch; print('GPUs:', [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])"
.venv/bin/python -m pytest tests/test_gpu.py -m gpu -v -rs "$@"
