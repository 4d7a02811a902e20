"""Fine-tuning for extractive question answering on SQuAD-format data: the recipe of the task "question-answering"
(its entry: this package's `__init__.py`). A row holds a `question`, a `context` and its `answers`
({"text": [...], "answer_start": [...]}, character offsets into the context; empty for a question the context does
not answer, as in SQuAD 2.0), as the SQuAD dataset and transformers' `run_qa.py` have them. A context longer than
`--max_length` is cut into overlapping windows (`--doc_stride` tokens of overlap), each a feature; the head predicts
the answer's first and last token in each (the first token, [CLS], where the window holds no answer). Evaluation
picks, for each question, the best span over its windows and scores it with SQuAD's exact match and F1."""

from __future__ import annotations

from typing import Any

import datasets
import numpy as np
import torch
from accelerate import Accelerator

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import FinetuningConfig
from sinusoidal_encoder_training.data.batches import BatchedRows, PaddingCollator
from sinusoidal_encoder_training.data.pipeline import derive_seed
from sinusoidal_encoder_training.evaluation.metrics import squad_scores
from sinusoidal_encoder_training.runs.even_batches import real_examples
from sinusoidal_encoder_training.runs.loop import TrainingTask, on_device
from sinusoidal_encoder_training.tasks.recipes import STAGE, Prepared, check_texts, draw_training_examples

QUESTION, CONTEXT, ANSWERS = "question", "context", "answers"
MAX_ANSWER_TOKENS = 30  # the longest answer evaluation picks, as run_qa.py
BEST = 20  # the starts and ends considered per window, as run_qa.py
INPUTS = ("input_ids", "attention_mask", "start_positions", "end_positions")


def check_rows(raw: datasets.DatasetDict) -> None:
    """A `UsageError` naming the split and row when the data is not SQuAD's: the three columns, text in every
    question and context, and answers whose text is found at its `answer_start` in the context."""
    for split in ("train", "validation"):
        columns = raw[split].column_names
        if not {QUESTION, CONTEXT, ANSWERS} <= set(columns):
            raise UsageError(
                f"question-answering data needs SQuAD's columns {QUESTION!r}, {CONTEXT!r} and {ANSWERS!r} "
                f"({{'text': [...], 'answer_start': [...]}}); the {split} split has {columns}."
            )
    check_texts(raw, [QUESTION, CONTEXT])
    for split in ("train", "validation"):
        for row, (context, answers) in enumerate(zip(raw[split][CONTEXT], raw[split][ANSWERS], strict=True), start=1):
            if not isinstance(answers, dict) or not {"text", "answer_start"} <= set(answers):
                raise UsageError(
                    f"The {split} split, row {row}: {ANSWERS!r} is not {{'text': [...], 'answer_start': [...]}}."
                )
            for text, start in zip(answers["text"], answers["answer_start"], strict=True):
                if context[start : start + len(text)] != text:
                    raise UsageError(
                        f"The {split} split, row {row}: the answer {text!r} is not at character {start} of the "
                        f"context (found {context[start : start + len(text)]!r}): fix its answer_start."
                    )


