"""The console scripts of pyproject.toml's [project.scripts] (`sinusoidal-encoder-pretrain`, ...) and of the
`training/*.py` wrappers of a checkout: each imports its stage's module and runs its command line (`cli`) with
`run_stage`, which ends with one line naming the extra to install when that import needs one that is missing.
Which extra each command needs (README, "Install"): pretrain, finetune and train-tokenizer
the `training` extra, export-onnx the `onnx` one; fill-mask and publish work with the base install."""

from __future__ import annotations

from sinusoidal_encoder_training.command_line import run_stage


def pretrain() -> None:
    """`sinusoidal-encoder-pretrain`: `sinusoidal_encoder_training.pretraining`."""
    run_stage("pretraining")


def finetune() -> None:
    """`sinusoidal-encoder-finetune`: `sinusoidal_encoder_training.finetuning`."""
    run_stage("finetuning")


def train_tokenizer() -> None:
    """`sinusoidal-encoder-train-tokenizer`: `sinusoidal_encoder_training.tokenizer_training`."""
    run_stage("tokenizer_training")


def fill_mask() -> None:
    """`sinusoidal-encoder-fill-mask`: `sinusoidal_encoder_training.fill_mask`."""
    run_stage("fill_mask")


def export_onnx() -> None:
    """`sinusoidal-encoder-export-onnx`: `sinusoidal_encoder_training.onnx_export`."""
    run_stage("onnx_export")


def publish() -> None:
    """`sinusoidal-encoder-publish`: `sinusoidal_encoder_training.hub`."""
    run_stage("hub")
