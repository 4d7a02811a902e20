"""How many optimizer steps a run takes: the flag, or the steps of its epochs (an epoch's last micro-batches, fewer
than a step's, counted as a step or not, as the task says), the epochs they span and the warmup of the learning rate;
an epoch too short for one step refused in one line; which steps are due an evaluation or a checkpoint."""

from __future__ import annotations

import dataclasses
import math

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import TrainingConfig


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """The optimizer steps of a run: `max_train_steps` (the flag, or the steps of `--num_train_epochs`), the epochs
    they span (1 for a stream), the warmup steps of the learning rate (the flag, or 6% of the steps) and the steps of
    one epoch (None for a stream)."""

    max_train_steps: int
    epochs: int
    warmup: int
    steps_per_epoch: int | None

    def due(self, every: int | str | None, step: int) -> bool:
        """Whether step `step` is one of every `every` steps (`--eval_steps`, `--checkpointing_steps`): every N, or
        `epoch`, the last step of each epoch; never when unset."""
        if every == "epoch":
            return self.steps_per_epoch is not None and step % self.steps_per_epoch == 0
        return bool(every) and step % every == 0


def plan_steps(config: TrainingConfig, train_loader, streaming: bool, every_example: bool) -> StepPlan:
    """The run's `StepPlan`: an epoch's steps count its last micro-batches, fewer than a step's, as one if
    `every_example` (`TrainingTask.every_example`); else a `UsageError` when one epoch holds fewer batches than a step
    needs."""
    windows = divmod(len(train_loader), config.gradient_accumulation_steps) if not streaming else None
    steps_per_epoch = None if windows is None else windows[0] + int(every_example and windows[1] > 0)
    if steps_per_epoch == 0:
        raise UsageError(
            f"One epoch of {len(train_loader.dataset):,} training examples holds {len(train_loader)} batch(es) "
            f"of --per_device_train_batch_size={config.per_device_train_batch_size} per process, fewer than one "
            f"step's --gradient_accumulation_steps={config.gradient_accumulation_steps}: lower the batch size.",
            shared=True,  # every process holds as many batches
        )
    max_train_steps = config.max_train_steps
    if max_train_steps is None:
        max_train_steps = steps_per_epoch * config.num_train_epochs
    epochs = math.ceil(max_train_steps / steps_per_epoch) if steps_per_epoch else 1
    warmup = config.num_warmup_steps if config.num_warmup_steps is not None else int(0.06 * max_train_steps)
    return StepPlan(max_train_steps, epochs, warmup, steps_per_epoch)