def features(batch, tokenizer, max_length: int, stride: int) -> dict[str, list]:
    """The windows of each row (question, then a stretch of context), with the answer's first and last token in each
    (0, the [CLS] token, where the window does not hold the whole answer), the row each came from, and the
    character offsets of its context tokens (None for the question and special tokens)."""
    encoded = tokenizer(
        batch[QUESTION],
        batch[CONTEXT],
        truncation="only_second",
        max_length=max_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    rows = encoded.pop("overflow_to_sample_mapping")
    starts, ends, offsets = [], [], []
    for index, offset in enumerate(encoded.pop("offset_mapping")):
        sequence = encoded.sequence_ids(index)
        context = [i for i, s in enumerate(sequence) if s == 1]
        offsets.append([tuple(o) if sequence[i] == 1 else None for i, o in enumerate(offset)])
        answers = batch[ANSWERS][rows[index]]
        start_token = end_token = 0
        if answers["answer_start"] and context:
            first, last = answers["answer_start"][0], answers["answer_start"][0] + len(answers["text"][0])
            if offset[context[0]][0] <= first and offset[context[-1]][1] >= last:
                start_token = next(i for i in context if offset[i][1] > first)
                end_token = next(i for i in reversed(context) if offset[i][0] < last)
        starts.append(start_token)
        ends.append(end_token)
    encoded["start_positions"], encoded["end_positions"] = starts, ends
    encoded["row"], encoded["offsets"] = list(rows), offsets
    return encoded


def best_answer(context: str, windows: list[tuple[np.ndarray, np.ndarray, list]]) -> str:
    """The answer text of the highest start + end score over a question's windows: starts and ends among each
    window's `BEST` highest, both in the context, the end not before the start, at most `MAX_ANSWER_TOKENS` tokens;
    "" when no span qualifies."""
    best, answer = -np.inf, ""
    for start_logits, end_logits, offsets in windows:
        for start in np.argsort(start_logits)[-BEST:]:
            for end in np.argsort(end_logits)[-BEST:]:
                if start >= len(offsets) or end >= len(offsets) or offsets[start] is None or offsets[end] is None:
                    continue
                if end < start or end - start + 1 > MAX_ANSWER_TOKENS:
                    continue
                score = start_logits[start] + end_logits[end]
                if score > best:
                    best, answer = score, context[offsets[start][0] : offsets[end][1]]
    return answer


class QuestionAnsweringTask(TrainingTask):
    """Extractive question answering: one loss unit per window (the mean of its start and end cross-entropies);
    evaluation scores each question's best span with SQuAD's exact match and F1."""

    name = STAGE

    def __init__(self, seed: int, generator: torch.Generator, windows: datasets.Dataset, rows: datasets.Dataset):
        self.seed = seed
        self.generator = generator
        self.windows = windows  # the evaluation windows, in the split's order: their row and offsets
        self.rows = rows  # the evaluation rows: context and answers

    def start_epoch(self, epoch: int) -> None:
        self.generator.manual_seed(derive_seed(self.seed, "data", epoch))

    def loss_units(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return on_device(batch["start_positions"].numel(), batch["start_positions"].device)

    def loss(self, model, batch, num_items_in_batch):
        inputs = {name: batch[name] for name in INPUTS}
        return model(**inputs, num_items_in_batch=num_items_in_batch).loss

    @torch.no_grad()
    def evaluate(self, model, loader, accelerator: Accelerator) -> dict[str, float]:
        """The loss over the evaluation windows, and exact match and F1 of each question's best span, gathered
        across processes (the windows accelerate repeats on the last batch counted once)."""
        model.eval()
        totals = torch.zeros(2, dtype=torch.float64, device=accelerator.device)  # loss, windows
        starts, ends = [], []
        for batch in loader:
            count = batch["start_positions"].shape[0]
            real = real_examples(accelerator, count)
            outputs = model(**{name: batch[name] for name in INPUTS}, num_items_in_batch=count)
            loss_sum = outputs.loss * count
            if real < count:  # the last batch: the loss of its real windows alone
                kept = {name: batch[name][:real] for name in INPUTS}
                loss_sum = self.loss(model, kept, real) * real if real else torch.zeros_like(loss_sum)
            totals += torch.stack([loss_sum.double(), on_device(float(real), totals.device, totals.dtype)])
            logits = torch.stack([outputs.start_logits, outputs.end_logits], dim=1)  # (B, 2, T)
            logits = accelerator.pad_across_processes(logits, dim=2, pad_index=-1e4)
            gathered = accelerator.gather_for_metrics(logits).float().cpu().numpy()  # (B', 2, T')
            starts += list(gathered[:, 0])
            ends += list(gathered[:, 1])
        loss, windows = accelerator.reduce(totals, reduction="sum").tolist()
        model.train()
        by_row: dict[int, list] = {}
        for index, (start, end) in enumerate(zip(starts, ends, strict=True)):
            window = self.windows[index if self.evaluation_order is None else self.evaluation_order[index]]
            by_row.setdefault(window["row"], []).append((start, end, window["offsets"]))
        predictions = [best_answer(row[CONTEXT], by_row.get(i, [])) for i, row in enumerate(self.rows)]
        references = [row[ANSWERS]["text"] for row in self.rows]
        scores = squad_scores(predictions, references)
        return {"eval_loss": loss / max(windows, 1.0), **{f"eval_{k}": v for k, v in scores.items()}}


def prepare(config: FinetuningConfig, raw: datasets.DatasetDict, tokenizer, model_config: Any) -> Prepared:
    """SQuAD-format rows, checked and cut into windows; the model config needs no labels."""
    raw = draw_training_examples(raw, config)
    check_rows(raw)
    if not tokenizer.is_fast:
        raise UsageError("question-answering needs a fast tokenizer (its offsets map tokens to the context).")

    def window(batch):
        return features(batch, tokenizer, config.max_length, config.doc_stride)

    encoded = raw.map(window, batched=True, remove_columns=raw["train"].column_names, desc="Tokenizing")
    evaluation = encoded["validation"]
    columns = ["input_ids", "attention_mask", "start_positions", "end_positions"]
    return Prepared(
        train=BatchedRows(encoded["train"].select_columns(columns)),
        validation=BatchedRows(evaluation.select_columns(columns)),
        collate=PaddingCollator(tokenizer, pad_to_multiple_of=config.pad_to_multiple_of),
        make_task=lambda generator: QuestionAnsweringTask(
            config.seed, generator, evaluation.select_columns(["row", "offsets"]), raw["validation"]
        ),
        header=[
            "Task = question-answering (extractive spans)",
            f"Training questions = {len(raw['train']):,} in {len(encoded['train']):,} windows, evaluation "
            f"questions = {len(raw['validation']):,} in {len(evaluation):,} windows",
        ],
        problem="question_answering",
        labels="the span of the context that answers the question",
        example=None,
        uses="extractive question answering: the span of a context that answers a question.",
    )
