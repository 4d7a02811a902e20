"""Fine-tuning for question answering (SQuAD-format data) and multiple choice (SWAG-format data), through the task
table: the windows of long contexts and the answer's tokens in each, the best span over a question's windows,
SQuAD's exact match and F1, one-line refusals of data of another shape, and end-to-end runs on the shipped example
files that export folders loading with the task's Auto class."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from conftest import REPO
from transformers import AutoConfig

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import FinetuningConfig
from sinusoidal_encoder_training.data.batches import longest_first, row_lengths
from sinusoidal_encoder_training.evaluation.metrics import squad_scores
from sinusoidal_encoder_training.stages import finetuning
from sinusoidal_encoder_training.tasks import registry
from sinusoidal_encoder_training.tasks.multiple_choice import recipe as multiple_choice
from sinusoidal_encoder_training.tasks.question_answering import recipe as question_answering
from sinusoidal_encoder_training.tasks.registry import FINETUNED, TASKS, auto_class_of, reading

EXAMPLES = REPO / "docs" / "examples"


def squad_rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (EXAMPLES / name).read_text().splitlines()]


def test_squads_exact_match_and_f1():
    scores = squad_scores(["The file object", "a list", "", "x"], [["a file object"], ["a new list"], [], ["y"]])
    assert scores["exact_match"] == pytest.approx(100 * 2 / 4)  # articles and case ignored; unanswerable: empty
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1 + 0) / 4)


@pytest.mark.parametrize("max_length", [48, 24])
def test_every_window_marks_the_answers_tokens_or_the_first_token(tokenizer, max_length):
    """Contexts cut into windows that overlap by the stride: where a window holds the whole answer, its start and
    end tokens are those holding the answer's first and last characters; elsewhere both point at the first token.
    Every question has a window with its answer."""
    rows = squad_rows("question_answering.jsonl")
    batch = {key: [row[key] for row in rows] for key in rows[0]}
    encoded = question_answering.features(batch, tokenizer, max_length, 6)
    found = set()
    for start, end, row, offsets in zip(
        encoded["start_positions"], encoded["end_positions"], encoded["row"], encoded["offsets"], strict=True
    ):
        if start == 0:
            assert end == 0
            continue
        first = rows[row]["answers"]["answer_start"][0]
        last = first + len(rows[row]["answers"]["text"][0])
        assert offsets[start][0] <= first < offsets[start][1] and offsets[end][0] < last <= offsets[end][1]
        found.add(row)
    assert found == set(range(len(rows)))
    if max_length == 24:
        assert len(encoded["row"]) > len(rows)  # long contexts: several windows


def test_the_best_span_over_the_windows_is_the_answer():
    context = "Python was created by Guido van Rossum and first released in 1991."
    offsets = [None, None, (0, 6), (7, 10), (11, 18), (19, 21), (22, 27), (28, 31), (32, 38)]
    start = np.full(9, -5.0)
    end = np.full(9, -5.0)
    start[6], end[8] = 3.0, 3.0  # "Guido van Rossum"
    start[0], end[0] = 9.0, 9.0  # the first token: never an answer
    other = (np.full(9, -1.0), np.full(9, -1.0), offsets)
    assert question_answering.best_answer(context, [(start, end, offsets), other]) == "Guido van Rossum"
    late_start, early_end = np.full(9, -5.0), np.full(9, -5.0)
    late_start[8], early_end[6], early_end[8] = 3.0, 3.0, 1.0  # the best pair ends before it starts: not a span
    assert question_answering.best_answer(context, [(late_start, early_end, offsets)]) == "Rossum"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda row: {**row, "answers": {"text": ["nothing"], "answer_start": [3]}}, "is not at character 3"),
        (lambda row: {key: value for key, value in row.items() if key != "context"}, "SQuAD's columns"),
        (
            lambda row: {**row, "question": None},
            r"^The train split, row 1 \{'id': 'train-0', 'context': .*\.\.\.: 'question' is None, not text",
        ),
    ],
)
def test_question_answering_data_of_another_shape_is_refused_in_one_line(change, message):
    rows = squad_rows("question_answering.jsonl")
    broken = datasets.Dataset.from_list([change(rows[0]), *map(change, rows[1:2])])
    raw = datasets.DatasetDict({"train": broken, "validation": broken})
    with pytest.raises(UsageError, match=message):
        question_answering.check_rows(raw)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda row: {**row, "label": 4}, "not the index of one of its 4 endings"),
        (lambda row: {key: value for key, value in row.items() if key != "sent2"}, "SWAG's columns"),
        (
            lambda row: {**row, "ending1": None},
            r"^The train split, row 1 \{'sent1': 'The program opened .*: 'ending1' is None, not text",
        ),
    ],
)
def test_multiple_choice_data_of_another_shape_is_refused_in_one_line(change, message):
    rows = [json.loads(line) for line in (EXAMPLES / "multiple_choice.jsonl").read_text().splitlines()]
    broken = datasets.Dataset.from_list([change(row) for row in rows[:2]])
    raw = datasets.DatasetDict({"train": broken, "validation": broken})
    with pytest.raises(UsageError, match=message):
        multiple_choice.check_columns(raw, "label")


def test_the_choices_of_a_row_are_its_context_paired_with_each_ending(tokenizer):
    rows = [json.loads(line) for line in (EXAMPLES / "multiple_choice.jsonl").read_text().splitlines()][:3]
    raw = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "validation": datasets.Dataset.from_list(rows)}
    )
    encoded = multiple_choice.encode(raw, tokenizer, 64, ["ending0", "ending1", "ending2", "ending3"], "label")
    first = encoded["train"][0]
    assert len(first["input_ids"]) == 4 and first["labels"] == rows[0]["label"]
    text = tokenizer.decode(first["input_ids"][2], skip_special_tokens=True)
    assert rows[0]["sent1"] in text and rows[0]["ending2"] in text


def two_steps_on_the_example_files(task: str, pretrained, output_dir, **settings) -> FinetuningConfig:
    """Two steps of `task` from `pretrained` on its shipped example files (docs/examples/TASK.jsonl), in batches of 8,
    evaluated in batches of 3 (the last one partial)."""
    files = task.replace("-", "_")
    return finetuning.FinetuningConfig(
        task=task,
        model_name_or_path=pretrained,
        train_file=str(EXAMPLES / f"{files}.jsonl"),
        validation_file=str(EXAMPLES / f"{files}_validation.jsonl"),
        output_dir=str(output_dir),
        max_train_steps=2,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=3,
        max_length=32,
        **({"doc_stride": 8} if "doc_stride" in TASKS[task].flag_names else {}),
        **settings,
    )


@pytest.mark.slow
@pytest.mark.parametrize("task", FINETUNED)
def test_fine_tuning_on_the_shipped_examples_exports_a_folder_of_the_task(tmp_path, pretrained, task):
    """Every fine-tuned task of the table on its shipped example files (docs/examples/TASK.jsonl): a folder that
    loads with the task's Auto class (transformers' or the model package's own), gives what the trained model
    gave, and whose card names the task and loads it."""
    entry = TASKS[task]
    config = two_steps_on_the_example_files(task, pretrained, tmp_path / "out")
    result = finetuning.finetune(config)
    finetuning.export(config, result)
    declared = {f"eval_{name}" for name in entry.metric_names(result.prepared.problem)}  # what --metric_... takes
    assert len(declared) > 1 and declared <= set(result.metrics) and np.isfinite(result.metrics["eval_loss"])
    out = Path(config.output_dir)
    auto_class = auto_class_of(task)
    model = auto_class.from_pretrained(out)
    assert type(model).__name__ == f"SinusoidalEncoder{entry.head}"
    saved = json.loads((out / "config.json").read_text())
    assert saved["architectures"] == [type(model).__name__] and saved["auto_map"][entry.auto_class]
    card = (out / "README.md").read_text()
    assert f"pipeline_tag: {task}" in card and f"{auto_class.__name__}.from_pretrained" in card
    assert json.loads((out / "eval_results.json").read_text())["eval_loss"] == result.metrics["eval_loss"]
    with torch.no_grad():  # the saved head gives what the trained one gave
        trained = result.accelerator.unwrap_model(result.model).eval()
        shape = [12 if axis == "sequence" else 4 if axis == "choices" else 2 for axis in entry.input_axes]
        ids = torch.randint(5, 100, shape)
        expected, got = trained(input_ids=ids), model.eval()(input_ids=ids)
        for key in entry.outputs:
            torch.testing.assert_close(got[key], expected[key])


@pytest.mark.parametrize("task", FINETUNED)
def test_every_task_trains_on_max_train_samples_rows_and_evaluates_on_max_eval_samples(pretrained, task):
    """--max_train_samples and --max_eval_samples hold for every task of the table: its recipe trains on so many
    rows of the training split (it draws them itself, after reading the labels from the whole split) and evaluates
    on so many of the validation split."""
    import importlib
    import re

    files = task.replace("-", "_")
    config = finetuning.FinetuningConfig(
        task=task,
        model_name_or_path=pretrained,
        train_file=str(EXAMPLES / f"{files}.jsonl"),
        validation_file=str(EXAMPLES / f"{files}_validation.jsonl"),
        output_dir="unused",
        max_length=32,
        max_train_samples=3,
        max_eval_samples=2,
        **({"doc_stride": 8} if "doc_stride" in TASKS[task].flag_names else {}),
    )
    model_config = finetuning.load_model_config(config)
    tokenizer = finetuning.load_tokenizer(config, model_config)
    raw = finetuning.load_task_data(config)
    assert len(raw["train"]) > 3 and len(raw["validation"]) == 2
    recipe = importlib.import_module(TASKS[task].recipe)
    counts = recipe.prepare(config, raw, tokenizer, model_config).header[1]
    assert re.match(r"Training \w+ = 3\b.*, evaluation \w+ = 2\b", counts), counts


def test_sequence_classifications_declared_figures_are_those_of_its_scores():
    """What text-classification declares its evaluation reports, by problem type (what --metric_for_best_model is
    checked against), is what its scores give; the other tasks' are checked on their runs above."""
    from sinusoidal_encoder_training.evaluation import metrics

    entry = TASKS["text-classification"]
    scores = {
        "single_label_classification": metrics.accuracy_and_macro_f1([0, 1], [0, 1], 2),
        "multi_label_classification": metrics.multi_label_scores([[0, 1]], [[0, 1]]),
        "regression": metrics.regression_scores([0.0, 1.0], [0.0, 1.0]),
    }
    assert set(scores) == set(entry.loss_units)
    for problem, reported in scores.items():
        assert entry.metric_names(problem) == ("loss", *reported), problem
    assert TASKS["token-classification"].metric_names() == ("loss", *metrics.entity_scores([["O"]], [["O"]]))


