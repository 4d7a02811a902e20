"""--load_best_model_at_end and --early_stopping_patience, as transformers' Trainer and its EarlyStoppingCallback
have them: the best evaluation of a run by --metric_for_best_model is kept in its progress (saved in every
checkpoint, so a resumed run knows it), with the evaluations since one improved on it (`see_evaluation`); its
checkpoint is kept from pruning (`checkpoints.save_checkpoint(keep=...)`); the run trains no further once the
patience is spent (`patience_spent`), and ends with the weights of the best evaluation, the last step's or those of
the checkpoint of an earlier one (`end_with_best`). The earliest of equal values is the best; a figure that is not
a number never is."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.runs.checkpoints import checkpoint_damage, checkpoints_dir
from sinusoidal_encoder_training.runs.metrics_log import format_metrics
from sinusoidal_encoder_training.runs.progress import TrainingProgress
from sinusoidal_encoder_training.tasks.task import greater_is_better

if TYPE_CHECKING:
    from accelerate import Accelerator

    from sinusoidal_encoder_training.configs import TrainingConfig


def better(metric: str, value: float, best: float | None) -> bool:
    """Whether `value` of the figure `metric` beats `best` (None: no best yet): lower for a loss, a perplexity or a
    squared error, higher for any other (`tasks.task.greater_is_better`); a tie does not beat, NaN beats nothing and
    anything beats NaN."""
    if math.isnan(value):
        return False
    if best is None or math.isnan(best):
        return True
    return value > best if greater_is_better(metric) else value < best


def figure(config: TrainingConfig, evaluation: dict[str, Any]) -> float:
    """The figure --metric_for_best_model names, of `evaluation`; a one-line error when the evaluation lacks it (the
    configuration checks the name against what the task declares its evaluation reports: this holds a model or task
    of the caller's to the same)."""
    value = evaluation.get(config.best_metric)
    if not isinstance(value, (int, float)):
        reported = ", ".join(key.removeprefix("eval_") for key, v in evaluation.items() if isinstance(v, float))
        raise UsageError(
            f"--metric_for_best_model {config.best_metric.removeprefix('eval_')!r}: this run's evaluation reports "
            f"{reported}; choose one of them."
        )
    return float(value)


def see_evaluation(config: TrainingConfig, progress: TrainingProgress, step: int, evaluation: dict[str, Any]) -> None:
    """With --load_best_model_at_end, the evaluation of step `step` made the run's best (`progress.best_step`,
    `progress.best_metric`) when it beats the best so far; `progress.evaluations_without_improvement` counted for
    --early_stopping_patience (back to 0 when it beats the best by more than --early_stopping_threshold)."""
    if not config.load_best_model_at_end:
        return
    value, best = figure(config, evaluation), progress.best_metric
    improved = better(config.best_metric, value, best)
    if improved and best is not None and not math.isnan(best):
        improved_enough = abs(value - best) > config.early_stopping_threshold
    else:
        improved_enough = improved
    if improved:
        progress.best_step, progress.best_metric = step, value
    progress.evaluations_without_improvement = 0 if improved_enough else progress.evaluations_without_improvement + 1


def patience_spent(config: TrainingConfig, progress: TrainingProgress) -> bool:
    """Whether --early_stopping_patience evaluations in a row have not improved: the run trains no further."""
    patience = config.early_stopping_patience
    return patience is not None and progress.evaluations_without_improvement >= patience


def end_with_best(
    accelerator: Accelerator,
    config: TrainingConfig,
    progress: TrainingProgress,
    max_train_steps: int,
    final: dict[str, Any],
    evaluate: Callable[[], dict[str, Any]],
    shown: bool = False,
) -> dict[str, Any]:
    """After the last step's evaluation `final` (`shown`: printed already, as an evaluation during training): a line
    when the run stopped early; with --load_best_model_at_end, the best evaluation's weights loaded when they are not
    the last step's (`choose_best`, `load_best`) and evaluated again (`evaluate()`), each said in a line. Returns the
    evaluation of the weights the run ends with."""
    step = progress.completed_steps
    if patience_spent(config, progress) and step < max_train_steps:
        accelerator.print(
            f"stopped early at step {step} of {max_train_steps}: {progress.evaluations_without_improvement} "
            f"evaluations in a row without improving on the best {config.best_metric} (--early_stopping_patience "
            f"{config.early_stopping_patience})"
        )
    best, line = choose_best(config, progress, step, final)
    if best is not None and not shown:
        accelerator.print(f"step {step} evaluation: {format_metrics(final)}")
    if line:
        accelerator.print(line)
    if best is None:
        return final
    load_best(accelerator, progress, best)
    return evaluate()


def choose_best(
    config: TrainingConfig, progress: TrainingProgress, step: int, final: dict[str, Any]
) -> tuple[str | None, str]:
    """At the end of a run with --load_best_model_at_end, after the last step's evaluation `final`: the checkpoint
    to load (when an earlier evaluation is the best and its checkpoint is whole; None when the last step's weights
    stay: the best, no evaluation a number, or the best's checkpoint gone), and the line that says which ("" without
    the flag). `progress.best_step` is then the step whose weights the run holds (None when none was chosen)."""
    if not config.load_best_model_at_end:
        return None, ""
    metric, last = config.best_metric, figure(config, final)
    earlier, earlier_step = progress.best_metric, progress.best_step
    if earlier_step is None or better(metric, last, earlier):
        if math.isnan(last):
            progress.best_step = progress.best_metric = None
            return None, f"best model by {metric}: none, no evaluation's is a number: the last step's weights"
        before = f" (step {earlier_step}'s {earlier:.4f} before it)" if earlier_step is not None else ""
        progress.best_step, progress.best_metric = step, last
        return None, f"best model by {metric}: the last step's, {last:.4f}{before}"
    path = os.path.join(checkpoints_dir(config.output_dir), f"step_{earlier_step}")
    damage = checkpoint_damage(path) if os.path.isdir(path) else "it is gone"
    if damage is not None:
        progress.best_step = progress.best_metric = None
        return None, (
            f"best model by {metric}: step {earlier_step}'s, {earlier:.4f}, but its checkpoint {path} cannot be "
            f"loaded ({damage}): the last step's weights stay ({last:.4f})"
        )
    return path, (
        f"best model by {metric}: step {earlier_step}'s, {earlier:.4f} (the last step's {last:.4f}); loading its "
        f"weights from {path}"
    )


def load_best(accelerator: Accelerator, progress: TrainingProgress, checkpoint: str) -> None:
    """The model's weights from `checkpoint`, through accelerate's own `load_state` (as a resume loads them, whatever
    the processes and their sharding); the run's progress stays where the run ended."""
    ended = progress.state_dict()
    accelerator.load_state(checkpoint)
    progress.load_state_dict(ended)


def describe_best(config: TrainingConfig, progress: TrainingProgress, max_train_steps: int) -> str:
    """The card's sentences on a run stopped early and on the weights kept with --load_best_model_at_end ("" without
    it)."""
    said = ""
    if patience_spent(config, progress) and progress.completed_steps < max_train_steps:
        said += (
            f" It stopped early, at step {progress.completed_steps:,} of {max_train_steps:,}: "
            f"{progress.evaluations_without_improvement} evaluations in a row had not improved on the best."
        )
    if config.load_best_model_at_end and progress.best_step is not None:
        which = "the last step's" if progress.best_step == progress.completed_steps else f"step {progress.best_step}'s"
        every = {"epoch": "epoch", 1: "step"}.get(config.eval_steps, f"{config.eval_steps} steps")
        said += (
            f" The weights are {which}, the best {config.best_metric} ({progress.best_metric:.4f}) of the "
            f"evaluations every {every}."
        )
    return said
