"""The corpus of a run (`DataConfig`): the Hub, local files (checked before any work by `data.files`), a stream,
or the built-in corpus; its language, for the model card of a command that writes one (`LanguageConfig`); and how
masked-LM batches are masked, for the commands that mask (`MaskingConfig`)."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import ClassVar, Literal

from sinusoidal_encoder_training.cli.arguments import FlagConfig, check_model_source, check_positive
from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.data.files import LOCAL_FORMATS, _extension, check_data_file, check_datasets_cache


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig(FlagConfig):
    """The corpus of a run (with no data setting: the built-in offline corpus), checked when built: the files it
    names must exist, be readable and of a known format."""

    _argument_group_name = "data (with no data flag: the built-in offline corpus)"
    # whether --validation_file may come alone: a command that only scores the data, and reads no training split
    validation_file_alone: ClassVar[bool] = False

    dataset_name: str | None = dataclasses.field(
        # "data": a local folder of data files, every one under it read (`arguments.check_reads_kept`)
        default=None,
        metadata={"help": "A dataset on the Hugging Face Hub, e.g. 'wikitext'.", "reads": "data"},
    )
    dataset_config_name: str | None = dataclasses.field(
        default=None, metadata={"help": "The configuration of --dataset_name, e.g. 'wikitext-103-raw-v1'."}
    )
    train_file: str | None = dataclasses.field(
        default=None,
        metadata={"help": "A local training file: .txt, .json/.jsonl, .csv or .parquet.", "reads": True},
    )
    validation_file: str | None = dataclasses.field(
        default=None, metadata={"help": "A local validation file, same formats as --train_file.", "reads": True}
    )
    validation_split_name: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The split of --dataset_name to validate on (default: 'validation'; without one, a share of the "
            "training split is held out, and a 'test' split is not read): e.g. 'test' for a dataset of train and "
            "test only."
        },
    )
    validation_split_percentage: int = dataclasses.field(
        default=5,
        metadata={
            "help": "Percent of the training split held out for validation when the data has no validation split."
        },
    )
    text_column_name: str | None = dataclasses.field(
        default=None, metadata={"help": "The column holding the text (default: 'text', else the first one)."}
    )
    streaming: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Stream the dataset instead of downloading and preparing it: for corpora larger than memory or "
            "disk."
        },
    )
    streaming_validation_examples: int = dataclasses.field(
        default=1000,
        metadata={
            "help": "With --streaming and no validation split: how many leading documents are held out for validation."
        },
    )
    preprocessing_num_workers: int | None = dataclasses.field(
        default=None, metadata={"help": "Processes for tokenisation (Dataset.map)."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset_name and (self.train_file or self.validation_file):
            raise UsageError("Pass either --dataset_name or --train_file/--validation_file, not both.")
        if self.validation_file and not self.train_file and not self.validation_file_alone:
            raise UsageError("--validation_file needs --train_file.")
        if self.validation_split_name is not None and not self.dataset_name:
            raise UsageError(
                "--validation_split_name names a split of --dataset_name; local files give theirs with "
                "--validation_file."
            )
        check_model_source("--dataset_name", self.dataset_name, repo_type="dataset")
        check_positive(self, "streaming_validation_examples")  # a stream's held-out documents: skip/take take any
        for flag in ("train_file", "validation_file"):
            path = getattr(self, flag)
            if path is None:
                continue
            if not os.path.isfile(path):
                raise UsageError(f"--{flag} {path!r} does not exist or is not a file.")
            if not os.access(path, os.R_OK):
                raise UsageError(f"--{flag} {path!r} is not readable.")
            if _extension(path) not in LOCAL_FORMATS:
                raise UsageError(f"--{flag} {path!r}: the extension must be one of {sorted(LOCAL_FORMATS)}.")
        if (
            self.train_file
            and self.validation_file
            and _extension(self.train_file) != _extension(self.validation_file)
        ):
            raise UsageError("--train_file and --validation_file must have the same format.")
        if not 0 < self.validation_split_percentage < 100:
            raise UsageError(
                f"--validation_split_percentage must be in (0, 100), got {self.validation_split_percentage}."
            )
        if self.train_file:  # what datasets would stop on (or, for mixed kinds, silently accept), said before work
            split = None if self.validation_file else self.validation_split_percentage
            columns = check_data_file("--train_file", self.train_file, split_percentage=split)
            other = check_data_file("--validation_file", self.validation_file) if self.validation_file else None
            if columns is not None and other is not None and other != columns:
                raise UsageError(
                    f"--validation_file {self.validation_file!r} has the columns {other}, --train_file "
                    f"{self.train_file!r} has {columns}: give both files the same columns."
                )
        elif self.validation_file:  # alone (`validation_file_alone`)
            check_data_file("--validation_file", self.validation_file)
        if self.streaming and not (self.dataset_name or self.train_file):
            raise UsageError("--streaming needs --dataset_name or --train_file (the built-in corpus is small).")
        check_datasets_cache()


@dataclasses.dataclass(frozen=True, kw_only=True)
class LanguageConfig(FlagConfig):
    """The language of the data, for the model card of a command that writes one."""

    language: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The language(s) of the data as ISO 639-1 codes, comma-separated (e.g. 'en' or 'de,fr'), for the "
            "model card's `language:` (default: 'en' for the built-in data; none for other data)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for code in (self.language or "").split(","):
            if self.language is not None and not re.fullmatch(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})*", code.strip()):
                raise UsageError(
                    f"--language {self.language!r}: {code.strip()!r} is not a language code such as 'en' or 'pt-BR'."
                )


@dataclasses.dataclass(frozen=True, kw_only=True)
class MaskingConfig(FlagConfig):
    """How masked-LM batches are masked: the same for pretraining and for scoring a pretrained folder."""

    mlm_probability: float = dataclasses.field(
        default=0.15, metadata={"help": "Share of tokens masked for prediction."}
    )
    mask_count: Literal["sampled", "exact"] | None = dataclasses.field(
        default=None,
        metadata={
            "help": "How many tokens of a row are masked: 'sampled' (each token that is not special with probability "
            "--mlm_probability, as DataCollatorForLanguageModeling) or 'exact' (round(mlm_probability x row length) "
            "per row, as BERT's original data: every batch of a shape has one number of masked tokens). Default: "
            "exact where pretraining replays CUDA graphs (--torch_compile_mode reduce-overhead or max-autotune), "
            "else sampled."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.mlm_probability < 1.0:
            raise UsageError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability}.")