def span_rows(name: str = "span_classification.jsonl") -> list[dict]:
    return [json.loads(line) for line in (EXAMPLES / name).read_text().splitlines()]


@pytest.mark.parametrize(
    ("change", "settings", "message"),
    [
        (lambda row: {**row, "spans": [{"start": 3, "end": 2, "label": "PER"}]}, {}, r"row 1: 'spans' holds"),
        (lambda row: {**row, "spans": [{"start": 0, "end": 4}]}, {}, r"0 <= start < end <= \d+ .* and a label"),
        (lambda row: {"sentence": row["text"], "spans": row["spans"]}, {}, "no column 'text'.*--text_column_name"),
        (lambda row: row, {"label_column_name": "entities"}, "no column 'entities'.*--label_column_name"),
        (lambda row: {**row, "text": None}, {}, "'text' is None, not text"),
        (
            lambda row: row,
            {"max_span_width": 1},
            r"'Ada Lovelace' \(PER\) is \d+ tokens, more than --max_span_width 1: raise",
        ),
    ],
)
def test_span_data_of_another_shape_is_refused_in_one_line(tokenizer, pretrained, change, settings, message):
    from sinusoidal_encoder_training.tasks.span_classification import recipe as span_classification

    rows = [change(row) for row in span_rows()[:3]]
    raw = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "validation": datasets.Dataset.from_list(rows)}
    )
    train = str(EXAMPLES / "span_classification.jsonl")
    config = FinetuningConfig(
        task="span-classification", model_name_or_path=pretrained, output_dir="o", train_file=train, **settings
    )
    with pytest.raises(UsageError, match=message):
        span_classification.prepare(config, raw, tokenizer, AutoConfig.for_model("sinusoidal_encoder"))


