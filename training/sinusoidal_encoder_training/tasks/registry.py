"""The tasks a model folder can be made for, one entry each: the Auto class that loads it, the head its model class
carries, what its loss is counted in, what the model card says, and what an ONNX export of it outputs. The model
card, the ONNX export, fill-mask, the pictures and the command lines ask this table; a new head is the model's class,
an entry here, and tests.

Importing this module imports nothing but the standard library (the command lines read it before any heavy import).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Task:
    """One task. `name` is its pipeline tag (and the value of `--task`); `head` the end of the name of the model
    class that carries it (`SinusoidalEncoderForMaskedLM` ends in "ForMaskedLM"; the bare encoder in "Model");
    `loss_units` what one unit of its loss is, by problem type ("" when it has one); `outputs` the outputs of its
    ONNX graph, empty when the export does not take it; `input_axes` the axes of its inputs (`input_ids` and
    `attention_mask`), each dynamic in the ONNX graph; `flags` the task-data flags of fine-tuning that only some
    tasks read (`configs.TaskDataConfig`, those marked `"task_flag"`) which this one reads: another task refuses
    them."""

    name: str
    auto_class: str
    head: str
    head_description: str
    card_summary: str
    card_title: str
    loss_units: dict[str, str]
    outputs: tuple[str, ...] = ()
    input_axes: tuple[str, ...] = ("batch", "sequence")
    recipe: str | None = None  # the module of this package that fine-tunes it (`finetune --task NAME`), if any
    flags: tuple[str, ...] = ()


TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task(
            "fill-mask",
            "AutoModelForMaskedLM",
            "ForMaskedLM",
            "masked-LM head",
            "pretrained by masked language modelling",
            "Fill-Mask",
            {"": "nats per masked token"},
            ("logits",),
        ),
        Task(
            "feature-extraction",
            "AutoModel",
            "Model",
            "encoder",
            "an encoder",
            "Feature Extraction",
            {},
            ("last_hidden_state",),
        ),
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
            recipe="classification",
            flags=("text_pair_column_name", "problem_type"),
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
            recipe="classification",
        ),
        Task(
            "question-answering",
            "AutoModelForQuestionAnswering",
            "ForQuestionAnswering",
            "question-answering head",
            "fine-tuned for extractive question answering",
            "Question Answering",
            {"": "nats per answer (the mean of its start and end)"},
            ("start_logits", "end_logits"),
            recipe="question_answering",
            flags=("doc_stride",),
        ),
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
            recipe="multiple_choice",
        ),
    )
}

EXPORTED = tuple(name for name, task in TASKS.items() if task.outputs)  # what the ONNX export takes
FINETUNED = tuple(name for name, task in TASKS.items() if task.recipe)  # what fine-tuning trains


def auto_class_of(task: str) -> type:
    """The Auto class of transformers that loads a folder of `task` (imports transformers)."""
    import transformers

    return getattr(transformers, TASKS[task].auto_class)


def reading(flag: str) -> list[str]:
    """The tasks that read the task-data flag `flag` (a field name), in the table's order."""
    return [name for name, task in TASKS.items() if flag in task.flags]


def task_of_architecture(architecture: str | None) -> str | None:
    """The task of the head a model class carries (config.json's `architectures`), by the end of its name; None for
    a class of no task here (or no class)."""
    if not architecture:
        return None
    for task in TASKS.values():
        if task.head != "Model" and architecture.endswith(task.head):
            return task.name
    if architecture.endswith("Model") and "For" not in architecture and not architecture.endswith("HeadModel"):
        return "feature-extraction"  # a bare encoder
    return None


def loss_unit(config: dict) -> str:
    """The unit of the loss a model folder was trained with, from its config (`architectures`, `problem_type`)."""
    task = TASKS.get(task_of_architecture((config.get("architectures") or [None])[0]) or "")
    units = task.loss_units if task else {}
    return units.get(config.get("problem_type") or "", units.get("", "per the training task"))
