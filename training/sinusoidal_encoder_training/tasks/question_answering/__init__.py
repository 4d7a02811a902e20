"""Extractive question answering on SQuAD-format data: its entry, and the flag only it reads (`--doc_stride`). The
recipe is `recipe.py`."""

from __future__ import annotations

import dataclasses
from typing import Any

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.tasks.task import Task


@dataclasses.dataclass(frozen=True, kw_only=True)
class QuestionAnsweringFlags:
    """The task-data flags of question-answering."""

    _argument_group_name = "question-answering data"

    doc_stride: int = dataclasses.field(
        default=32,
        metadata={
            "help": "question-answering: a context longer than --max_length is cut into windows that overlap by this "
            "many tokens."
        },
    )


def check(config: Any) -> None:
    """The windows' overlap fits in a window: less than half of --max_length."""
    if not 0 <= config.doc_stride < config.max_length // 2:
        raise UsageError(
            f"--doc_stride must be at least 0 and less than half of --max_length ({config.max_length}), got "
            f"{config.doc_stride}."
        )


TASKS = (
    Task(
        "question-answering",
        "AutoModelForQuestionAnswering",
        "ForQuestionAnswering",
        "question-answering head",
        "fine-tuned for extractive question answering",
        "Question Answering",
        {"": "nats per answer (the mean of its start and end)"},
        ("start_logits", "end_logits"),
        metrics={"": ("exact_match", "f1")},
        recipe=f"{__name__}.recipe",
        flags=QuestionAnsweringFlags,
        check=check,
    ),
)
