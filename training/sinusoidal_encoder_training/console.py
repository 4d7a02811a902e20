"""The console scripts of pyproject.toml's [project.scripts] (`sinusoidal-encoder-pretrain`, ...) and of the
`training/*.py` wrappers of a checkout. Each parses its flags with its run configuration (`configs`, which imports
no heavy library, so that `--help` and a bad flag answer at once), then imports its stage's module and runs it
(`run_stage`); a module of an extra that is not installed ends in one line naming the extra. Which extra each
command needs (README, "Install"): pretrain, finetune and train-tokenizer the `training` extra, export-onnx the
`onnx` one, distill the `integrations` and `training` ones; fill-mask and publish work with the base install."""

from __future__ import annotations

from sinusoidal_encoder_training import configs
from sinusoidal_encoder_training.command_line import run_stage


def pretrain() -> None:
    """`sinusoidal-encoder-pretrain`: `sinusoidal_encoder_training.pretraining`."""
    run_stage("pretraining", configs.PretrainingConfig)


def finetune() -> None:
    """`sinusoidal-encoder-finetune`: `sinusoidal_encoder_training.finetuning`."""
    run_stage("finetuning", configs.FinetuningConfig)


def train_tokenizer() -> None:
    """`sinusoidal-encoder-train-tokenizer`: `sinusoidal_encoder_training.tokenizer_training`."""
    run_stage("tokenizer_training", configs.TokenizerTrainingConfig)


def fill_mask() -> None:
    """`sinusoidal-encoder-fill-mask`: `sinusoidal_encoder_training.fill_mask`."""
    run_stage("fill_mask", configs.FillMaskConfig)


def export_onnx() -> None:
    """`sinusoidal-encoder-export-onnx`: `sinusoidal_encoder_training.onnx_export`."""
    run_stage("onnx_export", configs.OnnxExportConfig)


def distill() -> None:
    """`sinusoidal-encoder-distill`: `sinusoidal_encoder_training.distillation`."""
    run_stage("distillation", configs.DistillationConfig)


def publish() -> None:
    """`sinusoidal-encoder-publish`: `sinusoidal_encoder_training.hub` (its own flags, parsed by its `main`)."""
    run_stage("hub")
