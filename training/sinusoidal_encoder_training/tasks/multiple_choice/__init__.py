"""Multiple choice on SWAG-format data: its entry. The recipe is `recipe.py`."""

from __future__ import annotations

from sinusoidal_encoder_training.tasks.task import Task

TASKS = (
    Task(
        "multiple-choice",
        "AutoModelForMultipleChoice",
        "ForMultipleChoice",
        "multiple-choice head",
        "fine-tuned for multiple choice",
        "Multiple Choice",
        {"": "nats per question"},
        ("logits",),
        ("batch", "choices", "sequence"),
        metrics={"": ("accuracy",)},
        recipe=f"{__name__}.recipe",
    ),
)
