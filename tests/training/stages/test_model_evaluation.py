"""The evaluate command (`sinusoidal-encoder-evaluate`, `model_evaluation`): a pretrained folder scored on a dataset
by the evaluation library that pretraining's own evaluation calls, at several lengths; what it refuses, in one
line, before any data is read."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from accelerate.state import AcceleratorState
from conftest import REPO, folder_digest, metrics, run_command, tiny_pretraining, write_text_corpus

from sinusoidal_encoder_training.configs import EvaluationConfig, FinetuningConfig
from sinusoidal_encoder_training.data import pipeline
from sinusoidal_encoder_training.stages import evaluate, finetuning, pretraining
from sinusoidal_encoder_training.tasks.registry import FINETUNED

FINAL = ("eval_loss", "eval_perplexity", "eval_unigram_loss", "eval_order_gap", "eval_masked_tokens")


@pytest.fixture
def fresh_accelerate():
    AcceleratorState._reset_state(reset_partial_state=True)  # an earlier in-process run's settings
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture(scope="module")
def pretrained_run(tmp_path_factory):
    """A tiny pretraining run on two text files (blocks of 32 tokens, evaluated in batches of 16), in this process."""
    folder = tmp_path_factory.mktemp("evaluate")
    corpus = write_text_corpus(folder / "data")
    AcceleratorState._reset_state(reset_partial_state=True)
    pretraining.run(tiny_pretraining(corpus, folder / "model", max_train_steps=3))
    AcceleratorState._reset_state(reset_partial_state=True)
    return corpus, folder / "model"


def test_evaluate_gives_pretrainings_final_evaluation_and_scores_other_lengths(
    pretrained_run, tmp_path, fresh_accelerate, monkeypatch
):
    """At the training length, with the run's data and seed, the command's figures are those of the run's final
    evaluation: the same masked tokens and unigram baseline exactly (the same blocks and masks), the loss and order gap
    to float rounding (the exported folder computes full logits, the run sparse ones; threads differ); at another
    length it scores blocks of that length; --output_file holds them by length."""
    (train, validation), model = pretrained_run
    final = metrics(model)[-1]
    results_file = tmp_path / "results.json"
    config = EvaluationConfig(
        model=str(model),
        train_file=str(train),
        validation_file=str(validation),
        max_seq_length=[32, 64],
        per_device_eval_batch_size=16,
        output_file=str(results_file),
    )
    tokenizations, tokenize_documents = [], evaluate.tokenize_documents

    def counted(*args, **kwargs):
        tokenizations.append(args)
        return tokenize_documents(*args, **kwargs)

    monkeypatch.setattr(evaluate, "tokenize_documents", counted)
    results = evaluate.run(config)
    assert len(tokenizations) == 1  # the corpus is tokenised once, then packed at each length
    same = ("eval_masked_tokens", "eval_unigram_loss")
    assert {name: results[32][name] for name in same} == {name: final[name] for name in same}
    assert {name: results[32][name] for name in FINAL} == pytest.approx(
        {name: final[name] for name in FINAL}, rel=1e-6, abs=1e-6
    )
    longer = results[64]
    assert longer["eval_masked_tokens"] > 0 and longer["eval_loss"] != results[32]["eval_loss"]
    written = json.loads(results_file.read_text())
    assert written["results"] == {"32": results[32], "64": results[64]} and written["model"] == str(model)
    assert (written["task"], written["data"], written["validation_file"]) == ("fill-mask", str(train), str(validation))
    assert written["scored"] == f"--validation_file {str(validation)!r}"


def test_a_streamed_split_gives_the_figures_and_standard_errors_of_the_map_style_one(pretrained_run, fresh_accelerate):
    """The same files streamed: the same blocks, masks and documents (each block's batch carries the document it
    starts in), so the same figures and the same standard errors, the documents taken as the sample either way."""
    (train, validation), model = pretrained_run
    files = {"train_file": str(train), "validation_file": str(validation), "max_seq_length": [32]}
    eager = evaluate.run(EvaluationConfig(model=str(model), **files))[32]
    AcceleratorState._reset_state(reset_partial_state=True)
    streamed = evaluate.run(EvaluationConfig(model=str(model), streaming=True, **files))[32]
    assert streamed == pytest.approx(eager, rel=1e-9) and set(streamed) == set(eager)
    assert "eval_order_gap_stderr" in streamed


@pytest.mark.parametrize(
    ("data", "split", "said"),
    [
        ({}, "validation", "the validation split of the built-in corpus"),
        ({"dataset_name": "DATA"}, "validation", "the 'validation' split of --dataset_name 'DATA'"),
        (
            {"dataset_name": "DATA", "validation_split_name": "test"},
            "test",
            "the 'test' split of --dataset_name 'DATA'",
        ),
        (
            {"dataset_name": "DATA"},
            None,
            "the 5% of --dataset_name 'DATA' that pretraining on it holds out for validation (seed 42)",
        ),
        (
            {"train_file": "FILE", "validation_split_percentage": 10, "max_eval_samples": 3},
            None,
            "at most the first 3 blocks at each length of the 10% of --train_file 'FILE' that pretraining on it "
            "holds out for validation (seed 42)",
        ),
        (
            {"dataset_name": "DATA", "streaming": True},
            None,
            "the first 1,000 documents of --dataset_name 'DATA' that pretraining on it holds out for validation",
        ),
    ],
)
def test_a_masked_lm_score_says_what_it_scored(pretrained_run, tmp_path, data, split, said):
    """The text a masked-LM folder is scored on, as the command prints it first: a split of the data, a file, or
    the share pretraining holds out of a training split (`validation_split` is None for it)."""
    (train, _), model = pretrained_run
    (tmp_path / "data").mkdir()
    paths = {"DATA": str(tmp_path / "data"), "FILE": str(train)}
    config = EvaluationConfig(model=str(model), **{key: paths.get(value, value) for key, value in data.items()})
    expected = said
    for placeholder, path in paths.items():
        expected = expected.replace(placeholder, path)
    assert evaluate.masked_lm_source(config, split).startswith(expected)


def test_a_bare_encoder_a_missing_folder_and_bad_flags_are_refused_in_one_line(
    pretrained_run, tmp_path, monkeypatch, capsys
):
    _, model = pretrained_run
    encoder = tmp_path / "encoder"
    encoder.mkdir()
    config = json.loads((model / "config.json").read_text())
    config["architectures"] = ["SinusoidalEncoderModel"]
    (encoder / "config.json").write_text(json.dumps(config))
    cases = {
        "a bare encoder": ([encoder], "is a SinusoidalEncoderModel, without a trained masked-LM head"),
        "no folder": ([tmp_path / "missing"], "MODEL"),
        "a length under 8": ([model, "--max_seq_length", "32", "4"], "--max_seq_length must be at least 8, got 4."),
        "a length twice": ([model, "--max_seq_length", "32", "32"], "--max_seq_length names a length twice"),
        "results over the model's config": (
            [model, "--output_file", model / "config.json"],
            "the results would replace --output_file",
        ),
    }
    before = folder_digest(model)
    for case, (argv, expected) in cases.items():
        status, _, err = run_command(evaluate.main, "evaluate", argv, monkeypatch, capsys)
        assert status == 2 and len(err.strip().splitlines()) == 1 and expected in err, (case, err)
    assert folder_digest(model) == before


# the flags a task's example data (docs/examples/TASK.jsonl) needs beyond the files
EXAMPLE_FLAGS = {
    "token-classification": {"text_column_name": "tokens", "label_column_name": "tags"},
    "question-answering": {"max_length": 96, "doc_stride": 16},
}


def example_data(task: str) -> dict[str, str]:
    name = task.replace("-", "_")
    files = {"train_file": REPO / "docs" / "examples" / f"{name}.jsonl"}
    files["validation_file"] = files["train_file"].with_name(f"{name}_validation.jsonl")
    return {"max_length": 48, **{flag: str(path) for flag, path in files.items()}, **EXAMPLE_FLAGS.get(task, {})}


@pytest.mark.parametrize("task", FINETUNED)
def test_evaluate_gives_a_fine_tuned_folders_final_evaluation(task, pretrained, tmp_path, fresh_accelerate):
    """A fine-tuned folder of every task, evaluated on its run's data, gives the run's final evaluation (to float
    rounding: the exported weights are the run's)."""
    data = example_data(task)
    config = FinetuningConfig(
        task=task,
        model_name_or_path=pretrained,
        output_dir=str(tmp_path / "model"),
        max_train_steps=2,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=4,
        **data,
    )
    result = finetuning.finetune(config)
    finetuning.export(config, result)
    AcceleratorState._reset_state(reset_partial_state=True)
    evaluated = evaluate.evaluate_model(
        EvaluationConfig(model=str(tmp_path / "model"), per_device_eval_batch_size=4, **data)
    )
    assert set(evaluated) == {name for name in result.metrics if name.startswith("eval_")}
    assert evaluated == pytest.approx({name: result.metrics[name] for name in evaluated}, rel=1e-5, abs=1e-6)


def test_a_fine_tuned_head_is_scored_only_on_its_labels(pretrained, tmp_path, fresh_accelerate, monkeypatch, capsys):
    data = example_data("text-classification")
    model = str(tmp_path / "model")
    config = FinetuningConfig(
        model_name_or_path=pretrained, output_dir=model, max_train_steps=1, per_device_train_batch_size=8, **data
    )
    finetuning.export(config, finetuning.finetune(config))
    AcceleratorState._reset_state(reset_partial_state=True)
    rows = [json.loads(line) for line in Path(data["train_file"]).read_text().splitlines()]
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({**row, "label": f"x{i % 3}"}) + "\n" for i, row in enumerate(rows)))
    cases = {
        "other labels": (
            ["--train_file", other],
            f"MODEL {model!r} has a text-classification head for 2 labels ['negative', 'positive'], but the data "
            "has 3 labels ['x0', 'x1', 'x2']: give data with the head's labels.",
        ),
        "a masked-LM flag": (["--max_seq_length", "64"], "--max_seq_length is for masked-LM folders"),
        "a length under 4": (["--max_length", "2"], "--max_length must be at least 4, got 2."),
    }
    for case, (argv, expected) in cases.items():
        status, _, err = run_command(evaluate.main, "evaluate", [model, *argv], monkeypatch, capsys)
        line = err.strip().splitlines()[-1]  # after datasets' progress bars
        assert status == 2 and line.startswith("evaluate: error: ") and expected in line, (case, err)


