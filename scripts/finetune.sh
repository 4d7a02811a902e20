#!/usr/bin/env bash
# After scripts/pretrain.sh: fine-tune its model on the offline downstream task (which library a passage of the
# built-in corpus documents), evaluate it against a majority-class and a TF-IDF + logistic-regression baseline in
# the same run, and show label predictions. Ends in outputs/library-classifier. Extra arguments go to finetune.py
# (they override the defaults below; the predictions are those of the folder --output_dir names).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/flags.sh
output_dir=$(flag_value --output_dir outputs/library-classifier "$@")
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/python training/finetune.py \
  --model_name_or_path outputs/small-builtin \
  --output_dir outputs/library-classifier \
  --num_train_epochs 1 \
  --max_length 128 \
  --learning_rate 1e-4 \
  --per_device_train_batch_size 32 \
  --eval_steps 200 \
  --checkpointing_steps 200 \
  --checkpoints_total_limit 1 \
  --logging_steps 20 \
  --resume_from_checkpoint latest \
  "$@"
if asks_for_help "$@"; then
  exit 0
fi
.venv/bin/python - "$output_dir" <<'PY'
import sys

import sinusoidal_encoder  # noqa: F401  (registers the model with the Auto classes)
from transformers import pipeline

classify = pipeline("text-classification", model=sys.argv[1])
for text in [
    "Return a new array of given shape and type, filled with zeros.",
    "Load a pretrained model from a local folder or a repository on the Hub.",
    "Open the file and return a corresponding file object.",
]:
    print(f"{classify(text)[0]['label']:>16}  <- {text}")
PY
