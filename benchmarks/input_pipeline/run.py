"""The input pipeline alone: tokens/s from a packed `datasets` dataset to a masked-LM batch on the device, through
the package's own DataLoader settings, dataset wrapper and collator (`accelerator.loader_settings`,
`data.IndexedExamples`, `data.KeyedMaskingCollator`), on one CPU thread and in the main process (no worker), so that
the figure is what one core gives; and, in the same run, the per-row way (each row read alone, each row masked with a
generator of its own:
`DataCollatorForLanguageModeling`, as the package did before), and the batches of every fine-tuning task (rows of 16
to 128 tokens padded per batch: text and token classification, question-answering windows, multiple choice with 4
choices a row, span classification with the labels of every candidate span) the package's way (`data.BatchedRows`
with the task's collator) and, where transformers has a collator for the task, the per-row way (each row read alone,
transformers' collator: `DataCollatorWithPadding`, `DataCollatorForTokenClassification`,
`DataCollatorForMultipleChoice`).

    python -m benchmarks.input_pipeline.run   # 256 x 128 batches -> benchmarks/input_pipeline/input-pipeline.{json,md}
    python -m benchmarks.input_pipeline.run --batches 5 --output_dir outputs/pipeline

The target (issue "Feed the GPU"): at least 5M tokens/s for 256 x 128 masked-LM batches on one core, since a small
model's training step on an H100-class GPU eats about 3M, and the same order for fine-tuning batches. The report says
met or missed for each; no test asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import torch

from benchmarks.machine import cpu_description, git_commit, write_record

TARGET = 5e6  # tokens/s for masked-LM batches, one core


def packed_dataset(blocks: int, length: int, vocab_size: int, seed: int = 0):
    """`blocks` packed blocks of `length` random ids (a [CLS] first), as pretraining's packed `datasets.Dataset`,
    with the `document` each starts in (four blocks a document)."""
    import datasets

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (blocks, length), generator=generator)
    ids[:, 0] = 2  # [CLS] of the shipped tokenizer: a special token, never masked
    return datasets.Dataset.from_dict({"input_ids": ids.tolist(), "document": [row // 4 for row in range(blocks)]})


FINETUNING_TASKS = (
    "text classification",
    "token classification",
    "question answering",
    "multiple choice",
    "span classification",
)
CHOICES = 4  # per multiple-choice row
SPAN_WIDTH, SPAN_LABELS, SPANS_PER_ROW = 8, 3, 3  # span classification's candidates, labels, labelled spans a row


def finetuning_dataset(task: str, rows: int, length: int, vocab_size: int, seed: int = 0):
    """`rows` tokenised rows of a fine-tuning task as its recipe leaves them for the collator: ids of 16 (or
    `length`, if shorter) to `length` tokens ([CLS] first, [SEP] last) and the task's targets: a label (text
    classification), a tag per token with -100 on the special tokens (token classification), the answer's first and
    last token (question answering), `CHOICES` such rows and the right one's index (multiple choice), the text's
    first and last token and `SPANS_PER_ROW` labelled spans (span classification)."""
    import datasets

    generator = torch.Generator().manual_seed(seed)

    def draw(n: int) -> list[int]:
        return [2, *torch.randint(5, vocab_size, (n - 2,), generator=generator).tolist(), 3]

    def integers(high: int, count: int) -> list[int]:
        return torch.randint(0, high, (count,), generator=generator).tolist()

    shortest = min(16, length)
    lengths = torch.randint(shortest, length + 1, (rows,), generator=generator).tolist()
    ids = [draw(n) for n in lengths]
    columns = {"input_ids": ids, "attention_mask": [[1] * n for n in lengths]}
    if task == "text classification":
        return datasets.Dataset.from_dict({**columns, "label": integers(6, rows)})
    if task == "token classification":
        tags = [[-100, *integers(9, n - 2), -100] for n in lengths]
        return datasets.Dataset.from_dict({**columns, "labels": tags})
    if task == "question answering":
        starts = [1 + int(torch.randint(0, n - 2, (), generator=generator)) for n in lengths]
        ends = [min(start + 3, n - 2) for start, n in zip(starts, lengths, strict=True)]
        return datasets.Dataset.from_dict({**columns, "start_positions": starts, "end_positions": ends})
    if task == "multiple choice":
        choices = [torch.randint(shortest, length + 1, (CHOICES,), generator=generator).tolist() for _ in range(rows)]
        return datasets.Dataset.from_dict(
            {
                "input_ids": [[draw(n) for n in row] for row in choices],
                "attention_mask": [[[1] * n for n in row] for row in choices],
                "label": integers(CHOICES, rows),
            }
        )
    from sinusoidal_encoder_training.tasks.span_classification.recipe import FEATURES

    spans = []
    for n in lengths:
        firsts = torch.randint(1, n - 2, (SPANS_PER_ROW,), generator=generator).tolist()
        widths = [int(torch.randint(0, min(SPAN_WIDTH, n - 1 - first), (), generator=generator)) for first in firsts]
        labels = integers(SPAN_LABELS, SPANS_PER_ROW)
        spans.append([[f, w, label] for f, w, label in zip(firsts, widths, labels, strict=True)])
    text = [[1, n - 2] for n in lengths]
    return datasets.Dataset.from_dict({**columns, "text_tokens": text, "spans": spans}, features=FEATURES)


def finetuning_collators(task: str, tokenizer) -> tuple[Callable, Callable | None, str | None]:
    """The package's collator of a fine-tuning task, transformers' collator for it (None where transformers has
    none) and that one's name."""
    import transformers

    from sinusoidal_encoder_training.data.batches import PaddingCollator
    from sinusoidal_encoder_training.tasks.span_classification.recipe import SpanCollator

    if task == "span classification":
        return SpanCollator(tokenizer, SPAN_WIDTH, SPAN_LABELS), None, None
    name = {
        "token classification": "DataCollatorForTokenClassification",
        "multiple choice": "DataCollatorForMultipleChoice",
    }.get(task, "DataCollatorWithPadding")
    return PaddingCollator(tokenizer), getattr(transformers, name)(tokenizer), name


