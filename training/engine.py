"""The training machinery shared by pretraining and fine-tuning: flags, optimizer, atomic checkpoints and exact
resume, metric logging, and publishing to the Hub."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import time
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger

logger = get_logger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^step_(\d+)$")
METRICS_FILE = "metrics.jsonl"


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


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay by tensor rank: matrices (embeddings, projections) decay; biases and norm weights do not.
    Tied parameters appear once."""
    decay, no_decay = [], []
    for parameter in model.parameters():  # named_parameters() would list a tied tensor once as well
        if parameter.requires_grad:
            (decay if parameter.dim() >= 2 else no_decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class TrainingProgress:
    """Where training stands; saved in every checkpoint through `accelerator.register_for_checkpointing`."""

    def __init__(self) -> None:
        self.completed_steps = 0
        self.epoch = 0
        self.batches_in_epoch = 0  # micro-batches of `epoch` already consumed (per process)
        self.tokens_seen = 0

    def state_dict(self) -> dict[str, int]:
        return dict(vars(self))

    def load_state_dict(self, state: dict[str, int]) -> None:
        for key, value in state.items():
            setattr(self, key, value)


def checkpoints_dir(output_dir: str) -> str:
    return os.path.join(output_dir, "checkpoints")


def complete_checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """(step, path) of every complete checkpoint, oldest first. Temporary folders never match `step_N`."""
    folder = checkpoints_dir(output_dir)
    if not os.path.isdir(folder):
        return []
    found = []
    for name in os.listdir(folder):
        match = CHECKPOINT_PATTERN.match(name)
        if match and os.path.isdir(os.path.join(folder, name)):
            found.append((int(match.group(1)), os.path.join(folder, name)))
    return sorted(found)


def resolve_checkpoint(output_dir: str, requested: str | None) -> str | None:
    if requested is None:
        return None
    if requested == "latest":
        found = complete_checkpoints(output_dir)
        return found[-1][1] if found else None
    return requested


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(accelerator: Accelerator, output_dir: str, step: int, total_limit: int | None) -> str:
    """`accelerator.save_state` into a temporary folder, renamed to `step_N` once every process has written its part:
    a kill during the save leaves the previous checkpoints as they were and no broken `step_N`."""
    folder = checkpoints_dir(output_dir)
    final = os.path.join(folder, f"step_{step}")
    temporary = os.path.join(folder, f".incomplete-step_{step}")
    if accelerator.is_main_process:
        os.makedirs(folder, exist_ok=True)
        shutil.rmtree(temporary, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(temporary)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        for directory, _, files in os.walk(temporary):
            for name in files:
                with open(os.path.join(directory, name), "rb") as handle:
                    os.fsync(handle.fileno())
        shutil.rmtree(final, ignore_errors=True)
        os.rename(temporary, final)
        _fsync_dir(folder)
        if total_limit is not None:
            for _, old in complete_checkpoints(output_dir)[:-total_limit]:
                shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


class MetricsLog:
    """Every logged metric as one JSON line in `output_dir/metrics.jsonl` (main process), and to the trackers.

    On resume, lines from steps after the checkpoint (logged by the killed run) are dropped, so the file reads as
    one uninterrupted run."""

    def __init__(self, accelerator: Accelerator, output_dir: str, resumed_step: int | None, tracking: bool):
        self.accelerator = accelerator
        self.tracking = tracking
        self.path = os.path.join(output_dir, METRICS_FILE)
        if accelerator.is_main_process:
            os.makedirs(output_dir, exist_ok=True)
            kept = []
            if resumed_step is not None and os.path.exists(self.path):
                with open(self.path) as handle:
                    kept = [line for line in handle if line.strip() and json.loads(line)["step"] <= resumed_step]
            with open(self.path, "w") as handle:
                handle.writelines(kept)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.tracking:
            self.accelerator.log(metrics, step=step)
        if self.accelerator.is_main_process:
            with open(self.path, "a") as handle:
                handle.write(json.dumps({"step": step, "time": time.time(), **metrics}) + "\n")


def read_metrics(output_dir: str) -> list[dict[str, Any]]:
    path = os.path.join(output_dir, METRICS_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def perplexity(loss: float) -> float:
    return math.exp(loss) if loss < 100 else float("inf")


def push_folder_to_hub(folder: str, repo_id: str, private: bool = False, api=None, commit_message: str | None = None):
    """Upload a finished model folder to the Hub with huggingface_hub, leaving out resumable checkpoints and logs of
    trackers. `api` is an `HfApi` (injectable for tests)."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    api.create_repo(repo_id=repo_id, private=private, exist_ok=True)
    return api.upload_folder(
        repo_id=repo_id,
        folder_path=folder,
        commit_message=commit_message or "Upload sinusoidal encoder",
        ignore_patterns=["checkpoints/*", "checkpoints/**", "runs/*", "runs/**", "*.pt", "*.pkl"],
    )