def test_a_file_alone_is_scored_whole_and_every_score_says_what_it_scored(
    pretrained, tmp_path, fresh_accelerate, monkeypatch, capsys
):
    """`--validation_file` alone scores a fine-tuned folder on the whole file (as the run scored that file); with
    `--train_file` alone, the share a fine-tuning run holds out; each says how many examples, and of what. A
    masked-LM folder, whose unigram baseline counts a training split, is refused the file alone in one line."""
    data = example_data("text-classification")
    model = str(tmp_path / "model")
    config = FinetuningConfig(
        model_name_or_path=pretrained, output_dir=model, max_train_steps=1, per_device_train_batch_size=8, **data
    )
    result = finetuning.finetune(config)
    finetuning.export(config, result)
    AcceleratorState._reset_state(reset_partial_state=True)
    validation, train = data["validation_file"], data["train_file"]
    rows = len(Path(validation).read_text().splitlines())
    cases = {
        "the file alone": (
            ["--validation_file", validation],
            f"scoring {rows} examples: the whole of {validation!r}",
        ),
        "the run's files": (
            ["--train_file", train, "--validation_file", validation],
            f"scoring {rows} examples: --validation_file {validation!r}",
        ),
        "a training file alone": (
            ["--train_file", validation],
            "example: the 5% of --train_file",
        ),
        "a draw of the file": (
            ["--validation_file", validation, "--max_eval_samples", "3"],
            f"scoring 3 examples: drawn at random by --max_eval_samples from the whole of {validation!r}",
        ),
    }
    for other in ("validation", "test"):  # a dataset with a validation split, and one of train and test only
        folder = tmp_path / f"with-{other}" / "data"
        folder.mkdir(parents=True)
        shutil.copy(train, folder / "train-00000.jsonl")
        shutil.copy(validation, folder / f"{other}-00000.jsonl")
        cases[f"a dataset with {other}"] = (
            ["--dataset_name", str(folder.parent)],
            f"scoring {rows} examples: the 'validation' split of --dataset_name {str(folder.parent)!r}"
            if other == "validation"
            else f"examples: the 5% of the training split of --dataset_name {str(folder.parent)!r} that a fine-tuning "
            "run on it holds out for validation (seed 42; it has no 'validation' split)",
        )
    scores, read = {}, []
    load_dataset = pipeline.datasets.load_dataset

    def recorded(*args, **kwargs):
        read.append(kwargs.get("data_files"))
        return load_dataset(*args, **kwargs)

    monkeypatch.setattr(pipeline.datasets, "load_dataset", recorded)
    for case, (argv, expected) in cases.items():
        written = tmp_path / f"{case}.json"
        status, out, err = run_command(
            evaluate.main,
            "evaluate",
            [model, "--max_length", "48", *argv, "--output_file", written],
            monkeypatch,
            capsys,
        )
        assert status == 0, (case, err[-3000:])
        assert any(expected in line for line in out.splitlines()), (case, out)
        scores[case] = out.strip().splitlines()[-2]  # the last line says where the results were written
        report = json.loads(written.read_text())  # says what it scored, as the command does
        said = next(line for line in out.splitlines() if line.startswith("scoring "))
        assert report["task"] == "text-classification" and said.endswith(report["data"]), (report, said)
        assert report.get("max_eval_samples") == (3 if "--max_eval_samples" in argv else None)
        assert "mlm_probability" not in report
    assert scores["the file alone"] == scores["the run's files"]  # the same examples, the same figures
    assert read[0] == {"train": validation}  # the file alone: read once, as both splits
    assert scores["the run's files"].startswith("text-classification: ")
    status, _, err = run_command(
        evaluate.main, "evaluate", [pretrained, "--validation_file", validation], monkeypatch, capsys
    )
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "is a masked-LM folder, whose unigram baseline counts the tokens of the training split" in err


