#!/usr/bin/env bash
# Set everything up, pretrain the "small" sinusoidal encoder on the built-in offline corpus with the shipped
# tokenizer (a few minutes on 2 CPU cores), then load the result with AutoModelForMaskedLM and print fill-mask
# predictions. Ends in outputs/small-builtin, a Hub-ready folder. Killed or interrupted, the same command resumes
# from the newest checkpoint. Extra arguments go to training/pretrain.py (they override the defaults below).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/python training/pretrain.py \
  --config_name small \
  --max_seq_length 128 \
  --per_device_train_batch_size 32 \
  --learning_rate 5e-4 \
  --max_train_steps 300 \
  --num_warmup_steps 30 \
  --eval_steps 100 \
  --checkpointing_steps 50 \
  --checkpoints_total_limit 2 \
  --logging_steps 20 \
  --output_dir outputs/small-builtin \
  --resume_from_checkpoint latest \
  "$@"
.venv/bin/python training/fill_mask.py outputs/small-builtin