def batches(loader: torch.utils.data.DataLoader, device: torch.device) -> Iterator[dict[str, torch.Tensor]]:
    """The loader's batches copied to `device` as the training loop gets them (non-blocking from pinned memory)."""
    for batch in loader:
        yield {key: value.to(device, non_blocking=True) for key, value in batch.items()}


def tokens_per_second(make_loader: Callable[[], torch.utils.data.DataLoader], device: torch.device, repeats: int):
    """Median tokens/s (real tokens: the attention mask's ones, or every id) over `repeats` passes of the loader."""
    speeds = []
    for _ in range(repeats + 1):  # the first pass warms up
        loader = make_loader()
        start, tokens = time.perf_counter(), 0
        for batch in batches(loader, device):
            tokens += int(batch["attention_mask"].sum()) if "attention_mask" in batch else batch["input_ids"].numel()
        if device.type == "cuda":
            torch.cuda.synchronize()
        speeds.append(tokens / (time.perf_counter() - start))
    return statistics.median(speeds[1:])


class PerRowMasking:
    """The per-row way: each row masked by `DataCollatorForLanguageModeling` with a generator of its own (seeded by
    seed, epoch and row), one row at a time."""

    def __init__(self, tokenizer, probability: float, seed: int):
        from transformers import DataCollatorForLanguageModeling

        from sinusoidal_encoder_training.data.pipeline import derive_seed

        self.collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=probability, return_tensors="pt")
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)))
        self.derive_seed, self.seed = derive_seed, seed

    def __call__(self, examples):
        ids, labels = [], []
        for example in examples:
            self.collator.generator = torch.Generator().manual_seed(
                self.derive_seed(self.seed, 0, example["example_id"])
            )
            row = torch.tensor([example["input_ids"]])  # (1, T)
            masked, row_labels = self.collator.torch_mask_tokens(row.clone(), torch.isin(row, self.special_ids))
            ids.append(masked)
            labels.append(row_labels)
        return {"input_ids": torch.cat(ids), "labels": torch.cat(labels)}


