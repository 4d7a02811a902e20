"""What every fine-tuning recipe gives and uses (a recipe: the `recipe` module of a task package, `tasks/NAME/`):
what it prepares (`Prepared`), the one rule for the head a folder already has (`plan_head`), and the checks and
inputs they share. The fine-tuning stage (`stages.finetuning`) imports the recipes and this module; the recipes import
this module, never the stage: imports run one way, from the stage down.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import datasets
import torch

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import FinetuningConfig
from sinusoidal_encoder_training.runs.loop import TrainingTask
from sinusoidal_encoder_training.tasks.registry import FINETUNED, LABELLED, task_of_architecture

STAGE = "fine-tuning"  # the stage's name: in the run folder's settings and the trackers (the tasks' `name`)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a task's recipe (`prepare(config, raw, tokenizer, model_config)` of the module its `tasks.TASKS` entry
    names) makes of the raw splits (the whole training split: the recipe draws --max_train_samples rows of it with
    `draw_training_examples`, after reading its labels): the tokenised splits, their collator, the task of the
    training loop (made from the data order's generator), the lines that head the run's log, the problem type, how
    the card states the labels, its pipeline example and its intended uses, and scores to add after training (the
    baselines), computed on the main process from the final evaluation."""

    train: torch.utils.data.Dataset  # a tokenised split, or a view of one (`data.BatchedRows`)
    validation: torch.utils.data.Dataset
    collate: Callable
    make_task: Callable[[torch.Generator], TrainingTask]
    header: list[str]
    problem: str
    labels: str
    example: str | None  # the text of the card's pipeline example; None: the task has no pipeline
    uses: str
    extra_scores: Callable[[dict[str, float]], dict[str, float]] | None = None


class OtherLabels(UsageError):
    """The data's labels are not those the folder's head was trained for: what differs, and what to do (which
    depends on the command)."""

    def __init__(self, what: str, advice: str):
        super().__init__(f"{what}: {advice}")
        self.what = what


@dataclasses.dataclass(frozen=True)
class HeadPlan:
    """What a fine-tune does with the head of --model_name_or_path (`plan_head`): the labels of the run, in the
    order of the head's outputs, and, when a new head starts on the folder's encoder instead of the folder's own,
    the one line that says so (`new_head`); `fresh`: the folder's head weights must not be loaded."""

    labels: list[str] | None
    new_head: str | None = None
    fresh: bool = False


def folder_labels(model_config: Any) -> list[str]:
    """The label names of the head a model config describes, in the order of its outputs."""
    return [str(model_config.id2label[i]) for i in range(model_config.num_labels)]


def describe_labels(problem: str | None, labels: list[str] | None) -> str:
    """The labels of a head as a line names them: "2 labels ['neg', 'pos']", "a regression target (one number)"."""
    if problem == "regression" or labels is None:
        return "a regression target (one number)"
    shown = repr(labels) if len(labels) <= 8 else repr(labels[:8])[:-1] + ", ...]"
    kind = " (multi-label)" if problem == "multi_label_classification" else ""
    return f"{len(labels)} labels {shown}{kind}"


def head_labels(config: FinetuningConfig, folder_config: Any) -> list[str] | None:
    """The label names of the folder's head when it is a trained head of --task that has labels (a run keeps it
    for data of those labels, or of some of them: `same_head`), else None. The recipes' label checks take them as
    known: a file without one of the head's labels, or of one of them only, is still data for that head."""
    if config.task not in LABELLED or task_of_architecture(first_architecture(folder_config)) != config.task:
        return None
    return folder_labels(folder_config)


def first_architecture(folder_config: Any) -> str | None:
    """The class a model config names first in `architectures` (None when it names none)."""
    return next(iter(getattr(folder_config, "architectures", None) or []), None)


def same_head(folder_config: Any, problem: str | None, labels: list[str] | None) -> bool:
    """Whether the folder's head was trained for the run's labels: each of the data's labels is one of the head's
    (each keeps its output, mapped by name; a label of the head the data lacks keeps its output too), or one output
    for regression; the same problem type where both say."""
    theirs_problem = getattr(folder_config, "problem_type", None)
    if theirs_problem is not None and problem is not None and theirs_problem != problem:
        return False
    if problem == "regression" or labels is None:
        return folder_config.num_labels == 1
    return set(labels) <= set(folder_labels(folder_config))


