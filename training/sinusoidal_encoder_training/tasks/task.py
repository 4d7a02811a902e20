"""What a task module declares about its task (`Task`), read by the task table (`registry`) and through it by the
model card, the ONNX export, fill-mask, the evaluate command, the pictures and the command lines.

Importing this module imports nothing but the standard library: a task package declares its entries with it in its
`__init__.py`, which the command lines read before any heavy import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

LOWER_IS_BETTER = frozenset({"loss", "perplexity", "mse"})  # the evaluations' figures that fall as a model improves


def greater_is_better(metric: str) -> bool:
    """Whether a higher value of the evaluation's figure `metric` (`eval_accuracy` or `accuracy`) is better."""
    return metric.removeprefix("eval_") not in LOWER_IS_BETTER


@dataclasses.dataclass(frozen=True)
class Task:
    """One task. `name` is its pipeline tag (and the value of `--task`); `auto_class` the name of the Auto class that
    loads a folder of it (transformers' own, or, for a head transformers has no Auto class for, the one the model
    package makes for its config's `AUTO_MAP` entry: `sinusoidal_encoder.auto_class`); `head` the end of the name of
    the model class that carries it (`SinusoidalEncoderForMaskedLM` ends in "ForMaskedLM"; the bare encoder in
    "Model"); `head_description` and `card_summary`, `card_title` what refusals and the model card call it;
    `loss_units` what one unit of its loss is, by problem type ("" when it has one); `outputs` the outputs of its
    ONNX graph, empty when the export does not take it; `input_axes` the axes of its inputs (`input_ids` and
    `attention_mask`), each dynamic in the ONNX graph.

    Fine-tuning: `recipe` the module whose `prepare(config, raw, tokenizer, model_config)` fine-tunes it (None: not
    fine-tuned); `labelled` whether its head is trained for a set of labels (a folder's head of other labels is then
    refused, `tasks.recipes.plan_head`); `flags` the frozen, keyword-only dataclass of the task-data flags only it
    (or its family) reads, each field a flag with its default and help (`configs.TaskDataConfig` is composed of
    them; another task refuses them); `check(config)` a check of those values against the rest of the
    configuration, raising a one-line `UsageError`."""

    name: str
    auto_class: str
    head: str
    head_description: str
    card_summary: str
    card_title: str
    loss_units: dict[str, str]
    outputs: tuple[str, ...] = ()
    input_axes: tuple[str, ...] = ("batch", "sequence")
    metrics: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    recipe: str | None = None
    labelled: bool = False
    flags: type | None = None
    check: Callable[[Any], None] | None = None

    def metric_names(self, problem: str | None = None) -> tuple[str, ...]:
        """The figures an evaluation of this task reports for `problem` (None: for any), the loss first, without
        the `eval_` of their keys."""
        kinds = self.metrics.values() if problem is None else [self.metrics.get(problem, self.metrics.get("", ()))]
        return ("loss", *dict.fromkeys(name for names in kinds for name in names))

    @property
    def flag_names(self) -> tuple[str, ...]:
        """The task-data flags this task reads beyond those every task reads (its `flags`' fields)."""
        return tuple(field.name for field in dataclasses.fields(self.flags)) if self.flags else ()
