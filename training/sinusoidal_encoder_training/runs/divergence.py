"""A run that diverges stops with one line: a training loss that is not finite, or weights that are not, seen
without making the host wait for the device each step (`LossWatch`), and the line that says so and what to try
(`diverged_line`, which distillation shares)."""

from __future__ import annotations

import math

import torch
from accelerate import Accelerator

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import TrainingConfig


class LossWatch:
    """A training loss that is not finite (NaN, infinity) stops the run with one line (`diverged_line`), before
    anything is logged, evaluated or saved from it. The host does not wait for the device each step to learn it:
    every step's loss (summed over the processes, one step late, from the next step's reduction) is kept on the
    device (`track`: the first one that is not finite, and the newest finite one before it), and read where the loop
    reads values anyway: at a logging step (`see`), and before an evaluation, a checkpoint and the final evaluation,
    whose weights are saved (`settle`, with a count of the weights that are not finite)."""

    def __init__(self, config: TrainingConfig, mixed_precision: str, step: int):
        self.config, self.mixed_precision = config, mixed_precision
        self.seen = step  # the newest step whose loss the host has seen (a resumed run: the checkpoint's)
        self.last: tuple[int, float] | None = None  # (step, loss) of the newest finite loss seen
        # on the device: the first bad step (-1: none) and its loss, the newest good step before it and its loss
        self.tracked: torch.Tensor | None = None

    def track(self, step: int, loss: torch.Tensor) -> None:
        """Keep the loss of optimizer step `step` (a scalar tensor, summed over every process) on its device."""
        if step <= self.seen:
            return
        if self.tracked is None:
            self.tracked = torch.zeros(4, dtype=torch.float64, device=loss.device)  # made there: no copy, no wait
            self.tracked[0::2].fill_(-1.0)  # no step yet
        finite, clean = torch.isfinite(loss), self.tracked[0] < 0  # clean: no bad step before this one
        first_bad, good = clean & ~finite, clean & finite
        self.tracked = torch.stack(
            [
                torch.where(first_bad, float(step), self.tracked[0]),
                torch.where(first_bad, loss.double(), self.tracked[1]),
                torch.where(good, float(step), self.tracked[2]),
                torch.where(good, loss.double(), self.tracked[3]),
            ]
        )

    def check(self) -> None:
        """Read what `track` kept: a `UsageError` when a tracked loss was not finite."""
        if self.tracked is None:
            return
        bad_step, bad_loss, good_step, good_loss = self.tracked.tolist()
        self.tracked = None
        if good_step >= 0 and (self.last is None or good_step > self.last[0]):
            self.last = (int(good_step), good_loss)
        if bad_step >= 0:
            what = f"The training loss is {bad_loss}"
            raise UsageError(
                diverged_line(self.config, self.mixed_precision, what, int(bad_step), self.last), shared=True
            )
        self.seen = max(self.seen, int(good_step))

    def see(self, step: int, loss: float) -> None:
        """The loss of optimizer step `step` (summed over every process), read by the host: a `UsageError` when it,
        or a loss tracked before it, is not finite."""
        self.check()
        if step <= self.seen:
            return
        if not math.isfinite(loss):
            raise UsageError(
                diverged_line(self.config, self.mixed_precision, f"The training loss is {loss}", step, self.last),
                shared=True,  # the loss summed over every process
            )
        self.seen, self.last = step, (step, loss)

    def settle(self, accelerator: Accelerator, model, step: int, step_loss: torch.Tensor) -> None:
        """Before evaluating or saving after step `step`: its loss seen, and a `UsageError` when a weight of `model`
        (this process's part, on every process) is not finite."""
        bad = non_finite_weights(model).to(step_loss)
        loss, bad = accelerator.reduce(torch.stack([step_loss, bad]), "sum").tolist()
        self.see(step, loss)
        if bad:
            what = f"The weights hold {int(bad):,} NaN or infinite value(s)"
            raise UsageError(diverged_line(self.config, self.mixed_precision, what, step, self.last), shared=True)


def non_finite_weights(model: torch.nn.Module) -> torch.Tensor:
    """How many values of the weights of `model` (this process's part) are NaN or infinite: a scalar on their device,
    read by the caller (one pass over the weights, before a save)."""
    counts = [(~torch.isfinite(p.detach())).sum() for p in model.parameters()]
    return torch.stack(counts).sum() if counts else torch.zeros((), dtype=torch.int64)


def diverged_line(config, mixed_precision: str | None, what: str, step: int, last: tuple[int, float] | None) -> str:
    """The line that stops a run in which `what` happened ("The training loss is nan") at optimizer step `step`:
    the last finite loss, that nothing of it is saved, what to try. `config` has `learning_rate` and `max_grad_norm`
    (the training loop's, distillation's)."""
    before = f"the last finite loss was {last[1]:.4f}, at step {last[0]}" if last else "no finite loss before it"
    tries = [f"a lower --learning_rate (now {config.learning_rate:g})"]
    if config.max_grad_norm > 0:
        tries.append(f"a lower --max_grad_norm (now {config.max_grad_norm:g})")
    else:
        tries.append("clip gradients with --max_grad_norm 1.0")
    if mixed_precision == "fp16":
        tries.append("--mixed_precision bf16 or no instead of fp16")
    return (
        f"{what} at step {step} ({before}): stopped, nothing saved from it; try "
        f"{', '.join(tries[:-1])} or {tries[-1]}."
    )
