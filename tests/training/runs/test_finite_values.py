"""What a run saves is sound: NaN and infinite numbers in the data are refused before work, naming the file, the
row and the column; a loss (or weights) that stops being finite stops the run with one line, with nothing saved of
NaNs; every JSON file written is strict JSON, a NaN score written as null."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_pretraining, write_text_corpus
from test_finetuning import SENTENCES

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.runs.checkpoints import complete_checkpoints
from sinusoidal_encoder_training.runs.metrics_log import METRICS_FILE, strict_json
from sinusoidal_encoder_training.stages import finetuning, pretraining
from sinusoidal_encoder_training.tasks.classification import recipe as classification

FAST = {"per_device_train_batch_size": 8, "per_device_eval_batch_size": 16, "logging_steps": 1, "max_length": 48}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_text_corpus(tmp_path_factory.mktemp("corpus"), n_train=25, n_validation=6)


def strict_load(text: str):
    """`json.loads` that refuses NaN, Infinity and -Infinity, as strict JSON parsers (JavaScript's, Go's) do."""

    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def strict_lines(path: Path) -> list[dict]:
    return [strict_load(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))  # json.dumps writes NaN as the bare NaN
    return str(path)


def write_csv(path: Path, rows: list[tuple[str, str]]) -> str:
    path.write_text("text,score\n" + "".join(f'"{text}",{score}\n' for text, score in rows))
    return str(path)


def run_finetune(**settings) -> dict:
    config = finetuning.FinetuningConfig(**{**FAST, **settings})
    result = finetuning.finetune(config)
    finetuning.export(config, result)
    return result.metrics


def regression_rows(bad_row: int | None = None, value: float = math.nan) -> list[dict]:
    rows = [{"text": s, "score": i / 10} for i, s in enumerate(SENTENCES * 2)]
    if bad_row is not None:
        rows[bad_row - 1]["score"] = value
    return rows


@pytest.mark.parametrize("case", ["regression target", "csv cell", "tag in a list"])
def test_non_finite_numbers_in_fine_tuning_data_are_refused_naming_file_row_and_column(tmp_path, pretrained, case):
    out = tmp_path / "out"
    base = dict(model_name_or_path=pretrained, output_dir=str(out), max_train_steps=1)
    if case == "regression target":
        train = write_jsonl(tmp_path / "t.jsonl", regression_rows(bad_row=5))
        settings = dict(train_file=train, label_column_name="score")
        message = r"--train_file '.*t\.jsonl', row 5, column 'score' is nan: NaN and infinity"
    elif case == "csv cell":
        good = [(s, f"{i / 10}") for i, s in enumerate(SENTENCES * 2)]
        train = write_csv(tmp_path / "t.csv", good)
        validation = write_csv(tmp_path / "v.csv", [*good[:2], (SENTENCES[0], "inf")])
        settings = dict(train_file=train, validation_file=validation, label_column_name="score")
        message = r"--validation_file '.*v\.csv', row 3, column 'score' is inf"
    else:
        rows = [{"tokens": s.split(), "tags": [i % 2] * len(s.split())} for i, s in enumerate(SENTENCES * 2)]
        rows[6]["tags"][1] = math.nan
        train = write_jsonl(tmp_path / "t.jsonl", rows)
        settings = dict(task="token-classification", train_file=train)
        message = r"--train_file '.*t\.jsonl', row 7, column 'tags' is \[0\.0, nan, "
    with pytest.raises(UsageError, match=message):
        run_finetune(**base, **settings)
    assert not (out / METRICS_FILE).exists()  # refused before any training


def nan_loss_from(task_class, step: int, monkeypatch) -> None:
    """The training loss of `task_class` becomes NaN from optimizer step `step` on (one micro-batch per step)."""
    original = task_class.loss
    calls = []

    def loss(self, model, batch, num_items_in_batch):
        value = original(self, model, batch, num_items_in_batch)
        if model.training:
            calls.append(1)
            if len(calls) >= step:
                return value * math.nan
        return value

    monkeypatch.setattr(task_class, "loss", loss)


@pytest.mark.parametrize("logging_steps", [1, 10])
def test_a_non_finite_loss_stops_pretraining_with_nothing_saved_from_it(tmp_path, corpus, logging_steps, monkeypatch):
    """Seen at the step's logging, or (logging seldom) at the next step's reduction: the run stops at step 3 with
    the last finite loss; the checkpoint of step 2 stays, no checkpoint or model after it, metrics.jsonl strict."""
    nan_loss_from(pretraining.MaskedLMTask, 3, monkeypatch)
    out = tmp_path / "out"
    config = tiny_pretraining(
        corpus, out, max_train_steps=6, checkpointing_steps=2, logging_steps=logging_steps, learning_rate=1e-3
    )
    with pytest.raises(UsageError, match=r"^The training loss is nan at step 3 \(the last finite loss was") as error:
        pretraining.run(config)
    assert "a lower --learning_rate (now 0.001)" in str(error.value) and "\n" not in str(error.value)
    assert [step for step, _ in complete_checkpoints(str(out))] == [2]
    assert not (out / "model.safetensors").exists()
    lines = strict_lines(out / METRICS_FILE)
    assert all(line["step"] <= 2 for line in lines)
    if logging_steps == 1:
        assert f"was {lines[-1]['train_loss']:.4f}, at step 2)" in str(error.value)


def poison_a_weight_after_step(step: int, monkeypatch) -> None:
    """After optimizer step `step`, one weight of the model is NaN (while every loss stays finite)."""
    original = finetuning.make_optimizer

    def make_optimizer(model, config):
        optimizer = original(model, config)
        plain_step, calls = optimizer.step, []

        def poisoned_step(*args, **kwargs):
            result = plain_step(*args, **kwargs)
            calls.append(1)
            if len(calls) == step:
                with torch.no_grad():
                    next(model.parameters()).view(-1)[0] = math.nan
            return result

        optimizer.step = poisoned_step
        return optimizer

    monkeypatch.setattr(finetuning, "make_optimizer", make_optimizer)


@pytest.mark.parametrize("broken", ["loss", "weights"])
def test_fine_tuning_that_stops_being_finite_saves_no_model_and_reports_no_metric(
    tmp_path, pretrained, broken, monkeypatch
):
    train = write_jsonl(tmp_path / "t.jsonl", regression_rows())
    if broken == "loss":
        nan_loss_from(classification.ClassificationTask, 2, monkeypatch)
        message = r"^The training loss is nan at step 2 \(the last finite loss was \d+\.\d{4}, at step 1\)"
    else:
        poison_a_weight_after_step(3, monkeypatch)
        message = (
            r"^The weights hold 1 NaN or infinite value\(s\) at step 3 \(the last finite loss was .*, at step 3\)"
        )
    out = tmp_path / "out"
    with pytest.raises(UsageError, match=message):
        run_finetune(
            model_name_or_path=pretrained,
            output_dir=str(out),
            train_file=train,
            label_column_name="score",
            max_train_steps=3,
        )
    assert not (out / "model.safetensors").exists() and not (out / "eval_results.json").exists()
    lines = strict_lines(out / METRICS_FILE)
    assert not any(key.startswith("eval_") for line in lines for key in line)  # no evaluation of NaN weights


def test_a_nan_score_is_written_as_null_in_strict_json(tmp_path, pretrained):
    """A validation split of one target value has no Pearson correlation (NaN): eval_results.json and metrics.jsonl
    say null and parse as strict JSON, and the card's model-index leaves the score out."""
    rows = regression_rows()
    train = write_jsonl(tmp_path / "t.jsonl", rows)
    validation = write_jsonl(tmp_path / "v.jsonl", [{**row, "score": 0.5} for row in rows[:6]])
    out = tmp_path / "out"
    final = run_finetune(
        model_name_or_path=pretrained,
        output_dir=str(out),
        train_file=train,
        validation_file=validation,
        label_column_name="score",
        max_train_steps=1,
    )
    assert math.isnan(final["eval_pearson"])
    results = strict_load((out / "eval_results.json").read_text())
    assert results["eval_pearson"] is None and isinstance(results["eval_mse"], float)
    assert strict_lines(out / METRICS_FILE)[-1]["eval_pearson"] is None
    card = (out / "README.md").read_text()
    index = yaml.safe_load(card.split("---")[1])["model-index"][0]["results"][0]["metrics"]
    assert {metric["name"] for metric in index} == {"loss", "mse"}  # the text lists pearson: nan
    assert strict_json({"a": [math.inf, {"b": -math.inf}], "c": 1.5}) == '{"a": [null, {"b": null}], "c": 1.5}'


