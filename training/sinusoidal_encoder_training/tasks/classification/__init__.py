"""Sequence classification (single-label, multi-label, regression; a text or a pair of texts) and token
classification (a tag per word): their entries, and the flags only sequence classification reads. The recipe of
both is `recipe.py`."""

from __future__ import annotations

import dataclasses
from typing import Literal

from sinusoidal_encoder_training.tasks.task import Task

ProblemType = Literal["single_label_classification", "multi_label_classification", "regression"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SequenceClassificationFlags:
    """The task-data flags of text-classification."""

    _argument_group_name = "text-classification data"

    text_pair_column_name: str | None = dataclasses.field(
        default=None, metadata={"help": "Second text of a pair (sequence classification)."}
    )
    problem_type: ProblemType | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Sequence classification: inferred from the labels (float: regression, lists: multi-label) "
            "unless set."
        },
    )


TASKS = (
    Task(
        "text-classification",
        "AutoModelForSequenceClassification",
        "ForSequenceClassification",
        "sequence-classification head",
        "fine-tuned for sequence classification",
        "Text Classification",
        {
            "single_label_classification": "nats per example",
            "multi_label_classification": "nats per label",
            "regression": "squared error per output",
        },
        ("logits",),
        metrics={
            "single_label_classification": ("accuracy", "macro_f1"),
            "multi_label_classification": ("micro_f1", "macro_f1", "exact_match"),
            "regression": ("pearson", "spearman", "mse"),
        },
        recipe=f"{__name__}.recipe",
        labelled=True,
        flags=SequenceClassificationFlags,
    ),
    Task(
        "token-classification",
        "AutoModelForTokenClassification",
        "ForTokenClassification",
        "token-classification head",
        "fine-tuned for token classification",
        "Token Classification",
        {"": "nats per labelled token"},
        ("logits",),
        metrics={"": ("precision", "recall", "f1", "accuracy")},
        recipe=f"{__name__}.recipe",
        labelled=True,
    ),
)
