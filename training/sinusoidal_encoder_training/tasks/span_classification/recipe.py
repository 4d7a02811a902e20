"""Fine-tuning for span classification: the recipe of the task "span-classification" (its entry: this package's
`__init__.py`). A row holds a text (`text`, or --text_column_name) and its labelled spans (`spans`, or
--label_column_name): a list of `{"start": ..., "end": ..., "label": ...}`, character offsets into the text (end
exclusive), as spaCy's and Prodigy's span data has them; spans may nest or overlap, and a row may have none.

Every span of up to --max_span_width tokens of the text is a candidate; the head scores each for each label (a
sigmoid, so a span may carry several labels or none), and the loss is the binary cross-entropy of every candidate
and label, one unit each. A labelled span is aligned to the tokens it overlaps; one cut off by --max_length is left
out of training and evaluation (the log says how many). The metrics: micro precision, recall and F1 of the predicted
spans (score above 0) against the labelled ones, by tokens and label.
"""

from __future__ import annotations

from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import torch
from accelerate import Accelerator

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import FinetuningConfig
from sinusoidal_encoder_training.data.batches import BatchedRows, PaddingCollator
from sinusoidal_encoder_training.data.pipeline import derive_seed
from sinusoidal_encoder_training.runs.even_batches import real_examples
from sinusoidal_encoder_training.runs.loop import TrainingTask
from sinusoidal_encoder_training.tasks.recipes import (
    STAGE,
    Prepared,
    check_texts,
    draw_training_examples,
    head_labels,
    model_inputs,
    plan_head,
)

TEXT, SPANS = "text", "spans"  # the default columns
# the tokenised rows: the text's first and last token, and each labelled span as (first token, width - 1, label id)
FEATURES = datasets.Features(
    {
        "input_ids": datasets.List(datasets.Value("int64")),
        "attention_mask": datasets.List(datasets.Value("int64")),
        "text_tokens": datasets.List(datasets.Value("int64")),
        "spans": datasets.List(datasets.List(datasets.Value("int64"))),
    }
)


def columns(raw: datasets.DatasetDict, config: FinetuningConfig) -> tuple[str, str]:
    """The text and spans columns, or a `UsageError` naming the flag that names them."""
    text, spans = config.text_column_name or TEXT, config.label_column_name or SPANS
    for split in ("train", "validation"):
        found = raw[split].column_names
        for name, flag in ((text, "--text_column_name"), (spans, "--label_column_name")):
            if name not in found:
                raise UsageError(
                    f"span-classification data needs a text column and a spans column of "
                    f"[{{'start': ..., 'end': ..., 'label': ...}}]: the {split} split has no column {name!r} "
                    f"(columns: {found}); name it with {flag}."
                )
    return text, spans


def well_formed(span: Any, text: str) -> bool:
    """Whether `span` is `{"start", "end", "label"}`: whole-number offsets within `text`, start before end, and a
    label."""
    if not isinstance(span, dict):
        return False
    start, end, label = span.get("start"), span.get("end"), span.get("label")
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in (start, end)):
        return False
    return 0 <= start < end <= len(text) and isinstance(label, str) and bool(label)


def check_spans(raw: datasets.DatasetDict, text_col: str, spans_col: str, known: list[str] | None = None) -> list[str]:
    """The label names of the training split, in sorted order, or a `UsageError` naming the split and row of a span
    that is not `{"start", "end", "label"}` within its text, or of a label the training split never shows and the
    folder's trained head does not know either (`known`, `head_labels`)."""
    check_texts(raw, [text_col])
    labels: dict[str, set[str]] = {}
    for split in ("train", "validation"):
        seen = labels.setdefault(split, set())
        for row, (text, spans) in enumerate(zip(raw[split][text_col], raw[split][spans_col], strict=True), start=1):
            for span in spans if isinstance(spans, list) else [spans]:
                if not well_formed(span, text):
                    raise UsageError(
                        f"The {split} split, row {row}: {spans_col!r} holds {span!r}: give a list of spans "
                        f"{{'start': ..., 'end': ..., 'label': ...}}, character offsets with 0 <= start < end <= "
                        f"{len(text)} (the text's length) and a label."
                    )
                seen.add(span["label"])
    if not labels["train"]:
        raise UsageError(f"The training split has no labelled span in {spans_col!r}: nothing to learn.")
    unseen = labels["validation"] - labels["train"] - set(known or ())
    if unseen:
        raise UsageError(
            f"The validation split has span labels the training split never shows: {sorted(unseen)[:10]}. A model "
            "cannot learn them; fix the data or its split."
        )
    return sorted(labels["train"])


