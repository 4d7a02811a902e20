"""The console scripts of pyproject.toml's [project.scripts] (`sinusoidal-encoder-pretrain`, ...) and of the
`training/*.py` wrappers of a checkout, each a `command_line.Command`: it parses its flags with its run
configuration (`configs`, which imports no heavy library, so that `--help` and a bad flag answer at once), then
imports its stage's module and runs it; a module of an extra that is not installed ends in one line naming the
extra. Which extra each command needs (README, "Install"): pretrain, finetune and train-tokenizer the `training`
extra, export-onnx the `onnx` one, distill the `integrations` and `training` ones; fill-mask and publish work with
the base install."""

from __future__ import annotations

from sinusoidal_encoder_training import configs
from sinusoidal_encoder_training.command_line import Command

pretrain = Command("pretraining", configs.PretrainingConfig)
finetune = Command("finetuning", configs.FinetuningConfig)
train_tokenizer = Command("tokenizer_training", configs.TokenizerTrainingConfig)
fill_mask = Command("fill_mask", configs.FillMaskConfig)
export_onnx = Command("onnx_export", configs.OnnxExportConfig)
distill = Command("distillation", configs.DistillationConfig)
publish = Command("hub")  # parses its own flags: `hub.main`
