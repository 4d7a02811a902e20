"""The task table: every task a model folder can be made for, gathered from the task packages of this folder. A
task package (`tasks/NAME/`) declares its entries in its `__init__.py` (`TASKS`, a tuple of `task.Task`: the Auto
class, the head, the loss unit, the card's text, the ONNX outputs, and the task-data flags it reads) and keeps its
fine-tuning recipe apart, in `tasks/NAME/recipe.py`. The model card, the ONNX export, fill-mask, the evaluate command,
the pictures and the command lines ask this table; fine-tuning imports a task's recipe by the name its entry gives.
A new head is its model class, its `AUTO_MAP` line and its task package: nothing here names a task.

Why a package per task, the entries apart from the recipe: the command lines read the table (`--task`'s choices,
the task-data flags and their checks) before torch, transformers or datasets are imported (`--help` and a bad value
answer at once), and a recipe needs all three. The `__init__.py` of a task package imports nothing but the standard
library and `task`, so importing this table stays light; the recipe imports what it needs at its top, as any module.
The packages are found with `pkgutil` (every package of this folder is a task package; the modules beside them,
`task`, `registry`, `recipes`, are the machinery), so that no list here has to grow.

Importing this module imports nothing but the standard library and the task packages' `__init__.py`.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

from sinusoidal_encoder_training.tasks.task import Task


def discover_tasks() -> dict[str, Task]:
    """The entries of every task package of this folder: the tasks without a recipe (the pretrained model's own:
    fill-mask, feature-extraction) first, then the fine-tuned ones, each package in alphabetical order and its
    entries in their order. Two packages declaring one task name is an error of the packages."""
    found: dict[str, Task] = {}
    for module in pkgutil.iter_modules([os.path.dirname(__file__)]):
        if not module.ispkg:
            continue
        for task in importlib.import_module(f"{__package__}.{module.name}").TASKS:
            if task.name in found:
                raise ValueError(f"Two task packages declare the task {task.name!r}; one is {module.name!r}.")
            found[task.name] = task
    return {task.name: task for task in sorted(found.values(), key=lambda task: task.recipe is not None)}


TASKS: dict[str, Task] = discover_tasks()

EXPORTED = tuple(name for name, task in TASKS.items() if task.outputs)  # what the ONNX export takes
FINETUNED = tuple(name for name, task in TASKS.items() if task.recipe)  # what fine-tuning trains
LABELLED = tuple(name for name, task in TASKS.items() if task.labelled)  # whose head is trained for a label set
# the task-data flags only some tasks read: each task's `flags` class, once, in the table's order
TASK_FLAGS = tuple(dict.fromkeys(task.flags for task in TASKS.values() if task.flags))


def auto_class_of(task: str) -> type:
    """The Auto class that loads a folder of `task`: transformers' own, or the model package's for a head
    transformers has none for (imports transformers and the model package)."""
    import sinusoidal_encoder

    return sinusoidal_encoder.auto_class(TASKS[task].auto_class)


def reading(flag: str) -> list[str]:
    """The tasks that read the task-data flag `flag` (a field name), in the table's order."""
    return [name for name, task in TASKS.items() if flag in task.flag_names]


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
