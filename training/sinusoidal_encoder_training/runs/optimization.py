"""AdamW with weight decay chosen by tensor rank, and the learning-rate schedule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from sinusoidal_encoder_training.configs import TrainingConfig

if TYPE_CHECKING:
    from accelerate import Accelerator


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


def make_scheduler(accelerator: Accelerator, config: TrainingConfig, optimizer, warmup_steps: int, total_steps: int):
    """The learning-rate schedule of `--lr_scheduler_type` over `total_steps` optimizer steps, after `warmup_steps`,
    prepared. A prepared scheduler advances once per process at every optimizer step: its steps are counted the same
    way."""
    from transformers import get_scheduler

    scheduler = get_scheduler(
        config.lr_scheduler_type,
        optimizer,
        num_warmup_steps=warmup_steps * accelerator.num_processes,
        num_training_steps=total_steps * accelerator.num_processes,
    )
    return accelerator.prepare(scheduler)