def encode(
    raw: datasets.DatasetDict,
    tokenizer,
    config: FinetuningConfig,
    columns: tuple[str, str],
    label_names: list[str],
    max_span_width: int,
) -> tuple[datasets.DatasetDict, dict[str, int]]:
    """The rows tokenised (truncated to --max_length), each labelled span as its tokens, and how many spans of each
    split --max_length cut off; a `UsageError` for a span longer than `max_span_width` tokens."""
    text_col, spans_col = columns
    index = {name: i for i, name in enumerate(label_names)}
    cut: dict[str, int] = {}

    def rows(batch, split):
        encoded = tokenizer(
            batch[text_col],
            truncation=True,
            max_length=config.max_length,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
        )
        text_tokens, all_spans = [], []
        for offsets, special, text, spans in zip(
            encoded["offset_mapping"], encoded["special_tokens_mask"], batch[text_col], batch[spans_col], strict=True
        ):
            kept = [i for i, is_special in enumerate(special) if not is_special and offsets[i][1] > offsets[i][0]]
            text_tokens.append([kept[0], kept[-1]] if kept else [1, 0])  # no token of text: no candidate
            found = []
            for span in spans:
                inside = [i for i in kept if offsets[i][1] > span["start"] and offsets[i][0] < span["end"]]
                if not inside or offsets[kept[-1]][1] < span["end"]:  # cut off by --max_length
                    cut[split] = cut.get(split, 0) + 1
                    continue
                width = inside[-1] - inside[0] + 1
                if width > max_span_width:
                    raise UsageError(
                        f"The {split} split: the span {text[span['start'] : span['end']]!r} ({span['label']}) is "
                        f"{width} tokens, more than --max_span_width {max_span_width}: raise "
                        "--max_span_width (or leave the span out)."
                    )
                found.append([inside[0], width - 1, index[span["label"]]])
            all_spans.append(found)
        return {
            "input_ids": encoded["input_ids"],
            "attention_mask": encoded["attention_mask"],
            "text_tokens": text_tokens,
            "spans": all_spans,
        }

    encoded = datasets.DatasetDict(
        {
            split: raw[split].map(
                rows,
                batched=True,
                fn_kwargs={"split": split},
                remove_columns=raw[split].column_names,
                features=FEATURES,
                desc="Tokenizing",
            )
            for split in ("train", "validation")
        }
    )
    return encoded, cut


