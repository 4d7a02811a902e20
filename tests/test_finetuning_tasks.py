"""Fine-tuning for question answering (SQuAD-format data) and multiple choice (SWAG-format data), through the task
table: the windows of long contexts and the answer's tokens in each, the best span over a question's windows,
SQuAD's exact match and F1, one-line refusals of data of another shape, and end-to-end runs on the shipped example
files that export folders loading with the task's Auto class."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from conftest import REPO
from transformers import AutoModelForMultipleChoice, AutoModelForQuestionAnswering

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import FinetuningConfig, TaskDataConfig
from sinusoidal_encoder_training.evaluation.metrics import squad_scores
from sinusoidal_encoder_training.stages import finetuning
from sinusoidal_encoder_training.tasks import multiple_choice, question_answering
from sinusoidal_encoder_training.tasks.registry import FINETUNED, TASKS, reading

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


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "files", "auto_class", "metrics"),
    [
        ("question-answering", "question_answering", AutoModelForQuestionAnswering, {"eval_exact_match", "eval_f1"}),
        ("multiple-choice", "multiple_choice", AutoModelForMultipleChoice, {"eval_accuracy"}),
    ],
)
def test_fine_tuning_on_the_shipped_examples_exports_a_folder_of_the_task(
    tmp_path, pretrained, task, files, auto_class, metrics
):
    config = finetuning.FinetuningConfig(
        task=task,
        model_name_or_path=pretrained,
        train_file=str(EXAMPLES / f"{files}.jsonl"),
        validation_file=str(EXAMPLES / f"{files}_validation.jsonl"),
        output_dir=str(tmp_path / "out"),
        max_train_steps=2,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=3,  # the last evaluation batch is partial
        max_length=32,
        **({"doc_stride": 8} if task == "question-answering" else {}),
    )
    result = finetuning.finetune(config)
    finetuning.export(config, result)
    assert metrics | {"eval_loss"} <= set(result.metrics) and np.isfinite(result.metrics["eval_loss"])
    out = Path(config.output_dir)
    model = auto_class.from_pretrained(out)
    assert type(model).__name__ == f"SinusoidalEncoder{auto_class.__name__.removeprefix('AutoModel')}"
    saved = json.loads((out / "config.json").read_text())
    assert saved["architectures"] == [type(model).__name__]
    card = (out / "README.md").read_text()
    assert f"pipeline_tag: {task}" in card and f"{auto_class.__name__}.from_pretrained" in card
    assert json.loads((out / "eval_results.json").read_text())["eval_loss"] == result.metrics["eval_loss"]
    with torch.no_grad():  # the saved head gives what the trained one gave
        trained = result.accelerator.unwrap_model(result.model).eval()
        ids = torch.randint(5, 100, (2, 4, 12) if task == "multiple-choice" else (2, 12))
        expected, got = trained(input_ids=ids), model.eval()(input_ids=ids)
        key = "logits" if task == "multiple-choice" else "start_logits"
        torch.testing.assert_close(got[key], expected[key])


TASK_FLAGS = {  # a value other than the default for each task-data flag only some tasks read
    field.name: {"text_pair_column_name": "b", "problem_type": "regression", "doc_stride": 8}[field.name]
    for field in dataclasses.fields(TaskDataConfig)
    if field.metadata.get("task_flag")
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
    if flag in TASKS[task].flags:
        FinetuningConfig(**settings, **{flag: TASK_FLAGS[flag]})
        return
    with pytest.raises(UsageError, match=rf"^--{flag} is for {' and '.join(reading(flag))}, not {task}\.$"):
        FinetuningConfig(**settings, **{flag: TASK_FLAGS[flag]})
