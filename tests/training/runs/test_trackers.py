"""The trackers of `--report_to` (runs.trackers): one that accelerate would skip, with a warning, and train on
unlogged (its package not installed), or that it has not, is refused in one line before any work."""

from __future__ import annotations

import pytest

from sinusoidal_encoder_training.runs.trackers import tracker_problem


@pytest.mark.parametrize(
    ("report_to", "problem"),
    [
        ("tensorboard", None),
        ("all", None),
        ("tensorboard,mlflow", "--report_to tensorboard,mlflow: the package of the tracker 'mlflow' is not installed"),
        ("wandb", "(installed: tensorboard): pip install wandb, or choose another."),
        ("tensorbord", "accelerate has no tracker 'tensorbord': choose from all, "),
    ],
)
def test_trackers_that_would_be_skipped_are_named_before_the_run(monkeypatch, report_to, problem):
    """accelerate skips a tracker whose package is missing with a warning and trains on, unlogged: refused instead,
    in one line (here, of the installed trackers, tensorboard alone)."""
    from accelerate import tracking
    from accelerate.utils import LoggerType

    monkeypatch.setattr(tracking, "_available_trackers", [LoggerType.TENSORBOARD])
    found = tracker_problem(report_to)
    assert found == problem if problem is None else problem in found
    monkeypatch.setattr(tracking, "_available_trackers", [])
    assert tracker_problem("all") == (
        "--report_to all: no tracker's package is installed: pip install tensorboard (or wandb, mlflow, ...)."
    )
