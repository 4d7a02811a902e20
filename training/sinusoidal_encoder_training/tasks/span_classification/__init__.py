"""Span classification (span categorisation, as spaCy's spancat): labelled stretches of a text, which may nest or
overlap, a span with several labels or none; for nested entities, and for phrases that are not named entities at
all (claims, quotes, skills in a job advert), which one tag per token cannot hold. Its entry and the flag only it
reads (`--max_span_width`); the recipe is `recipe.py`.

transformers has no Auto class for this head: `AutoModelForSpanClassification` is the model package's own
(`sinusoidal_encoder.auto_class`), made from the config's `AUTO_MAP` line.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.tasks.task import Task


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpanClassificationFlags:
    """The task-data flags of span-classification."""

    _argument_group_name = "span-classification data"

    max_span_width: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "span-classification: the longest span, in tokens, the head scores (every span of up to this "
            "many tokens is a candidate); a labelled span longer than this is refused. Default: the model's "
            "`max_span_width` (8 for a model not fine-tuned for spans)."
        },
    )


def check(config: Any) -> None:
    """A span is at least one token and fits in an input."""
    if config.max_span_width is not None and not 1 <= config.max_span_width <= config.max_length:
        raise UsageError(
            f"--max_span_width must be at least 1 and at most --max_length ({config.max_length}), got "
            f"{config.max_span_width}."
        )


TASKS = (
    Task(
        "span-classification",
        "AutoModelForSpanClassification",
        "ForSpanClassification",
        "span-classification head",
        "fine-tuned for span classification (labelled spans, nested or overlapping)",
        "Span Classification",
        {"": "nats per candidate span and label"},
        ("logits",),
        metrics={"": ("precision", "recall", "f1")},
        recipe=f"{__name__}.recipe",
        labelled=True,
        flags=SpanClassificationFlags,
        check=check,
    ),
)