class SpanCollator:
    """The padded ids and mask of a batch (`PaddingCollator`), and the labels of every candidate span: `(batch,
    tokens, max_span_width, labels)`, 1 where a labelled span has the label, 0 elsewhere among the candidates (the
    spans within the text's tokens), -100 for the rest (special tokens, padding, past the text). For the whole batch
    at once, from the Arrow columns: no Python object per row or span."""

    def __init__(self, tokenizer, max_span_width: int, num_labels: int, pad_to_multiple_of: int | None = None):
        self.padding = PaddingCollator(tokenizer, pad_to_multiple_of=pad_to_multiple_of)
        self.width = max_span_width
        self.num_labels = num_labels

    def __call__(self, rows: pa.Table | list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
        batch = self.padding(table.select(["input_ids", "attention_mask"]))
        size, length = batch["input_ids"].shape
        shift = torch.zeros(size, dtype=torch.long)  # (B,): tokens moved right by left padding
        if self.padding.left:
            shift = length - _ints(table.column("input_ids").combine_chunks().value_lengths())
        bounds = _ints(table.column("text_tokens").combine_chunks().flatten()).view(size, 2) + shift[:, None]  # (B, 2)
        starts = torch.arange(length)  # (T,)
        ends = starts[:, None] + torch.arange(self.width)  # (T, W): the last token of each span
        first, last = bounds[:, 0, None, None], bounds[:, 1, None, None]  # (B, 1, 1)
        candidate = (starts[None, :, None] >= first) & (ends[None] <= last)  # (B, T, W)
        labels = torch.where(candidate, 0.0, -100.0)[..., None].repeat(1, 1, 1, self.num_labels)  # (B, T, W, L)
        # a list of (first token, width - 1, label) per row; typed, for rows given as lists with no span at all
        spans = table.column("spans").combine_chunks().cast(pa.list_(pa.list_(pa.int64())))
        row = _ints(pc.list_parent_indices(spans))  # (S,): the row of each span
        start, width, label = _ints(spans.flatten().flatten()).view(-1, 3).T  # (S,) each
        labels[row, start + shift[row], width, label] = 1.0
        batch["labels"] = labels
        return batch


def _ints(array: pa.Array) -> torch.Tensor:
    """An Arrow array of integers (no nulls) as an int64 tensor."""
    return torch.from_numpy(array.to_numpy(zero_copy_only=False).astype("int64", copy=True))


class SpanClassificationTask(TrainingTask):
    """Span classification: one loss unit per candidate span and label; micro precision, recall and F1 of the
    predicted spans."""

    name = STAGE

    def __init__(self, seed: int, generator: torch.Generator):
        self.seed = seed
        self.generator = generator

    def start_epoch(self, epoch: int) -> None:
        self.generator.manual_seed(derive_seed(self.seed, "data", epoch))

    def loss_units(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return (batch["labels"] != -100).sum()

    def loss(self, model, batch, num_items_in_batch):
        return model(**model_inputs(batch), num_items_in_batch=num_items_in_batch).loss

    @torch.no_grad()
    def evaluate(self, model, loader, accelerator: Accelerator) -> dict[str, float]:
        """The loss over the evaluation rows, and the spans predicted (score above 0) against the labelled ones,
        summed across processes (the rows accelerate repeats on the last batch counted once)."""
        model.eval()
        totals = torch.zeros(5, dtype=torch.float64, device=accelerator.device)  # loss, units, right, predicted, gold
        for batch in loader:
            rows = batch["labels"].shape[0]
            real = real_examples(accelerator, rows)
            units = self.loss_units(batch)
            outputs = model(**model_inputs(batch), num_items_in_batch=units.clamp(min=1))
            loss_sum = outputs.loss * units.clamp(min=1)
            if real < rows:  # the last batch: the loss of its real rows alone
                kept = {key: value[:real] for key, value in batch.items()}
                units = self.loss_units(kept)
                loss_sum = self.loss(model, kept, units.clamp(min=1)) * units.clamp(min=1) if real else units.double()
            labels = batch["labels"][:real]
            predicted = (outputs.logits[:real] > 0) & (labels != -100)
            gold = labels == 1
            counts = [loss_sum, units, (predicted & gold).sum(), predicted.sum(), gold.sum()]
            totals += torch.stack([count.double() for count in counts])
        loss, units, right, predicted, gold = accelerator.reduce(totals, reduction="sum").tolist()
        model.train()
        precision = right / predicted if predicted else 0.0
        recall = right / gold if gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"eval_loss": loss / max(units, 1.0), "eval_precision": precision, "eval_recall": recall, "eval_f1": f1}


def prepare(config: FinetuningConfig, raw: datasets.DatasetDict, tokenizer, model_config: Any) -> Prepared:
    """The rows and their spans checked, the labels set on the model config (and --max_span_width, when given), the
    texts tokenised with each span as its tokens, and what the loop and the card need."""
    text_col, spans_col = columns(raw, config)
    label_names = check_spans(raw, text_col, spans_col, head_labels(config, model_config))
    raw = draw_training_examples(raw, config)  # after the label space: a draw never changes it
    if not tokenizer.is_fast:
        raise UsageError("span-classification needs a fast tokenizer (its offsets map the spans to tokens).")
    # the folder's head: kept for its labels or some of them (in its order), refused or replaced for others
    label_names = plan_head(config, model_config, None, label_names).labels
    if config.max_span_width is not None:  # else the model's: 8, or what the folder was fine-tuned with
        model_config.max_span_width = config.max_span_width
    width = model_config.max_span_width
    encoded, cut = encode(raw, tokenizer, config, (text_col, spans_col), label_names, width)
    model_config.num_labels = len(label_names)
    model_config.id2label = dict(enumerate(label_names))
    model_config.label2id = {name: i for i, name in enumerate(label_names)}
    model_config.problem_type = None
    header = [
        f"Task = span-classification, {len(label_names)} label(s) {label_names}, spans of up to {width} tokens",
        f"Training rows = {len(encoded['train']):,}, evaluation rows = {len(encoded['validation']):,}",
    ]
    if cut:
        header.append(
            "Spans cut off by --max_length, left out: "
            + ", ".join(f"{cut.get(split, 0):,} ({split})" for split in ("train", "validation"))
        )
    labels = ", ".join(label_names)
    return Prepared(
        train=BatchedRows(encoded["train"]),
        validation=BatchedRows(encoded["validation"]),
        collate=SpanCollator(tokenizer, width, len(label_names), config.pad_to_multiple_of),
        make_task=lambda generator: SpanClassificationTask(config.seed, generator),
        header=header,
        problem="span_classification",
        labels=labels,
        example=None,
        uses=f"span classification: the spans of a text (up to {width} tokens, nested or "
        f"overlapping) with the labels it was trained on: {labels}.",
    )
