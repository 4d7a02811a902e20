"""AdamW with weight decay chosen by tensor rank, and the learning-rate schedule."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import torch

from sinusoidal_encoder_training.cli.command_line import UsageError

if TYPE_CHECKING:
    from accelerate import Accelerator

    from sinusoidal_encoder_training.configs import TrainingConfig  # not imported: the configs check schedules here


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay by tensor rank: matrices (embeddings, projections) decay; biases and norm weights do not.
    Tied parameters appear once."""
    decay, no_decay = [], []
    for parameter in model.parameters():  # named_parameters() would list a tied tensor once as well
        if parameter.requires_grad:
            (decay if parameter.dim() >= 2 else no_decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


FUSED_DEVICES = ("cpu", "cuda")


def make_optimizer(model: torch.nn.Module, config: TrainingConfig) -> torch.optim.Optimizer:
    """AdamW with the learning rate, betas, epsilon and weight decay of the config; its fused kernel (one call
    updates every tensor, far cheaper than the per-tensor loop) where the parameters are on CPUs or CUDA GPUs."""
    groups = parameter_groups(model, config.weight_decay)
    parameters = [parameter for group in groups for parameter in group["params"]]
    fused = all(parameter.device.type in FUSED_DEVICES for parameter in parameters) or None
    return torch.optim.AdamW(
        groups,
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
        fused=fused,
    )


DECAY_SHARE = 0.2  # warmup_stable_decay's decay by default: the last fifth of the steps (Hägele et al. 2024)
STEP_ARGUMENTS = ("num_decay_steps", "num_stable_steps", "timescale")  # the schedules' arguments counted in steps


def schedule_arguments(config: TrainingConfig, warmup_steps: int, total_steps: int) -> dict[str, Any]:
    """The schedule's own arguments for `total_steps` optimizer steps: `--lr_scheduler_kwargs`, and for
    warmup_stable_decay a decay over the last fifth of the steps unless they give one; a `UsageError` when its warmup
    and decay outlast the run (its stable phase would be negative)."""
    arguments = json.loads(config.lr_scheduler_kwargs or "{}")
    if config.lr_scheduler_type == "warmup_stable_decay":
        decay = arguments.setdefault("num_decay_steps", max(1, round(DECAY_SHARE * total_steps)))
        if "num_stable_steps" not in arguments and isinstance(decay, int) and warmup_steps + decay > total_steps:
            raise UsageError(
                f"--lr_scheduler_type warmup_stable_decay: {warmup_steps} warmup and {decay} decay steps are more "
                f"than the run's {total_steps} optimizer steps: lower --num_warmup_steps or num_decay_steps in "
                "--lr_scheduler_kwargs.",
                shared=True,  # every process plans the same steps
            )
    return arguments


def build_schedule(config: TrainingConfig, optimizer, warmup_steps: int, total_steps: int, scale: int = 1):
    """transformers' `get_scheduler` of `--lr_scheduler_type` with `schedule_arguments`, every count of steps times
    `scale`; a `UsageError` that names the flags where transformers refuses the arguments."""
    from transformers import get_scheduler

    arguments = schedule_arguments(config, warmup_steps, total_steps)
    scaled = {
        name: value * scale if name in STEP_ARGUMENTS and isinstance(value, int) else value
        for name, value in arguments.items()
    }
    try:
        return get_scheduler(
            config.lr_scheduler_type,
            optimizer,
            num_warmup_steps=warmup_steps * scale,
            num_training_steps=total_steps * scale,
            scheduler_specific_kwargs=scaled,
        )
    except (TypeError, ValueError) as error:  # an argument the schedule has not, or a value it refuses
        given = f"--lr_scheduler_kwargs '{config.lr_scheduler_kwargs}'" if config.lr_scheduler_kwargs else "none"
        raise UsageError(
            f"--lr_scheduler_type {config.lr_scheduler_type} cannot be made with the arguments given ({given}): "
            f"{error}",
            shared=True,
        ) from None


def check_schedule(config: TrainingConfig) -> None:
    """`build_schedule` on a stand-in optimizer, before any work: `--lr_scheduler_kwargs` that the schedule refuses
    is one line at once (whether its steps fit the run is known once the data is: `schedule_arguments`)."""
    stand_in = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    total = config.max_train_steps or 10**9
    build_schedule(config, stand_in, min(config.num_warmup_steps or 0, total), total)


def describe_schedule(config: TrainingConfig) -> str:
    """The schedule in the words of a model card: 'cosine schedule after warmup', with its own arguments."""
    arguments = config.lr_scheduler_kwargs
    if config.lr_scheduler_type == "warmup_stable_decay" and "num_decay_steps" not in json.loads(arguments or "{}"):
        arguments = f"{arguments}, " if arguments else ""
        arguments += "decay over the last fifth of the steps"
    return f"{config.lr_scheduler_type} schedule" + (f" ({arguments})" if arguments else "") + " after warmup"


def make_scheduler(accelerator: Accelerator, config: TrainingConfig, optimizer, warmup_steps: int, total_steps: int):
    """The learning-rate schedule of `--lr_scheduler_type` over `total_steps` optimizer steps, after `warmup_steps`,
    prepared. A prepared scheduler advances once per process at every optimizer step: its steps are counted the same
    way."""
    scheduler = build_schedule(config, optimizer, warmup_steps, total_steps, scale=accelerator.num_processes)
    return accelerator.prepare(scheduler)
