"""The trackers of a run (`--with_tracking --report_to`): which ones, checked before any work (accelerate would skip
one it has not the package of, with a warning, and train on unlogged), where their logs go, and their start with
the run's settings."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelerate import Accelerator

    from sinusoidal_encoder_training.configs import TrainingConfig

TRACKER_LOGS = "runs"  # the folder of the run's --output_dir that the trackers write into


def trackers(report_to: str) -> list[str]:
    """The trackers `--report_to` names: one, several separated by commas, or 'all'."""
    return [name.strip() for name in report_to.split(",") if name.strip()]


def tracker_problem(report_to: str) -> str | None:
    """Why accelerate would not log to `--report_to` (a tracker it has not, or one whose package is not installed,
    which accelerate would skip with a warning and train on), in one line; None when it would."""
    from accelerate.tracking import get_available_trackers
    from accelerate.utils import LoggerType

    names, known = trackers(report_to), LoggerType.list()
    if not names:
        return "--report_to names no tracker: 'tensorboard', 'wandb', ..., or 'all'."
    unknown = [name for name in names if name not in known]
    if unknown:
        return (
            f"--report_to {report_to!r}: accelerate has no tracker {unknown[0]!r}: choose from {', '.join(known)}; "
            "several separated by commas."
        )
    installed = [str(tracker) for tracker in get_available_trackers()]
    if "all" in names and not installed:
        return "--report_to all: no tracker's package is installed: pip install tensorboard (or wandb, mlflow, ...)."
    missing = [name for name in names if name != "all" and name not in installed]
    if missing:
        return (
            f"--report_to {report_to}: the package of the tracker {missing[0]!r} is not installed "
            f"(installed: {', '.join(installed) or 'none'}): pip install {missing[0]}, or choose another."
        )
    return None


def init_trackers(accelerator: Accelerator, config: TrainingConfig, name: str, max_train_steps: int) -> None:
    """The trackers of `--report_to`, given every setting of the run (with the steps it is set for) as a scalar or
    a string: tensorboard's hparams rejects anything else."""
    flags = {**dataclasses.asdict(config), "max_train_steps": max_train_steps}
    hparams = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in flags.items() if v is not None}
    accelerator.init_trackers(name, config=hparams)