# a slice of each task's validation file without one of the head's labels: one class only, no place names
SLICES = {
    "text-classification": lambda row: row["label"] == "positive",
    "token-classification": lambda row: not any(tag.endswith("-LOC") for tag in row["tags"]),
    "span-classification": lambda row: all(span["label"] != "LOC" for span in row["spans"]),
}


@pytest.mark.parametrize("task", list(SLICES))
def test_data_with_some_of_the_heads_labels_is_the_heads_to_score_and_train(
    task, pretrained, tmp_path, fresh_accelerate, monkeypatch, capsys
):
    """A test file without one of the head's labels (one class only, no place names) is scored by the whole head,
    as a file with all of them: for a classifier, the accuracy and loss of the model on those rows by hand; and a run
    fine-tunes the head further on it, keeping every output. A label the head lacks is still refused (above)."""
    data = example_data(task)
    model = str(tmp_path / "model")
    config = FinetuningConfig(
        task=task,
        model_name_or_path=pretrained,
        output_dir=model,
        max_train_steps=1,
        per_device_train_batch_size=8,
        **data,
    )
    finetuning.export(config, finetuning.finetune(config))
    AcceleratorState._reset_state(reset_partial_state=True)
    rows = [json.loads(line) for line in Path(data["validation_file"]).read_text().splitlines()]
    kept = [row for row in rows if SLICES[task](row)]
    assert 0 < len(kept) < len(rows)
    part = tmp_path / "part.jsonl"
    part.write_text("".join(json.dumps(row) + "\n" for row in kept))
    flags = [f"--{k}={v}" for k, v in EXAMPLE_FLAGS.get(task, {}).items()]
    argv = [model, "--max_length", "48", "--validation_file", str(part), *flags]
    status, out, err = run_command(evaluate.main, "evaluate", argv, monkeypatch, capsys)
    assert status == 0, err[-3000:]
    assert f"scoring {len(kept)} examples: the whole of {str(part)!r}" in out
    assert out.strip().splitlines()[-1].startswith(f"{task}: "), out
    if task == "text-classification":
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        classifier = AutoModelForSequenceClassification.from_pretrained(model).eval()
        assert list(classifier.config.id2label.values()) == ["negative", "positive"]
        batch = AutoTokenizer.from_pretrained(model)(
            [row["text"] for row in kept], truncation=True, max_length=48, padding=True, return_tensors="pt"
        )
        with torch.no_grad():
            logits = classifier(**batch).logits
        labels = torch.tensor([classifier.config.label2id[row["label"]] for row in kept])
        loss = torch.nn.functional.cross_entropy(logits, labels).item()
        accuracy = (logits.argmax(-1) == labels).double().mean().item()
        AcceleratorState._reset_state(reset_partial_state=True)
        scored = evaluate.evaluate_model(EvaluationConfig(model=model, validation_file=str(part), max_length=48))
        assert scored["eval_accuracy"] == pytest.approx(accuracy) and scored["eval_loss"] == pytest.approx(loss)
    # fine-tuned further on the slice alone: the head keeps every output
    AcceleratorState._reset_state(reset_partial_state=True)
    again = dataclasses.replace(
        config,
        model_name_or_path=model,
        output_dir=str(tmp_path / "again"),
        train_file=str(part),
        validation_file=None,
        per_device_train_batch_size=1,
    )
    result = finetuning.finetune(again)
    trained = json.loads((Path(model) / "config.json").read_text())["id2label"]
    assert result.model.config.id2label == {int(i): name for i, name in trained.items()}