@pytest.mark.parametrize(("flag", "models", "expected"), [(None, 12, 12), (10, 12, 10), (None, None, 8)])
def test_the_span_width_is_the_flags_else_the_models(tokenizer, pretrained, flag, models, expected):
    """--max_span_width sets the head's `max_span_width`; without it the model's stays (what a folder was
    fine-tuned with, or the config's default, 8), and the collator's candidates are that wide."""
    from sinusoidal_encoder_training.tasks.span_classification import recipe as span_classification

    rows = span_rows()[:3]
    raw = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "validation": datasets.Dataset.from_list(rows)}
    )
    train = str(EXAMPLES / "span_classification.jsonl")
    settings = dict(task="span-classification", model_name_or_path=pretrained, output_dir="o", train_file=train)
    config = FinetuningConfig(**settings, max_span_width=flag)
    model_config = AutoConfig.for_model("sinusoidal_encoder", **({} if models is None else {"max_span_width": models}))
    prepared = span_classification.prepare(config, raw, tokenizer, model_config)
    assert model_config.max_span_width == expected
    assert prepared.collate([prepared.train[0]])["labels"].shape[2] == expected


def test_the_labels_of_a_batch_mark_each_span_of_the_text_and_nothing_else(tokenizer, pretrained):
    """The collator's labels: 1 at each labelled span's (first token, width, label), 0 at every other span within
    the text's tokens (nested spans both kept), -100 for spans touching a special token or padding, on either
    padding side."""
    from sinusoidal_encoder_training.tasks.span_classification import recipe as span_classification

    rows = span_rows()[:2]  # the second: "University of Manchester" (ORG) holds "Manchester" (LOC)
    raw = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "validation": datasets.Dataset.from_list(rows)}
    )
    train = str(EXAMPLES / "span_classification.jsonl")
    config = FinetuningConfig(
        task="span-classification", model_name_or_path=pretrained, output_dir="o", train_file=train
    )
    encoded, cut = span_classification.encode(raw, tokenizer, config, ("text", "spans"), ["LOC", "ORG", "PER"], 8)
    assert cut == {}
    for side in ("right", "left"):
        tokenizer.padding_side = side
        collate = span_classification.SpanCollator(tokenizer, 8, 3)
        batch = collate(list(encoded["train"]))
        labels = batch["labels"]  # (2, T, W, 3)
        for row, example in enumerate(rows):
            ids = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
            shift = labels.shape[1] - len(ids) if side == "left" else 0
            marked = {tuple(index) for index in (labels[row] == 1).nonzero().tolist()}
            names = {(tokenizer.decode(ids[s - shift : s - shift + w + 1]).strip(), label) for s, w, label in marked}
            text = {
                (example["text"][sp["start"] : sp["end"]], ["LOC", "ORG", "PER"].index(sp["label"]))
                for sp in example["spans"]
            }
            assert names == text
            candidates = labels[row, ..., 0] != -100  # (T, W)
            first, last = shift + 1, shift + len(ids) - 2  # the text's tokens: all but [CLS] and [SEP]
            starts, widths = candidates.nonzero().T
            assert starts.min() == first and (starts + widths).max() == last
            assert candidates.sum() == sum(min(8, last - start + 1) for start in range(first, last + 1))
    tokenizer.padding_side = "right"


