"""The configuration of `sinusoidal-encoder-pretrain` (`PretrainingConfig`), its size presets and its
sequence-length schedule."""

from __future__ import annotations

import dataclasses

from sinusoidal_encoder_training.cli.arguments import CommandEntry, check_model_source
from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs.data import DataConfig, LanguageConfig, MaskingConfig
from sinusoidal_encoder_training.configs.output import TrainingConfig
from sinusoidal_encoder_training.resources import SHIPPED_TOKENIZER
from sinusoidal_encoder_training.tasks.registry import TASKS

# Size presets for --config_name. "base" has BERT-base's dimensions (~110M parameters with a 30k vocabulary).
MODEL_SIZES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256),
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainingConfig(DataConfig, LanguageConfig, MaskingConfig, TrainingConfig):
    """Pretrain a sinusoidal Transformer encoder by masked language modelling, with accelerate, on a `datasets` corpus.

        accelerate launch training/pretrain.py --output_dir outputs/small                     # built-in corpus, CPU ok
        accelerate launch --mixed_precision bf16 --num_processes 8 training/pretrain.py \\
            --dataset_name wikitext --dataset_config_name wikitext-103-raw-v1 --config_name base --output_dir out

    With no data flag it trains on the built-in offline corpus (`sinusoidal_encoder_training.data.corpus`) with the
    shipped tokenizer (tokenizer_config/). The output folder ends Hub-ready: weights (safetensors), config with
    auto_map, the model code, tokenizer, README.md (the model card) and metrics.jsonl. Resumable states go to
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
        metadata={
            "help": "Tokenizer folder or Hub id (default: that of --model_name_or_path, else the shipped "
            "tokenizer_config/).",
            "reads": True,
        },
    )
    max_seq_length: int = dataclasses.field(default=128, metadata={"help": "Tokens per packed training block."})
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
        for flag in ("eval_steps", "checkpointing_steps"):
            if self.streaming and getattr(self, flag) == "epoch":
                raise UsageError(f"--{flag} epoch needs epochs, and a stream (--streaming) has none: give a number.")
        if self.model_name_or_path and self.config_overrides:
            raise UsageError("--config_overrides applies to new models, not to --model_name_or_path.")
        if self.max_seq_length < 8:
            raise UsageError(f"--max_seq_length must be at least 8, got {self.max_seq_length}.")
        parse_length_schedule(self.seq_length_schedule, self.max_seq_length)
        self.check_best_metric(TASKS["fill-mask"])
        check_model_source("--config_name", self.config_name, tuple(MODEL_SIZES))
        check_model_source("--model_name_or_path", self.model_name_or_path)
        check_model_source("--tokenizer_name", self.tokenizer_name)

    def read_paths(self) -> dict[str, str]:
        """What `OutputConfig.read_paths` says, and the shipped tokenizer, read when neither --tokenizer_name nor
        --model_name_or_path names one (`--output_dir . --overwrite_output_dir` in a checkout would delete it)."""
        reads = super().read_paths()
        if self.tokenizer_name is None and self.model_name_or_path is None:
            reads[f"the shipped tokenizer {SHIPPED_TOKENIZER}"] = SHIPPED_TOKENIZER
        return reads

    @property
    def tokenizer_source(self) -> tuple[str, str]:
        """(the flag or words that name it, where it is) of the run's tokenizer: --tokenizer_name; else, continuing
        a model, the model's own (a model trained with another tokenizer of the same size would read the shipped
        one's ids as its own tokens); else the shipped one."""
        if self.tokenizer_name:
            return "--tokenizer_name", self.tokenizer_name
        if self.model_name_or_path:
            return "--model_name_or_path", self.model_name_or_path
        return "the shipped tokenizer", SHIPPED_TOKENIZER

    @property
    def length_schedule(self) -> tuple[tuple[int, int], ...]:
        """`--seq_length_schedule` parsed: ((length, until step), ...), empty without a warmup."""
        return parse_length_schedule(self.seq_length_schedule, self.max_seq_length)


COMMAND = CommandEntry(
    "pretrain",
    "stages.pretraining",
    PretrainingConfig,
    "pretrain a model by masked language modelling",
    ("training",),
    launched=True,
)


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