def plan_head(config: FinetuningConfig, folder_config: Any, problem: str | None, labels: list[str] | None) -> HeadPlan:
    """The one rule for the head in --model_name_or_path (config.json's `architectures` and labels), before the
    data is tokenised: a head trained for this task and for the run's labels (`problem`, `labels`; None for a task
    of none), or for more (a test file without one of its classes), is fine-tuned further or scored with all of its
    outputs, mapped to the labels by name, never by index; a head of another task (a classifier for question
    answering, a token classifier for sequences) is never used: a new head starts on the encoder, with one line
    saying so; a head of this task that lacks one of the data's labels (or of another problem type) is refused,
    naming both label sets, unless `--ignore_mismatched_sizes`, which starts a new head (one line). A folder with
    no task head (a pretrained masked-LM folder, the bare encoder) gets a new head, as always."""
    source = config.model_name_or_path
    architecture = first_architecture(folder_config)
    own = task_of_architecture(architecture)
    if own not in FINETUNED:
        return HeadPlan(labels)
    if own != config.task:
        line = (
            f"{config.model_flag} {source!r} has a {own} head ({architecture}), trained for another task: a new "
            f"{config.task} head starts on its encoder."
        )
        return HeadPlan(labels, line, fresh=True)
    if config.task not in LABELLED:
        return HeadPlan(labels)
    if same_head(folder_config, problem, labels):  # the run takes the head's order of its labels
        return HeadPlan(None if labels is None else folder_labels(folder_config))
    theirs = describe_labels(getattr(folder_config, "problem_type", None), folder_labels(folder_config))
    ours = describe_labels(problem, labels)
    if not config.ignore_mismatched_sizes:
        raise OtherLabels(
            f"{config.model_flag} {source!r} has a {config.task} head for {theirs}, but the data has {ours}",
            "pass --ignore_mismatched_sizes to start a new head on its encoder, or give data with the head's labels.",
        )
    line = (
        f"{config.model_flag} {source!r} has a {config.task} head for {theirs}: a new head for {ours} starts on "
        "its encoder (--ignore_mismatched_sizes)."
    )
    return HeadPlan(labels, line, fresh=True)


def run_labels(config: FinetuningConfig, model_config: Any) -> tuple[str | None, list[str] | None]:
    """The problem type and labels a recipe set on the model config (None, None for a task without labels)."""
    if config.task not in LABELLED:
        return None, None
    problem = model_config.problem_type
    return problem, None if problem == "regression" else folder_labels(model_config)


def draw_rows(split: datasets.Dataset, limit: int | None, seed: int) -> datasets.Dataset:
    """At most `limit` rows of `split` drawn at random, seeded by `seed` (None: the whole split): what
    --max_train_samples and --max_eval_samples keep."""
    if limit is None or limit >= len(split):
        return split
    return split.shuffle(seed=seed).select(range(limit))


def draw_training_examples(raw: datasets.DatasetDict, config: FinetuningConfig) -> datasets.DatasetDict:
    """The splits with the training split cut to --max_train_samples rows (`draw_rows`). A recipe draws once it has
    read its label space from the whole training split, as transformers' examples do: a small draw neither changes
    the head's labels nor leaves a validation label unseen."""
    drawn = datasets.DatasetDict(raw)
    drawn["train"] = draw_rows(raw["train"], config.max_train_samples, config.seed)
    return drawn


def check_texts(raw: datasets.DatasetDict, columns: Sequence[str]) -> None:
    """A `UsageError` naming the split, the row (its number and other values: a split drawn from the training file
    is shuffled) and the column when a text column of the data holds something other than text: a missing value
    (null) reached the tokenizer as a TypeError, or, formatted into a choice, as the word "None"."""
    for split in ("train", "validation"):
        for column in columns:
            for row, value in enumerate(raw[split][column], start=1):
                if not isinstance(value, str):
                    others = {name: held for name, held in raw[split][row - 1].items() if name != column}
                    shown = repr(others) if len(repr(others)) <= 80 else repr(others)[:77] + "..."
                    raise UsageError(
                        f"The {split} split, row {row} {shown}: {column!r} is {value!r}, not text: give every row a "
                        'text ("" for none), or remove the row.'
                    )


def model_inputs(batch: dict[str, torch.Tensor], labels: bool = True) -> dict[str, torch.Tensor]:
    """What a batch gives the model: ids, mask, and the labels (unless `labels` is False)."""
    names = ("input_ids", "attention_mask", "labels") if labels else ("input_ids", "attention_mask")
    return {name: batch[name] for name in names if name in batch}
