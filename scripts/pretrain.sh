#!/usr/bin/env bash
# Set everything up, pretrain the "small" sinusoidal encoder on the built-in offline corpus with the shipped
# tokenizer (on 2 CPU cores, setup included: about 9 minutes with bf16 arithmetic, about 29 in float32 without it),
# then load the result with AutoModelForMaskedLM and print fill-mask predictions. Ends in outputs/small-builtin, a
# Hub-ready folder. Killed or interrupted, the same command resumes from the newest checkpoint. Extra arguments go to
# training/pretrain.py (they override the defaults below; the predictions are those of the folder --output_dir names).
#
# The recipe (docs/experiments.md, "Does the model use word order?"): pre-LN, no dropout, learning rate 2e-3, and a
# sequence-length warmup (rows of 16, 32, then 64 tokens for 150 steps each, then whole 128-token blocks), with which
# attention learns to use position within the budget; bf16 autocast where the CPU (or GPU) has bf16 arithmetic. The
# positions: the paper's PE of the offset between tokens, weighted per head into a bias on the attention scores
# (`position_encoding=sinusoidal_relative`), the way of using the paper's encoding that met every target of the
# length study (benchmarks/length_generalization/paper_encoding/README.md, 2026-11-28).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/flags.sh
output_dir=$(flag_value --output_dir outputs/small-builtin "$@")
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
precision=$(.venv/bin/python -c "from sinusoidal_encoder_training.runs.accelerator import bf16_is_fast; print('bf16' if bf16_is_fast() else 'no')")
.venv/bin/python training/pretrain.py \
  --config_name small \
  --config_overrides norm_first=true,hidden_dropout_prob=0,attention_probs_dropout_prob=0,position_encoding=sinusoidal_relative \
  --max_seq_length 128 \
  --seq_length_schedule 16:150,32:300,64:450 \
  --per_device_train_batch_size 32 \
  --learning_rate 2e-3 \
  --num_warmup_steps 100 \
  --max_train_steps 1000 \
  --mixed_precision "$precision" \
  --eval_steps 250 \
  --checkpointing_steps 50 \
  --checkpoints_total_limit 2 \
  --logging_steps 20 \
  --output_dir outputs/small-builtin \
  --resume_from_checkpoint latest \
  "$@"
if asks_for_help "$@"; then
  exit 0
fi
.venv/bin/python training/fill_mask.py "$output_dir"
