"""Run configurations and the command lines made from them: each setting is a field of a frozen dataclass, with its
default and help text (`field(default=..., metadata={"help": ...})`), checked in `__post_init__`; transformers'
`HfArgumentParser` turns the fields into flags (`parse_config`). Here: the settings shared by pretraining and
fine-tuning (optimisation, compilation, output, evaluation, checkpoints, tracking, Hub)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import typing
from typing import Any, Literal, TypeVar

from transformers import HfArgumentParser, PretrainedConfig
from transformers.hf_argparser import string_to_bool

from .checkpoints import checkpoint_damage
from .command_line import UsageError
from .hub import check_hub_model_id

ConfigT = TypeVar("ConfigT", bound="FlagConfig")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlagConfig:
    """A run configuration: one field per setting (the command line has a flag of the same name), each with its
    default and help. Frozen: a variant is made with `dataclasses.replace`, which checks it again. Values derived
    from the settings are properties. A class's `_argument_group_name` titles the `--help` section of the fields it
    declares."""

    def __post_init__(self) -> None:
        """Subclasses check their fields here, raising `ValueError`s that name the flag."""


def check_positive(config: FlagConfig, *names: str) -> None:
    """A `ValueError` naming the first flag of `names` that is set to zero or less (None: unset, allowed)."""
    for name in names:
        value = getattr(config, name)
        if value is not None and value <= 0:
            raise UsageError(f"--{name} must be a positive integer, got {value}.")


def check_model_source(name: str, value: str | None, presets: tuple[str, ...] = ()) -> None:
    """A `UsageError` naming `name` (the flag, as `--model_name_or_path`) when `value`, a folder, a file or a Hub
    id ('owner/name'), cannot be one. A path that looks local (absolute, './', '~', a trailing slash, more than one
    '/', or whose first part is a folder here, as in 'outputs/my-model') and does not exist is a missing folder, not
    a Hub id. Anything else is resolved as a Hub id before any work (`hub_source_problem`); the line that refuses
    it names the presets, where there are, and the nearest local folder."""
    if value is None or value in presets or os.path.exists(os.path.expanduser(value)):
        return
    parts = value.split("/")
    local = (
        value.startswith(("/", ".", "~"))
        or value.endswith("/")
        or len(parts) > 2
        or os.sep in value.replace("/", "")
        or (len(parts) == 2 and os.path.isdir(parts[0]))
    )
    if local:
        raise UsageError(f"{name} {value!r}: no such file or folder.")
    problem = hub_source_problem(value)
    if problem is not None:
        choices = f"a preset ({', '.join(presets)}), " if presets else ""
        raise UsageError(f"{name} {value!r} is not {choices}a local folder or file, {problem}{nearest_folder(value)}")


def hub_source_problem(repo_id: str, repo_type: str = "model") -> str | None:
    """Why `repo_id` cannot be loaded from the Hub, or None: not a valid id; offline (HF_HUB_OFFLINE) and not in
    the local cache; online, a repository the Hub does not have (or this user cannot see), or a Hub that cannot be
    reached."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return "nor a Hub id ('owner/name' of letters, digits, '-', '_' and '.')."
    cached = os.path.join(constants.HF_HUB_CACHE, f"{repo_type}s--{repo_id.replace('/', '--')}", "snapshots")
    if os.path.isdir(cached) and os.listdir(cached):
        return None
    if constants.HF_HUB_OFFLINE:
        return (
            f"and the Hub is off (HF_HUB_OFFLINE=1) with no copy of {repo_id} in the cache "
            f"({constants.HF_HUB_CACHE}): give a local folder, or load it once with the Hub on."
        )
    try:
        exists = HfApi().repo_exists(repo_id, repo_type=repo_type)
    except Exception as error:  # no network, a proxy, a Hub outage: requests' and huggingface_hub's errors alike
        return (
            f"and the Hub cannot be reached to look for {repo_id} ({type(error).__name__}): check the network, or "
            "give a local folder."
        )
    if not exists:
        return (
            f"and the Hub has no {repo_type} {repo_id} (a private or gated one needs `hf auth login` first): check "
            "the name."
        )
    return None


def nearest_folder(value: str) -> str:
    """' Did you mean ...?' naming the local folder whose name is closest to `value`'s last part, or ''."""
    import difflib

    parent = os.path.dirname(os.path.expanduser(value)) or "."
    try:
        folders = [entry.name for entry in os.scandir(parent) if entry.is_dir() and not entry.name.startswith(".")]
    except OSError:
        return ""
    close = difflib.get_close_matches(os.path.basename(value.rstrip("/")), folders, n=1, cutoff=0.6)
    return f" Did you mean {os.path.join(parent, close[0]) if parent != '.' else close[0]!r}?" if close else ""