@pytest.mark.slow
def test_a_non_finite_loss_stops_distillation_before_the_model_is_saved(tmp_path, tokenizer, monkeypatch):
    from test_sentence_embeddings import exported_folder, teacher_or_skip

    teacher_or_skip()
    from sinusoidal_encoder_training.stages import distillation

    original, calls = distillation.TeacherContrastiveLoss.forward, []

    def forward(self, *args, **kwargs):
        calls.append(1)
        value = original(self, *args, **kwargs)
        return value * math.nan if len(calls) >= 3 else value

    monkeypatch.setattr(distillation.TeacherContrastiveLoss, "forward", forward)
    out = tmp_path / "distilled"
    config = distillation.DistillationConfig(
        model_name_or_path=exported_folder(tmp_path / "student", tokenizer),
        output_dir=str(out),
        max_sentences=64,
        eval_sentences=8,
        per_device_train_batch_size=8,
        max_train_steps=4,
        logging_steps=1,
        checkpointing_steps=2,
    )
    with pytest.raises(UsageError, match=r"^The training loss is nan at step 3 \(the last finite loss was"):
        distillation.distil(config)
    assert not (out / "model.safetensors").exists() and not (out / "distillation_results.json").exists()
    assert sorted(os.listdir(out / "checkpoints")) == [".lock", "checkpoint-2", "run.json"]  # the run's record kept
