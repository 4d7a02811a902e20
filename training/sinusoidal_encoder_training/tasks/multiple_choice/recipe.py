"""Fine-tuning for multiple choice on SWAG-format data: the recipe of the task "multiple-choice" (its entry: this
package's `__init__.py`). A row holds a context (`sent1`), the start of its continuation (`sent2`), the candidate
endings (`ending0`, `ending1`, ...) and the index of the right one (`label`), as the SWAG dataset and transformers'
`run_swag.py` have them. Each choice is the pair (`sent1`, `sent2 + " " + ending`); the head scores every choice of a
row and the loss is the cross-entropy over them, one unit per row; the metric is the accuracy."""

from __future__ import annotations

import re
from typing import Any

import datasets
import torch
from accelerate import Accelerator

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import FinetuningConfig
from sinusoidal_encoder_training.data.batches import BatchedRows, PaddingCollator
from sinusoidal_encoder_training.data.pipeline import derive_seed
from sinusoidal_encoder_training.runs.even_batches import real_examples
from sinusoidal_encoder_training.runs.loop import TrainingTask, on_device
from sinusoidal_encoder_training.tasks.recipes import (
    STAGE,
    Prepared,
    check_texts,
    draw_training_examples,
    model_inputs,
)

CONTEXT, START = "sent1", "sent2"


def ending_columns(columns: list[str]) -> list[str]:
    """`ending0`, `ending1`, ... in order: the candidate endings of a row."""
    found = sorted((int(m.group(1)), name) for name in columns if (m := re.fullmatch(r"ending(\d+)", name)))
    return [name for _, name in found]


def check_columns(raw: datasets.DatasetDict, label: str) -> list[str]:
    """The ending columns, or a `UsageError` naming what the data lacks (SWAG's columns, and at least two endings,
    the same in both splits), a label that is not the index of an ending, or a missing text."""
    columns = raw["train"].column_names
    endings = ending_columns(columns)
    missing = [name for name in (CONTEXT, START, label) if name not in columns]
    if missing or len(endings) < 2:
        raise UsageError(
            f"multiple-choice data needs SWAG's columns {CONTEXT!r}, {START!r}, 'ending0', 'ending1', ... and "
            f"{label!r} (the index of the right ending); the training split has {columns}."
        )
    for split in ("train", "validation"):
        if ending_columns(raw[split].column_names) != endings or label not in raw[split].column_names:
            raise UsageError(f"The {split} split has other columns than the training split's ({columns}).")
        for row, value in enumerate(raw[split][label], start=1):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(endings):
                raise UsageError(
                    f"The {split} split, row {row}: {label!r} is {value!r}, not the index of one of its "
                    f"{len(endings)} endings (0 to {len(endings) - 1})."
                )
    check_texts(raw, [CONTEXT, START, *endings])
    return endings


def encode(raw: datasets.DatasetDict, tokenizer, max_length: int, endings: list[str], label: str):
    """Every row as its choices `(num_choices, tokens)`: the context paired with the start and each ending,
    truncated to `max_length` tokens (the longer of the two first), and its label."""

    def rows(batch):
        count = len(batch[CONTEXT])
        firsts = [context for context in batch[CONTEXT] for _ in endings]
        seconds = [f"{start} {batch[ending][i]}" for i, start in enumerate(batch[START]) for ending in endings]
        encoded = tokenizer(firsts, seconds, truncation=True, max_length=max_length)
        choices = len(endings)
        grouped = {
            key: [values[i * choices : (i + 1) * choices] for i in range(count)] for key, values in encoded.items()
        }
        grouped["labels"] = batch[label]
        return grouped

    return raw.map(rows, batched=True, remove_columns=raw["train"].column_names, desc="Tokenizing")


class MultipleChoiceTask(TrainingTask):
    """Multiple choice: one loss unit per row; accuracy over the evaluation split."""

    name = STAGE

    def __init__(self, seed: int, generator: torch.Generator):
        self.seed = seed
        self.generator = generator

    def start_epoch(self, epoch: int) -> None:
        self.generator.manual_seed(derive_seed(self.seed, "data", epoch))

    def loss_units(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return on_device(batch["labels"].numel(), batch["labels"].device)

    def loss(self, model, batch, num_items_in_batch):
        return model(**model_inputs(batch), num_items_in_batch=num_items_in_batch).loss

    @torch.no_grad()
    def evaluate(self, model, loader, accelerator: Accelerator) -> dict[str, float]:
        """Loss and accuracy over the evaluation split's rows, summed across processes (the rows accelerate repeats
        on the last batch counted once)."""
        model.eval()
        totals = torch.zeros(3, dtype=torch.float64, device=accelerator.device)  # loss, rows, right
        for batch in loader:
            rows = batch["labels"].shape[0]
            real = real_examples(accelerator, rows)
            outputs = model(**model_inputs(batch), num_items_in_batch=rows)
            loss_sum = outputs.loss * rows
            if real < rows:  # the last batch: the loss of its real rows alone
                kept = {key: value[:real] for key, value in batch.items()}
                loss_sum = self.loss(model, kept, real) * real if real else torch.zeros_like(loss_sum)
            right = (outputs.logits[:real].argmax(-1) == batch["labels"][:real]).sum()
            totals += torch.stack(
                [loss_sum.double(), on_device(float(real), totals.device, totals.dtype), right.double()]
            )
        loss, rows, right = accelerator.reduce(totals, reduction="sum").tolist()
        model.train()
        return {"eval_loss": loss / max(rows, 1.0), "eval_accuracy": right / max(rows, 1.0)}


def prepare(config: FinetuningConfig, raw: datasets.DatasetDict, tokenizer, model_config: Any) -> Prepared:
    """SWAG-format rows, checked and tokenised; the model config needs no labels (the head scores each choice)."""
    label = config.label_column_name or "label"
    raw = draw_training_examples(raw, config)
    endings = check_columns(raw, label)
    encoded = encode(raw, tokenizer, config.max_length, endings, label)
    return Prepared(
        train=BatchedRows(encoded["train"]),
        validation=BatchedRows(encoded["validation"]),
        collate=PaddingCollator(tokenizer, pad_to_multiple_of=config.pad_to_multiple_of),
        make_task=lambda generator: MultipleChoiceTask(config.seed, generator),
        header=[
            f"Task = multiple-choice, {len(endings)} endings per row",
            f"Training rows = {len(encoded['train']):,}, evaluation rows = {len(encoded['validation']):,}",
        ],
        problem="multiple_choice",
        labels=f"the index of the right one of {len(endings)} endings",
        example=None,
        uses=f"multiple choice: which of {len(endings)} endings follows a context best.",
    )