class PerRowExamples(torch.utils.data.Dataset):
    """Rows read one at a time (`__getitem__` alone), as the package did before."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        return {"input_ids": self.dataset[index]["input_ids"], "example_id": index}


def measure(args: argparse.Namespace) -> dict:
    from transformers import AutoTokenizer

    from sinusoidal_encoder_training import SHIPPED_TOKENIZER
    from sinusoidal_encoder_training.data.batches import BatchedRows, IndexedExamples, KeyedMaskingCollator
    from sinusoidal_encoder_training.runs.accelerator import loader_settings

    torch.set_num_threads(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)
    rows = args.batches * args.batch_size
    packed = packed_dataset(rows, args.length, len(tokenizer))
    in_process = argparse.Namespace(dataloader_num_workers=0, no_persistent_workers=False)
    settings = {**loader_settings(in_process), "batch_size": args.batch_size}

    def ours():
        wrapped = IndexedExamples(packed)
        masking = KeyedMaskingCollator(tokenizer, 0.15, seed=42)
        return torch.utils.data.DataLoader(wrapped, shuffle=True, collate_fn=masking, drop_last=True, **settings)

    def per_row():
        wrapped = PerRowExamples(packed)
        masking = PerRowMasking(tokenizer, 0.15, seed=42)
        return torch.utils.data.DataLoader(wrapped, shuffle=True, collate_fn=masking, drop_last=True, **settings)

    cells = {
        "masked-LM, the package's pipeline": tokens_per_second(ours, device, args.repeats),
        "masked-LM, per row (before)": tokens_per_second(per_row, device, args.repeats),
    }
    finetuning = {}
    for task in FINETUNING_TASKS:
        dataset = finetuning_dataset(task, rows, args.length, len(tokenizer))
        collate, theirs, name = finetuning_collators(task, tokenizer)

        def package(dataset=dataset, collate=collate):
            return torch.utils.data.DataLoader(BatchedRows(dataset), shuffle=True, collate_fn=collate, **settings)

        def row_by_row(dataset=dataset, theirs=theirs):
            return torch.utils.data.DataLoader(dataset, shuffle=True, collate_fn=theirs, **settings)

        speed = tokens_per_second(package, device, args.repeats)
        before = tokens_per_second(row_by_row, device, args.repeats) if theirs is not None else None
        cells[f"{task}, the package's pipeline"] = speed
        if before is not None:
            cells[f"{task}, per row ({name})"] = before
        finetuning[task] = {
            "ratio_to_per_row": None if before is None else speed / before,
            "target_met": speed >= TARGET,
        }
    ours_speed = cells["masked-LM, the package's pipeline"]
    return {
        "date": time.strftime("%Y-%m-%d"),
        "commit": git_commit(),
        "cpu": cpu_description(),
        "device": str(device),
        "threads": 1,
        "batch": [args.batch_size, args.length],
        "batches_per_pass": args.batches,
        "repeats": args.repeats,
        "tokens_per_second": cells,
        "ratio_to_per_row": ours_speed / cells["masked-LM, per row (before)"],
        "finetuning": finetuning,
        "target_tokens_per_second": TARGET,
        "target_met": ours_speed >= TARGET,
    }


def report(result: dict) -> str:
    verdict = "met" if result["target_met"] else "missed"
    batch, length = result["batch"]
    tasks = []
    for task, figures in result["finetuning"].items():
        ratio = figures["ratio_to_per_row"]
        against = f"{ratio:.1f}x the per-row way" if ratio is not None else "no per-row collator in transformers"
        tasks.append(f"{task} {'met' if figures['target_met'] else 'missed'} ({against})")
    lines = [
        "# The input pipeline alone",
        "",
        f"{result['date']}, commit {result['commit']}, {result['cpu'].get('model', 'CPU')}, one thread, batches of "
        f"{batch} x {length} copied to {result['device']}; medians of {result['repeats']} passes of "
        f"{result['batches_per_pass']} batches (`python -m benchmarks.input_pipeline.run`).",
        "",
        "| pipeline | tokens/s |",
        "|---|---:|",
        *(f"| {name} | {speed:,.0f} |" for name, speed in result["tokens_per_second"].items()),
        "",
        f"The package's masked-LM pipeline runs at {result['ratio_to_per_row']:.1f}x the per-row way. Target: at "
        f"least {TARGET / 1e6:.0f}M tokens/s for masked-LM batches on one core: **{verdict}**. The same "
        f"{TARGET / 1e6:.0f}M for fine-tuning batches: {'; '.join(tasks)}.",
        "",
    ]
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=40, help="Batches per pass.")
    parser.add_argument("--batch_size", type=int, default=256, help="Rows per batch.")
    parser.add_argument("--length", type=int, default=128, help="Tokens per row.")
    parser.add_argument("--repeats", type=int, default=5, help="Timed passes (after one warm-up pass).")
    parser.add_argument(
        "--output_dir", default="benchmarks/input_pipeline", help="Where input-pipeline.{json,md} are written."
    )
    args = parser.parse_args(argv)
    for name in ("batches", "batch_size", "length", "repeats"):
        if getattr(args, name) < 1:
            parser.exit(2, f"{parser.prog}: error: --{name} must be a positive integer, got {getattr(args, name)}.\n")
    if args.length < 4:  # [CLS], [SEP] and a span of text
        parser.exit(2, f"{parser.prog}: error: --length must be at least 4, got {args.length}.\n")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    result = measure(args)
    sys.stdout.write(write_record(args.output_dir, "input-pipeline", result, report(result)))
    return result


if __name__ == "__main__":
    main()