def apply_overrides(config: PretrainedConfig, overrides: str | None) -> None:
    """'a=1,b=x' (the value of `--config_overrides`) onto a model config, each value parsed as the type of the field
    it replaces, then the config's own `check()` where it has one (a sinusoidal-encoder config)."""
    if not overrides:
        return
    for item in overrides.split(","):
        if "=" not in item:
            raise UsageError(f"--config_overrides: {item!r} is not of the form field=value.")
        key, value = (part.strip() for part in item.split("=", 1))
        if not hasattr(config, key):
            raise UsageError(f"--config_overrides: the config has no field {key!r}.")
        old = getattr(config, key)
        if isinstance(old, str):  # text stays text (`position_mode=none` is the mode "none")
            new = value
        elif value.lower() in ("null", "none"):  # unset an optional field; config.check() rejects it elsewhere
            new = None
        elif isinstance(old, bool):
            if value.lower() not in ("true", "false", "1", "0"):
                raise UsageError(f"--config_overrides: {key} must be true or false, got {value!r}.")
            new = value.lower() in ("true", "1")
        elif isinstance(old, (int, float)):
            try:
                new = type(old)(value)
            except ValueError:
                raise UsageError(f"--config_overrides: {key} must be a number, got {value!r}.") from None
        elif old is None:  # an optional field (long_input_attention_window): a number, or the text itself
            try:
                new = json.loads(value)
            except json.JSONDecodeError:
                new = value
        else:
            raise UsageError(f"--config_overrides: the field {key!r} ({type(old).__name__}) cannot be set from text.")
        setattr(config, key, new)
    try:
        if hasattr(config, "check"):
            config.check()
    except ValueError as error:  # the model config's own check, which names the field
        raise UsageError(f"--config_overrides: {error}") from error


def redefault(config_class: type, name: str, default: Any) -> Any:
    """The field `name` of `config_class` with another default and the same help: how a job changes a shared
    default (`learning_rate: float = redefault(TrainingConfig, "learning_rate", 1e-4)`)."""
    return dataclasses.field(default=default, metadata=config_class.__dataclass_fields__[name].metadata)


class _Flag:
    """What `HfArgumentParser` adds one field's flag to: the help section of the class that declares the field, with
    the flag as it has always been spelled: `--name` only (no `--na-me` alias), a boolean as a bare switch
    (`--with_tracking`), the help text taken literally (a `%` needs no escaping). Two more keys of the field's
    metadata: `"positional": True` makes it a positional argument, `"nargs"` replaces HfArgumentParser's "+" of a
    list (`"*"`: an empty list allowed)."""

    def __init__(self, group: argparse._ActionsContainer, metadata: Any):
        self.group = group
        self.metadata = metadata

    def add_argument(self, *names: str, positional: bool = False, **kwargs: Any) -> argparse.Action:
        names = tuple(name for name in names if "-" not in name.lstrip("-"))
        if kwargs.get("type") is string_to_bool and kwargs.get("default") is False:
            kwargs = {k: v for k, v in kwargs.items() if k not in ("type", "nargs", "const")}
            kwargs["action"] = "store_true"
        if "nargs" in self.metadata:
            kwargs["nargs"] = self.metadata["nargs"]
        if "help" in kwargs:
            kwargs["help"] = kwargs["help"].replace("%", "%%")
        if positional:
            kwargs.pop("required", None)
            names = (names[0].lstrip("-"),)
        return self.group.add_argument(*names, **kwargs)


class ConfigParser(HfArgumentParser):
    """`HfArgumentParser` for one run configuration: flags from the fields (types, defaults, `Literal` choices,
    required fields without a default), grouped in `--help` by the class that declares each field (its
    `_argument_group_name`), the description above them kept as written."""

    def __init__(self, config_class: type[FlagConfig], description: str | None = None):
        super().__init__(config_class, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)

    def _add_dataclass_arguments(self, dtype: type) -> None:
        hints = typing.get_type_hints(dtype)
        fields = [field for field in dataclasses.fields(dtype) if field.init]
        owners = {  # the class that first declares each field (a redeclared default keeps its section)
            field.name: next(k for k in reversed(dtype.__mro__) if field.name in vars(k).get("__annotations__", {}))
            for field in fields
        }
        groups = {}  # sections in the order of the class's bases: its own first
        for owner in (k for k in dtype.__mro__ if k in owners.values()):
            title = vars(owner).get("_argument_group_name")
            groups[owner] = self.add_argument_group(title) if title else self
        for field in fields:
            field = copy.copy(field)  # HfArgumentParser rewrites `type`: leave the class's own field alone
            field.type = hints[field.name]
            self._parse_dataclass_field(_Flag(groups[owners[field.name]], field.metadata), field)


def parse_config(
    config_class: type[ConfigT], argv: list[str] | None = None, description: str | None = None
) -> ConfigT:
    """The configuration of a command line (`sys.argv[1:]` by default), checked: a bad value raises the
    `ValueError` of the configuration's `__post_init__`, which names the flag; what argparse itself refuses (an
    unknown flag, a value of the wrong type or outside the choices) stops with the usage, as argparse does."""
    parser = ConfigParser(config_class, description)
    config, unknown = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True, look_for_args_file=False)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return config


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
            "without it such a folder is refused."
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
            "is none) or the path of a checkpoint folder."
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
    dataloader_num_workers: int = dataclasses.field(default=0, metadata={"help": "DataLoader worker processes."})
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
        default=None, metadata={"help": "The torch.compile mode of --torch_compile (default: torch's)."}
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
        if self.learning_rate <= 0:
            raise UsageError(f"--learning_rate must be positive, got {self.learning_rate}.")
        if self.weight_decay < 0 or self.max_grad_norm < 0:
            raise UsageError("--weight_decay and --max_grad_norm must not be negative.")
        if self.num_warmup_steps is not None and self.num_warmup_steps < 0:
            raise UsageError(f"--num_warmup_steps must not be negative, got {self.num_warmup_steps}.")

    def global_batch_size(self, num_processes: int) -> int:
        """Sequences per optimizer step over every process: per device × processes × accumulation steps."""
        return self.per_device_train_batch_size * num_processes * self.gradient_accumulation_steps
