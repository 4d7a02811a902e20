"""benchmarks/input_pipeline/run.py: a tiny run writes every cell and a verdict on the target; bad input is one line.
Mechanics only: no time is asserted (the figures are in benchmarks/input_pipeline/input-pipeline.md)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.input_pipeline import run as input_pipeline


@pytest.mark.slow
def test_a_tiny_run_writes_every_cell_and_the_verdict(tmp_path, capsys):
    argv = ["--batches", "2", "--batch_size", "8", "--length", "16", "--repeats", "1", "--output_dir", str(tmp_path)]
    result = input_pipeline.main(argv)
    written = json.loads((tmp_path / "input-pipeline.json").read_text())
    assert written == result and written["batch"] == [8, 16] and written["device"] in ("cpu", "cuda")
    per_row = {
        "text classification": "DataCollatorWithPadding",
        "token classification": "DataCollatorForTokenClassification",
        "question answering": "DataCollatorWithPadding",
        "multiple choice": "DataCollatorForMultipleChoice",
    }
    assert set(written["tokens_per_second"]) == {
        "masked-LM, the package's pipeline",
        "masked-LM, per row (before)",
        *(f"{task}, the package's pipeline" for task in input_pipeline.FINETUNING_TASKS),
        *(f"{task}, per row ({collator})" for task, collator in per_row.items()),
    }
    assert all(speed > 0 for speed in written["tokens_per_second"].values())
    assert written["target_met"] == (written["tokens_per_second"]["masked-LM, the package's pipeline"] >= 5e6)
    assert list(written["finetuning"]) == list(input_pipeline.FINETUNING_TASKS)
    for task, figures in written["finetuning"].items():
        speed = written["tokens_per_second"][f"{task}, the package's pipeline"]
        assert figures["target_met"] == (speed >= 5e6)
        if task in per_row:
            before = written["tokens_per_second"][f"{task}, per row ({per_row[task]})"]
            assert figures["ratio_to_per_row"] == pytest.approx(speed / before)
        else:
            assert figures["ratio_to_per_row"] is None
    text = (tmp_path / "input-pipeline.md").read_text()
    assert ("**met**" in text) == written["target_met"] and "| masked-LM, per row (before) |" in text
    for task, figures in written["finetuning"].items():  # each task's verdict, and how it compares with row by row
        verdict = "met" if figures["target_met"] else "missed"
        ratio = figures["ratio_to_per_row"]
        against = f"{ratio:.1f}x the per-row way" if ratio is not None else "no per-row collator in transformers"
        assert f"{task} {verdict} ({against})" in text


@pytest.mark.parametrize("task", input_pipeline.FINETUNING_TASKS)
def test_each_tasks_rows_collate_both_ways_into_the_same_batch(task):
    """Each fine-tuning task's rows, as its recipe leaves them, collate the package's way (`BatchedRows` and the
    task's collator) into the tensors transformers' collator makes of them row by row (span classification, which
    transformers has no collator for: the labels of the spans drawn)."""
    from transformers import AutoTokenizer

    from sinusoidal_encoder_training import SHIPPED_TOKENIZER
    from sinusoidal_encoder_training.data.batches import BatchedRows

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)
    dataset = input_pipeline.finetuning_dataset(task, 6, 24, len(tokenizer))
    ours, theirs, _ = input_pipeline.finetuning_collators(task, tokenizer)
    batch = ours(BatchedRows(dataset).__getitems__(list(range(6))))
    rows = [dataset[i] for i in range(6)]
    if theirs is None:
        marked = (batch["labels"] == 1).nonzero().tolist()  # (row, first token, width - 1, label)
        drawn = sorted([row, *span] for row, example in enumerate(rows) for span in example["spans"])
        assert sorted(marked) == sorted(map(list, {tuple(span) for span in drawn}))
        return
    expected = theirs(rows)
    assert set(batch) == set(expected)
    for key, value in expected.items():
        assert torch.equal(batch[key], value), key


def test_bad_input_is_one_line(capsys):
    with pytest.raises(SystemExit) as stopped:
        input_pipeline.main(["--batches", "0"])
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("error: --batches must be a positive integer, got 0."), lines