def span_labels_row_by_row(batch: dict, rows: list[dict], width: int, num_labels: int, left: bool) -> torch.Tensor:
    """The span labels as the collator made them before it worked on whole batches: one row, and one span, at a
    time (the reference of the test below)."""
    size, length = batch["input_ids"].shape
    labels = torch.full((size, length, width, num_labels), -100.0)
    starts = torch.arange(length)[:, None]  # (T, 1)
    ends = starts + torch.arange(width)  # (T, W)
    for index, row in enumerate(rows):
        first, last = row["text_tokens"]
        shift = length - len(row["input_ids"]) if left else 0
        labels[index][(starts >= first + shift) & (ends <= last + shift)] = 0.0
        for start, span_width, label in row["spans"]:
            labels[index, start + shift, span_width, label] = 1.0
    return labels


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("multiple", [None, 8])
def test_the_span_labels_of_a_whole_batch_are_those_of_row_by_row(tokenizer, side, multiple):
    """The collator builds the span labels of the whole batch at once from the Arrow columns: the same tensor as
    row by row, for rows with no span, one or several (nested), a row with no text token, either padding side,
    padding to a multiple, a batch taken out of the dataset's order (as `BatchedRows` takes it), and rows given as
    lists, none of which has a span."""
    from sinusoidal_encoder_training.data.batches import BatchedRows
    from sinusoidal_encoder_training.tasks.span_classification import recipe as span_classification

    generator = torch.Generator().manual_seed(0)
    rows = []
    for index in range(12):
        length = int(torch.randint(4, 30, (), generator=generator))
        ids = [2, *torch.randint(5, 100, (length - 2,), generator=generator).tolist(), 3]
        spans = []
        for _ in range(index % 4):  # 0 to 3 spans, some nested in others
            start = int(torch.randint(1, length - 1, (), generator=generator))
            span_width = int(torch.randint(0, min(5, length - 1 - start), (), generator=generator))
            spans.append([start, span_width, int(torch.randint(0, 3, (), generator=generator))])
        text = [1, 0] if index == 5 else [1, length - 2]  # row 5: no token of text, no candidate
        rows.append({"input_ids": ids, "attention_mask": [1] * length, "text_tokens": text, "spans": spans})
    dataset = datasets.Dataset.from_list(rows, features=span_classification.FEATURES)
    order = [7, 2, 11, 0, 5, 9, 3]
    tokenizer.padding_side = side
    try:
        collate = span_classification.SpanCollator(tokenizer, 5, 3, pad_to_multiple_of=multiple)
        batch = collate(BatchedRows(dataset).__getitems__(order))
        expected = span_labels_row_by_row(batch, [rows[i] for i in order], 5, 3, side == "left")
        assert torch.equal(batch["labels"], expected) and batch["labels"].dtype == torch.float32
        longest = max(len(rows[i]["input_ids"]) for i in order)
        assert batch["input_ids"].shape[1] == (-(-longest // multiple) * multiple if multiple else longest)
        assert torch.equal(collate([rows[i] for i in order])["labels"], expected)  # from a list of rows too
        spanless = [rows[i] for i in (0, 4, 8)]  # rows as lists, none with a span (no type to infer)
        batch = collate(spanless)
        assert torch.equal(batch["labels"], span_labels_row_by_row(batch, spanless, 5, 3, side == "left"))
    finally:
        tokenizer.padding_side = "right"


def other_value(flags: type, field: dataclasses.Field):
    """A value of a task-data flag other than its default: the first other choice of a `Literal`, the next number,
    a column name."""
    hint = typing.get_type_hints(flags)[field.name]
    choices = [
        arg for part in typing.get_args(hint) or (hint,) for arg in typing.get_args(part) if isinstance(arg, str)
    ]
    if choices:
        return next(choice for choice in choices if choice != field.default)
    if int in typing.get_args(hint) or hint is int:  # a number, or None for the model's own
        return (field.default or 0) + 1
    return "b"


TASK_FLAGS = {  # every task-data flag only some tasks read, from the task table, and a value other than its default
    field.name: other_value(flags, field) for flags in registry.TASK_FLAGS for field in dataclasses.fields(flags)
}


@pytest.mark.parametrize("task", FINETUNED)
@pytest.mark.parametrize("flag", sorted(TASK_FLAGS))
def test_a_task_flag_is_refused_by_the_tasks_that_do_not_read_it(task, flag, pretrained, tmp_path):
    """Which fine-tuning task reads which task-data flag is the task table's (`Task.flags`): another task refuses it
    in one line naming the tasks that read it (it would be ignored)."""
    name = task.replace("-", "_")
    settings = dict(
        task=task, model_name_or_path=pretrained, output_dir=str(tmp_path), train_file=str(EXAMPLES / f"{name}.jsonl")
    )
    if flag in TASKS[task].flag_names:
        FinetuningConfig(**settings, **{flag: TASK_FLAGS[flag]})
        return
    with pytest.raises(UsageError, match=rf"^--{flag} is for {' and '.join(reading(flag))}, not {task}\.$"):
        FinetuningConfig(**settings, **{flag: TASK_FLAGS[flag]})


@pytest.mark.slow
@pytest.mark.parametrize("task", FINETUNED)
def test_evaluation_batches_longest_first_give_the_figures_of_the_splits_order(pretrained, task, tmp_path, capsys):
    """--group_by_length evaluates longest first, as transformers' Trainer groups its evaluation batches too: every
    figure of every task is the one an evaluation in the split's order gives (question answering maps its windows
    back through the order, and its loss leaves padded positions out: `sinusoidal_encoder.losses.answer_span_loss`);
    the header says what it saves of the padding."""
    result = finetuning.finetune(
        two_steps_on_the_example_files(task, pretrained, tmp_path / "out", group_by_length=True)
    )
    said = r"Evaluation batches = longest first: (\d+)% of their tokens padding \((\d+)% in the split's order\)"
    line = re.search(said, capsys.readouterr().out)
    assert line and int(line[1]) <= int(line[2]), line
    lengths = row_lengths(result.prepared.validation)
    order = longest_first(lengths)
    assert sorted(order) == list(range(len(lengths))) and list(lengths[order]) == sorted(lengths, reverse=True)
    in_order = torch.utils.data.DataLoader(
        result.prepared.validation, batch_size=3, collate_fn=result.prepared.collate
    )
    task_of_split = result.prepared.make_task(torch.Generator())  # evaluation_order None: the split's order
    expected = task_of_split.evaluate(result.model, result.accelerator.prepare(in_order), result.accelerator)
    assert expected.keys() <= result.metrics.keys()
    assert expected.keys() - {"eval_loss"}  # figures beside the loss compared
    for name in expected.keys():
        assert result.metrics[name] == pytest.approx(expected[name], rel=1e-6, abs=1e-9), name
