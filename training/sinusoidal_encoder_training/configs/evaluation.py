"""The configuration of `sinusoidal-encoder-evaluate` (`EvaluationConfig`)."""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar

from sinusoidal_encoder_training.cli.arguments import (
    Cleared,
    CommandEntry,
    check_model_source,
    check_positive,
    check_seeds,
)
from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs.data import DataConfig, MaskingConfig
from sinusoidal_encoder_training.configs.finetuning import TaskDataConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluationConfig(DataConfig, MaskingConfig, TaskDataConfig):
    """Score a model folder (or Hub id) on a dataset, as its training evaluated it. A pretrained folder (a masked-LM
    head): the masked-token-weighted loss and perplexity, the unigram baseline (each masked token scored by its
    frequency in the training split) and the order gap (the loss with each block's tokens shuffled, minus the loss),
    with the standard errors of the gap and of the margin below the baseline, at each length of --max_seq_length,
    each length followed by a sentence that reads them. A fine-tuned folder: its task's metrics on the validation
    split, as fine-tuning's final evaluation computes them (with the task-data flags of fine-tuning for your
    columns).

        sinusoidal-encoder-evaluate outputs/small-builtin                       # the built-in corpus, 128 tokens
        sinusoidal-encoder-evaluate outputs/small-builtin --max_seq_length 128 512 1024 --output_file lengths.json
        sinusoidal-encoder-evaluate outputs/library-classifier                  # the built-in downstream task
        accelerate launch -m sinusoidal_encoder_training evaluate MODEL --dataset_name wikitext \\
            --dataset_config_name wikitext-103-raw-v1

    A masked-LM folder's validation split is packed into blocks of each length and masked by the keys pretraining
    uses (seed, block): with pretraining's --seed, --mlm_probability and data, the figures at the training length
    are those of the run's final evaluation. A fine-tuned folder's head must have been trained for the data's labels
    (the same names, in any order); `--validation_file` alone scores it on the whole file (a test set), where
    `--train_file` alone scores the share of it held out for validation, as a fine-tuning run on it would. The
    command says how many examples it scored, and of what.
    """

    _argument_group_name = "model and evaluation"
    validation_file_alone: ClassVar[bool] = True  # a fine-tuned folder scored on a file of its own

    model: str = dataclasses.field(
        metadata={
            "help": "A model folder or Hub id: a pretraining run's (a masked-LM head) or a fine-tuning run's.",
            "positional": True,
            "reads": True,
        }
    )
    tokenizer_name: str | None = dataclasses.field(
        default=None, metadata={"help": "Tokenizer folder or Hub id (default: the model's own).", "reads": True}
    )
    max_seq_length: list[int] | None = dataclasses.field(
        default=None,
        metadata={
            "help": "A masked-LM folder: tokens per evaluated block; several lengths give a result each (default: "
            "128)."
        },
    )
    seed: int = dataclasses.field(
        default=42,
        metadata={
            "help": "Seed of the masks, of the order gap's shuffles and of the validation split drawn from data "
            "without one (pretraining's --seed gives its own evaluation's)."
        },
    )
    per_device_eval_batch_size: int = dataclasses.field(
        default=64, metadata={"help": "Blocks per process and forward pass."}
    )
    max_eval_samples: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Evaluate the first N blocks of each length only (a fine-tuned folder: N examples drawn at "
            "random, seeded by --seed)."
        },
    )
    output_file: str | None = dataclasses.field(
        # "file": refused inside a dataset folder the run reads, not inside its model folder (`MODEL/results.json`)
        default=None,
        metadata={"help": "Also write the results to this JSON file, by length.", "writes": "file"},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_model_source("MODEL", self.model)
        check_model_source("--tokenizer_name", self.tokenizer_name)
        check_positive(self, "per_device_eval_batch_size", "max_eval_samples")
        check_seeds(self, "seed")
        for length in self.lengths:
            if length < 8:
                raise UsageError(f"--max_seq_length must be at least 8, got {length}.")
        if len(set(self.lengths)) != len(self.lengths):
            raise UsageError(f"--max_seq_length names a length twice: {self.max_seq_length}.")
        if self.output_file is not None:
            if os.path.isdir(self.output_file):
                raise UsageError(f"--output_file {self.output_file!r} is a folder: name a file, e.g. results.json.")
            parent = os.path.dirname(os.path.abspath(self.output_file))
            if not os.path.isdir(parent):
                raise UsageError(f"--output_file {self.output_file!r}: the folder {parent!r} does not exist.")

    def read_paths(self) -> dict[str, str]:
        """What `FlagConfig.read_paths` says, and each file of the model folder (`--output_file MODEL/config.json`
        would replace the model's config)."""
        reads = super().read_paths()
        if os.path.isdir(self.model):
            for name in sorted(os.listdir(self.model)):
                reads[f"MODEL's {name}"] = os.path.join(self.model, name)
        return reads

    @property
    def lengths(self) -> list[int]:
        """The lengths a masked-LM folder is evaluated at: --max_seq_length, 128 by default."""
        return self.max_seq_length or [128]

    def cleared_paths(self) -> list[Cleared]:
        """The results file, which the run replaces."""
        if self.output_file is None:
            return []
        return [Cleared("the results would replace", self.output_file, "--output_file")]


COMMAND = CommandEntry(
    "evaluate",
    "stages.evaluate",
    EvaluationConfig,
    "score a model folder on a dataset: a pretrained one at several lengths, a fine-tuned one by its task",
    ("training",),
    launched=True,
)
