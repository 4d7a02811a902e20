"""The command-line flags shared by pretraining and fine-tuning (optimisation, compilation, output, evaluation,
checkpoints, tracking, Hub) and their checks."""

from __future__ import annotations

import argparse
import os


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("optimisation")
    group.add_argument("--per_device_train_batch_size", type=int, default=32, help="Sequences per process and step.")
    group.add_argument("--per_device_eval_batch_size", type=int, default=64, help="Sequences per process in eval.")
    group.add_argument("--learning_rate", type=float, default=5e-4, help="Peak learning rate of AdamW.")
    group.add_argument(
        "--weight_decay",
        type=float,
        default=0.01,
        help="AdamW weight decay, applied to matrices only (not to biases, LayerNorm weights or other 1-D tensors).",
    )
    group.add_argument("--adam_beta1", type=float, default=0.9, help="AdamW beta1.")
    group.add_argument("--adam_beta2", type=float, default=0.98, help="AdamW beta2 (0.98 as in the paper).")
    group.add_argument("--adam_epsilon", type=float, default=1e-6, help="AdamW epsilon.")
    group.add_argument(
        "--lr_scheduler_type",
        default="linear",
        choices=[
            "linear",
            "cosine",
            "cosine_with_restarts",
            "polynomial",
            "constant",
            "constant_with_warmup",
            "inverse_sqrt",
            "warmup_stable_decay",
        ],
        help="Schedule after warmup (transformers.get_scheduler).",
    )
    group.add_argument("--num_warmup_steps", type=int, default=None, help="Warmup steps (default: 6%% of training).")
    group.add_argument("--max_train_steps", type=int, default=None, help="Optimizer steps; overrides epochs.")
    group.add_argument("--num_train_epochs", type=int, default=1, help="Passes over the training data.")
    group.add_argument("--gradient_accumulation_steps", type=int, default=1, help="Micro-batches per optimizer step.")
    group.add_argument("--max_grad_norm", type=float, default=1.0, help="Gradient clipping norm (0 disables).")
    group.add_argument("--seed", type=int, default=42, help="Seed of initialisation, data order, masks, dropout.")
    group.add_argument("--dataloader_num_workers", type=int, default=0, help="DataLoader worker processes.")
    group.add_argument(
        "--mixed_precision",
        choices=["no", "bf16", "fp16"],
        default=None,
        help="Autocast precision (float32 master weights). Default: what `accelerate launch` or its config says, "
        "else 'no'. bf16 also runs on CPUs with bf16 instructions (AVX512-BF16, AMX), where it is faster.",
    )
    group.add_argument(
        "--torch_compile",
        action="store_true",
        help="Train and evaluate the model under torch.compile (through accelerate, dynamic shapes). Checkpoints and "
        "the exported folder hold the plain model's weights: a compiled run resumes an eager one and vice versa.",
    )
    group.add_argument(
        "--torch_compile_backend",
        default="inductor",
        help="The torch.compile backend of --torch_compile ('inductor', 'aot_eager', ...).",
    )
    group.add_argument(
        "--torch_compile_mode",
        default=None,
        choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"],
        help="The torch.compile mode of --torch_compile (default: torch's).",
    )

    group = parser.add_argument_group("output, evaluation, checkpoints")
    group.add_argument("--output_dir", required=True, help="Where the final Hub-ready model folder is written.")
    group.add_argument(
        "--eval_steps", type=int, default=None, help="Evaluate every N optimizer steps (and at the end)."
    )
    group.add_argument("--logging_steps", type=int, default=10, help="Log training metrics every N optimizer steps.")
    group.add_argument(
        "--checkpointing_steps", type=int, default=None, help="Save the full training state every N optimizer steps."
    )
    group.add_argument("--checkpoints_total_limit", type=int, default=None, help="Keep only the newest K checkpoints.")
    group.add_argument(
        "--resume_from_checkpoint",
        default=None,
        help="'latest' (the newest complete checkpoint in output_dir/checkpoints, or a fresh start if there is none) "
        "or the path of a checkpoint folder.",
    )
    group.add_argument("--with_tracking", action="store_true", help="Log metrics to the trackers of --report_to.")
    group.add_argument(
        "--report_to", default="all", help="Trackers for --with_tracking: 'tensorboard', 'wandb', ..., or 'all'."
    )
    group.add_argument("--push_to_hub", action="store_true", help="Upload the final folder (not checkpoints/).")
    group.add_argument("--hub_model_id", default=None, help="The Hub repository, e.g. 'user/my-encoder'.")
    group.add_argument("--hub_private_repo", action="store_true", help="Create the Hub repository as private.")


def check_training_arguments(args: argparse.Namespace) -> None:
    positive = [
        "per_device_train_batch_size",
        "per_device_eval_batch_size",
        "gradient_accumulation_steps",
        "num_train_epochs",
        "logging_steps",
    ]
    optional_positive = ["max_train_steps", "eval_steps", "checkpointing_steps", "checkpoints_total_limit"]
    for name in positive + optional_positive:
        value = getattr(args, name)
        if (value is not None or name in positive) and (value is None or value <= 0):
            raise ValueError(f"--{name} must be a positive integer, got {value}.")
    if args.learning_rate <= 0:
        raise ValueError(f"--learning_rate must be positive, got {args.learning_rate}.")
    if args.weight_decay < 0 or args.max_grad_norm < 0:
        raise ValueError("--weight_decay and --max_grad_norm must not be negative.")
    if args.num_warmup_steps is not None and args.num_warmup_steps < 0:
        raise ValueError(f"--num_warmup_steps must not be negative, got {args.num_warmup_steps}.")
    if args.push_to_hub and not args.hub_model_id:
        raise ValueError("--push_to_hub needs --hub_model_id.")
    if args.resume_from_checkpoint not in (None, "latest") and not os.path.isdir(args.resume_from_checkpoint):
        raise ValueError(f"--resume_from_checkpoint {args.resume_from_checkpoint!r} is not a checkpoint folder.")
