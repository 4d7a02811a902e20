"""The table of the package's commands, one entry each. Everything a command is besides its stage module follows
from its entry: its console script `sinusoidal-encoder-NAME` (setup.py declares one per entry),
`python -m sinusoidal_encoder_training NAME` (and `accelerate launch -m sinusoidal_encoder_training NAME`), the
callable that both run (`console.NAME`, with `-` as `_`), the list `python -m sinusoidal_encoder_training` prints,
and the packaging tests. A new command is its stage module (a configuration class in `configs` and `run(config)`)
and one line here.

This module imports nothing, so that setup.py can read it without the package's dependencies.
"""

from __future__ import annotations

from typing import NamedTuple


class CommandEntry(NamedTuple):
    """A command: the module of `sinusoidal_encoder_training` that does its work (its `run(config)`, or `main(argv)`
    for a command that parses its own flags), the name of its configuration class in `configs` (None: it parses its
    own), what it does in a few words, and the extras of pyproject.toml it needs beyond the base install (a run
    without the first one ends in one line naming it)."""

    module: str
    config: str | None
    summary: str
    extras: tuple[str, ...] = ()


COMMANDS = {
    "pretrain": CommandEntry(
        "stages.pretraining", "PretrainingConfig", "pretrain a model by masked language modelling", ("training",)
    ),
    "finetune": CommandEntry("stages.finetuning", "FinetuningConfig", "fine-tune a model on a task", ("training",)),
    "evaluate": CommandEntry(
        "stages.evaluate",
        "EvaluationConfig",
        "score a pretrained model on a dataset, at several lengths",
        ("training",),
    ),
    "train-tokenizer": CommandEntry(
        "stages.tokenizer_training", "TokenizerTrainingConfig", "train a byte-level BPE tokenizer", ("training",)
    ),
    "fill-mask": CommandEntry("stages.fill_mask", "FillMaskConfig", "show a masked-LM model's predictions"),
    "export-onnx": CommandEntry(
        "publishing.onnx_export", "OnnxExportConfig", "export a model folder to ONNX", ("onnx",)
    ),
    "distill": CommandEntry(
        "stages.distillation", "DistillationConfig", "distil a sentence-embedding model", ("integrations", "training")
    ),
    "publish": CommandEntry("publishing.hub", None, "upload a model folder to the Hugging Face Hub"),
}
SCRIPT_PREFIX = "sinusoidal-encoder-"


def console_scripts() -> list[str]:
    """The console scripts of the table, as setup.py's `entry_points` declares them."""
    return [
        f"{SCRIPT_PREFIX}{name} = sinusoidal_encoder_training.cli.console:{name.replace('-', '_')}"
        for name in COMMANDS
    ]
