"""Where a run writes and what it keeps (`OutputConfig`), and the settings pretraining and fine-tuning share
(`TrainingConfig`): optimisation, precision, compilation, checkpoints, tracking."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Literal

from sinusoidal_encoder_training.cli.arguments import FlagConfig, check_positive, check_seeds
from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs.publishing import check_hub_model_id
from sinusoidal_encoder_training.runs.checkpoints import checkpoint_damage, resolve_checkpoint
from sinusoidal_encoder_training.tasks.task import Task

LR_SCHEDULERS = Literal[
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "cosine_with_min_lr",
    "warmup_stable_decay",
]
COMPILE_MODES = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class OutputConfig(FlagConfig):
    """Where a run writes and what it keeps: the output folder, evaluation, logging, checkpoints, tracking, the
    Hub (the base of `TrainingConfig`)."""

    _argument_group_name = "output, evaluation, checkpoints"

    output_dir: str = dataclasses.field(
        metadata={"help": "Where the final Hub-ready model folder is written.", "writes": True}
    )
    overwrite_output_dir: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Empty --output_dir when it holds other files (another run's, a model's, your own), once the "
            "data and the model are ready (a run stopped by bad data leaves it as it was): without it such a folder "
            "is refused. Refused itself when the folder holds what the run reads.",
            "clears": "output_dir",
        },
    )
    eval_steps: int | Literal["epoch"] | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Evaluate every N optimizer steps, or 'epoch': after every epoch's last step (and at the end)."
        },
    )
    logging_steps: int = dataclasses.field(
        default=10, metadata={"help": "Log training metrics every N optimizer steps."}
    )
    checkpointing_steps: int | Literal["epoch"] | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Save the full training state every N optimizer steps, or 'epoch': after every epoch's last step."
        },
    )
    checkpoints_total_limit: int | None = dataclasses.field(
        default=None,
        metadata={"help": "Keep only the newest K checkpoints (and, with --load_best_model_at_end, the best)."},
    )
    load_best_model_at_end: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "End with the weights of the best evaluation (by --metric_for_best_model), the last step's or an "
            "earlier checkpoint's, as transformers' Trainer does: the folder, its card and the final evaluation are "
            "those of that model. Every evaluation must be saved: --eval_steps a multiple of --checkpointing_steps, "
            "or both 'epoch'. --checkpoints_total_limit never removes the best checkpoint."
        },
    )
    metric_for_best_model: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The evaluation's figure --load_best_model_at_end chooses by ('accuracy', 'f1', ...; default "
            "'loss'): the lowest loss, perplexity or mse, the highest of any other."
        },
    )
    early_stopping_patience: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Stop training once N evaluations in a row have not improved on the best by "
            "--metric_for_best_model (transformers' EarlyStoppingCallback); needs --load_best_model_at_end, so the "
            "run ends with the best evaluation's weights."
        },
    )
    early_stopping_threshold: float = dataclasses.field(
        default=0.0,
        metadata={
            "help": "How much an evaluation must beat the best by to count as an improvement for "
            "--early_stopping_patience (default: any amount)."
        },
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
        default="all",
        metadata={
            "help": "Trackers for --with_tracking: 'tensorboard', 'wandb', ..., several separated by commas, or "
            "'all' (those installed)."
        },
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
        check_positive(
            self,
            "logging_steps",
            "eval_steps",
            "checkpointing_steps",
            "checkpoints_total_limit",
            "early_stopping_patience",
        )
        if self.push_to_hub and not self.hub_model_id:
            raise UsageError("--push_to_hub needs --hub_model_id.")
        if self.hub_model_id is not None:  # also named by the card without --push_to_hub
            check_hub_model_id(self.hub_model_id)
        if self.with_tracking:
            from sinusoidal_encoder_training.runs.trackers import tracker_problem  # imports accelerate: only here

            problem = tracker_problem(self.report_to)
            if problem:
                raise UsageError(problem)
        self.check_best_model_settings()
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

    @property
    def best_metric(self) -> str:
        """The key of the evaluation's figure --load_best_model_at_end chooses by (`eval_loss` by default)."""
        return "eval_" + (self.metric_for_best_model or "loss").removeprefix("eval_")

    def check_best_model_settings(self) -> None:
        """--load_best_model_at_end needs a checkpoint at every evaluation, to load the best from;
        --metric_for_best_model and --early_stopping_patience are read only with it, the threshold only with the
        patience."""
        if self.early_stopping_threshold < 0:
            raise UsageError(f"--early_stopping_threshold must not be negative, got {self.early_stopping_threshold}.")
        if self.early_stopping_threshold and self.early_stopping_patience is None:
            raise UsageError("--early_stopping_threshold is read with --early_stopping_patience: pass it too.")
        for flag in ("metric_for_best_model", "early_stopping_patience"):
            if getattr(self, flag) is not None and not self.load_best_model_at_end:
                raise UsageError(
                    f"--{flag} is read with --load_best_model_at_end (the run ends with its best evaluation's "
                    "weights): pass it too."
                )
        if not self.load_best_model_at_end:
            return
        evaluate, save = self.eval_steps, self.checkpointing_steps
        if isinstance(evaluate, int) and isinstance(save, int):
            saved = evaluate % save == 0
        else:
            saved = evaluate is not None and evaluate == save
        if not saved:
            raise UsageError(
                "--load_best_model_at_end chooses among the evaluations of --eval_steps and loads the best from its "
                f"checkpoint: every evaluation must be saved (now --eval_steps {evaluate or 'unset'}, "
                f"--checkpointing_steps {save or 'unset'}): give --checkpointing_steps the number of --eval_steps "
                "(or a divisor of it), or both 'epoch'."
            )

    def check_best_metric(self, task: Task, problem: str | None = None) -> None:
        """--metric_for_best_model against the figures an evaluation of `task` reports (for `problem`, once the data
        tells it; None: for any of its problem types)."""
        if not self.load_best_model_at_end:
            return
        names = task.metric_names(problem)
        if self.best_metric.removeprefix("eval_") not in names:
            kind = f"{task.name} ({problem})" if problem else task.name
            raise UsageError(
                f"--metric_for_best_model {self.metric_for_best_model!r}: an evaluation of {kind} reports "
                f"{', '.join(names)}; choose one of them."
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
    lr_scheduler_kwargs: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The schedule's own arguments, a JSON object, as transformers' lr_scheduler_kwargs: "
            "'{\"min_lr_rate\": 0.1}' for cosine_with_min_lr (which needs min_lr or min_lr_rate), "
            '\'{"num_decay_steps": 200, "decay_type": "linear"}\' for warmup_stable_decay (default: a cosine decay '
            "over the last fifth of the steps). Counts of steps are optimizer steps."
        },
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
    no_persistent_workers: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Start new DataLoader worker processes for every epoch and evaluation (and wait for their first "
            "batches) instead of keeping them for the run, which holds their memory between epochs."
        },
    )
    mixed_precision: Literal["no", "bf16", "fp16"] | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Autocast precision (float32 master weights). Default: what `accelerate launch` or its config "
            "says, else 'no'. bf16 also runs on CPUs with bf16 instructions (AVX512-BF16, AMX), where it is faster."
        },
    )
    activation_checkpointing: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Keep only each layer's input for the backward pass and recompute the rest there (transformers' "
            "activation checkpointing, non-reentrant): less memory for the activations, which grow with batch and "
            "length, for about one more forward pass a step. The same gradients."
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
        if self.lr_scheduler_kwargs is not None:
            try:
                arguments = json.loads(self.lr_scheduler_kwargs)
            except json.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict):
                raise UsageError(
                    f"--lr_scheduler_kwargs must be a JSON object ('{{\"num_decay_steps\": 200}}'), got "
                    f"{self.lr_scheduler_kwargs!r}."
                )
        if self.lr_scheduler_kwargs is not None or self.lr_scheduler_type == "cosine_with_min_lr":
            from sinusoidal_encoder_training.runs.optimization import check_schedule  # imports torch: only here

            check_schedule(self)

    def global_batch_size(self, num_processes: int) -> int:
        """Sequences per optimizer step over every process: per device × processes × accumulation steps."""
        return self.per_device_train_batch_size * num_processes * self.gradient_accumulation_steps
