"""training/finetune.py: the offline downstream task, every problem type, token classification, exact resume,
bad input, the model card, pictures and publishing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import metrics
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification, pipeline

import sinusoidal_encoder as se
from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.evaluation.metrics import (
    accuracy_and_macro_f1,
    entity_scores,
    entity_spans,
    multi_label_scores,
    regression_scores,
)
from sinusoidal_encoder_training.publishing import export
from sinusoidal_encoder_training.stages import finetuning
from sinusoidal_encoder_training.tasks import recipes
from sinusoidal_encoder_training.tasks.classification import recipe as classification

FAST = {"per_device_train_batch_size": 8, "per_device_eval_batch_size": 16, "logging_steps": 1, "max_length": 48}


def run_finetune(**settings) -> dict:
    """Fine-tune and export as the command line does, with the run built in code."""
    config = finetuning.FinetuningConfig(**{**FAST, **settings})
    result = finetuning.finetune(config)
    finetuning.export(config, result)
    return result.metrics


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


SENTENCES = [
    "The function returns a list of strings.",
    "Raise an error when the file is missing.",
    "This class wraps a tokenizer and a model.",
    "Arrays are indexed from zero.",
    "The process group synchronises gradients.",
    "A dataset can be streamed from the Hub.",
    "Use a context manager to close the file.",
    "The scheduler lowers the learning rate.",
]


@pytest.mark.slow
def test_builtin_downstream_task_end_to_end(tmp_path, pretrained):
    out = tmp_path / "classifier"
    final = run_finetune(
        model_name_or_path=pretrained,
        output_dir=str(out),
        max_train_samples=96,
        max_eval_samples=64,
        max_train_steps=4,
        base_model_id="someone/tiny-mlm",
    )
    for key in ("eval_accuracy", "eval_macro_f1", "majority_accuracy", "tfidf_logreg_accuracy"):
        assert 0.0 <= final[key] <= 1.0, key
    assert json.loads((out / "eval_results.json").read_text())["eval_accuracy"] == final["eval_accuracy"]
    config = json.loads((out / "config.json").read_text())
    assert set(config["id2label"].values()) <= {
        "python",
        "numpy",
        "huggingface_hub",
        "datasets",
        "accelerate",
        "transformers",
    }
    assert config["label2id"] == {v: int(k) for k, v in config["id2label"].items()}
    # the card: YAML metadata a Hub page reads, and the pictures
    card = (out / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["base_model"] == "someone/tiny-mlm" and front["pipeline_tag"] == "text-classification"
    assert front["library_name"] == "transformers" and front["license"] == "apache-2.0" and front["language"] == ["en"]
    metrics = {m["type"]: m["value"] for m in front["model-index"][0]["results"][0]["metrics"]}
    assert metrics["accuracy"] == pytest.approx(final["eval_accuracy"], abs=1e-4)
    # the baselines are in the card's text, not in the model-index (they are not this model's results)
    assert not any(name.startswith(("tfidf", "majority")) for name in metrics)
    assert f"- tfidf_logreg_accuracy: {final['tfidf_logreg_accuracy']:.4f}" in card.split("Baselines on the same")[1]
    assert "nats per example" in card and "masked" not in card.split("## Pictures")[1]  # the loss curve's caption
    for section in (
        "## Intended uses and limits",
        "## How to use",
        "## Training data",
        "## Training procedure",
        "## Evaluation",
        "## Citation",
        "trust_remote_code=True",
        "PE(pos, 2i)",
    ):
        assert section in card, section
    for picture in ("encoding_heatmap.png", "encoding_dot_products.png", "loss_curves.png"):
        assert (out / picture).stat().st_size > 5000 and f"]({picture})" in card
    # the pipeline prints label names; the Auto class loads it
    classify = pipeline("text-classification", model=str(out))
    assert classify("Return the array of values.")[0]["label"] in config["id2label"].values()
    assert isinstance(
        AutoModelForSequenceClassification.from_pretrained(out), se.SinusoidalEncoderForSequenceClassification
    )


@pytest.mark.slow
def test_regression_multi_label_and_text_pairs(tmp_path, pretrained):
    pairs = [
        {"a": s, "b": SENTENCES[(i + 3) % 8], "score": float(i % 5) / 4, "tags": [["x"], ["y"], ["x", "y"]][i % 3]}
        for i, s in enumerate(SENTENCES * 3)
    ]
    train, valid = write_jsonl(tmp_path / "t.jsonl", pairs), write_jsonl(tmp_path / "v.jsonl", pairs[:9])
    common = dict(
        model_name_or_path=pretrained,
        train_file=train,
        validation_file=valid,
        text_column_name="a",
        text_pair_column_name="b",
        max_train_steps=2,
    )
    regression = run_finetune(**common, label_column_name="score", output_dir=str(tmp_path / "r"))
    assert {"eval_pearson", "eval_spearman", "eval_mse"} <= set(regression)
    config = AutoConfig.from_pretrained(tmp_path / "r")
    assert config.problem_type == "regression" and config.num_labels == 1
    multi = run_finetune(**common, label_column_name="tags", output_dir=str(tmp_path / "m"))
    assert {"eval_micro_f1", "eval_macro_f1", "eval_exact_match"} <= set(multi)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification" and config["id2label"] == {"0": "x", "1": "y"}
    # the baselines read both texts of a pair: here the second alone decides the label
    decided = [{"a": s, "b": f"The {pet} sat.", "pet": pet} for s in SENTENCES for pet in ("cat", "dog")]
    train = write_jsonl(tmp_path / "pets.jsonl", decided)
    pets = run_finetune(
        **{**common, "train_file": train, "validation_file": train},
        label_column_name="pet",
        baselines=True,
        output_dir=str(tmp_path / "p"),
    )
    assert pets["majority_accuracy"] == 0.5 and pets["tfidf_logreg_accuracy"] == 1.0


def ner_rows():
    """Words tagged by a real rule of the text: names of Python builtins are entities."""
    builtins = {"list": "TYPE", "dict": "TYPE", "len": "FUNC", "print": "FUNC", "open": "FUNC"}
    texts = [
        "call len on the list",
        "print the dict keys",
        "open a file and print it",
        "a list of dict values",
        "the len of a dict",
        "open the list",
    ]
    rows = []
    for text in texts * 3:
        words = text.split()
        rows.append({"tokens": words, "ner_tags": [f"B-{builtins[w]}" if w in builtins else "O" for w in words]})
    return rows


@pytest.mark.slow
def test_token_classification(tmp_path, pretrained):
    rows = ner_rows()
    train, valid = write_jsonl(tmp_path / "t.jsonl", rows), write_jsonl(tmp_path / "v.jsonl", rows[:6])
    out = tmp_path / "ner"
    final = run_finetune(
        task="token-classification",
        model_name_or_path=pretrained,
        train_file=train,
        validation_file=valid,
        output_dir=str(out),
        max_train_steps=3,
    )
    assert {"eval_precision", "eval_recall", "eval_f1", "eval_accuracy"} <= set(final)
    config = json.loads((out / "config.json").read_text())
    assert sorted(config["id2label"].values()) == ["B-FUNC", "B-TYPE", "O"]
    model = AutoModelForTokenClassification.from_pretrained(out)
    assert isinstance(model, se.SinusoidalEncoderForTokenClassification)
    tagged = pipeline("token-classification", model=str(out), ignore_labels=[])("print the list")
    assert tagged and {t["entity"] for t in tagged} <= set(config["id2label"].values())
    card = (out / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["pipeline_tag"] == "token-classification"
    # local data and a local base model: named, never by a path of this machine; no language claimed, no `datasets:`
    assert str(tmp_path / "t.jsonl") not in card and pretrained not in card and "base_model" not in front
    assert "local files: `t.jsonl` (training) and `v.jsonl` (validation)" in card
    assert "language" not in front and "datasets" not in front
    assert front["model-index"][0]["results"][0]["dataset"]["name"] == "t.jsonl"  # not the built-in corpus
    assert "English" not in card and "loss (nats per labelled token)" in card


def test_token_labels_go_to_the_first_piece_of_each_word(tokenizer):
    import datasets

    raw = datasets.DatasetDict(
        {
            split: datasets.Dataset.from_list(
                [{"tokens": ["sinusoidally", "encoded", "positions"], "tags": ["B-X", "I-X", "O"]}]
            )
            for split in ("train", "validation")
        }
    )
    encoded = classification.encode(
        raw, tokenizer, 32, "token_classification", ["B-X", "I-X", "O"], ("tokens", None, "tags")
    )["train"][0]
    pieces = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    labelled = [(piece, label) for piece, label in zip(pieces, encoded["labels"], strict=True) if label != -100]
    assert [label for _, label in labelled] == [0, 1, 2]
    assert len(pieces) > 5  # "sinusoidally" is several pieces, only the first is labelled
    assert labelled[0][0] == pieces[1] and encoded["labels"][0] == -100  # [CLS] is never labelled
    # the words get the tokens of running text (with the space marker after the first word): those of inference
    assert encoded["input_ids"] == tokenizer("sinusoidally encoded positions")["input_ids"]
    assert [piece for piece, _ in labelled][1:] == ["Ġencoded", "Ġpositions"]


@pytest.mark.slow
@pytest.mark.parametrize("group_by_length", [False, True])
def test_resume_continues_exactly(tmp_path, pretrained, group_by_length, capsys):
    """A resumed run ends with the uninterrupted run's weights, both reading through two DataLoader workers kept
    from one epoch to the next: the order of every epoch is the same whether its iterator is the workers' first or
    not (a resume's is new). 5 batches in steps of 2: each epoch ends in a step of one batch, the checkpoint's. So
    with batches grouped by length (--group_by_length), whose sampler the task reseeds every epoch as well."""
    rows = [{"text": s, "label": ["neg", "pos", "mid"][i % 3]} for i, s in enumerate(SENTENCES * 5)]
    train, valid = write_jsonl(tmp_path / "t.jsonl", rows), write_jsonl(tmp_path / "v.jsonl", rows[:6])
    common = dict(
        model_name_or_path=pretrained,
        train_file=train,
        validation_file=valid,
        max_train_steps=8,
        checkpointing_steps=3,
        gradient_accumulation_steps=2,
        dataloader_num_workers=2,
        group_by_length=group_by_length,
    )
    run_finetune(**common, output_dir=str(tmp_path / "a"))
    assert len({line["epoch"] for line in metrics(tmp_path / "a") if "epoch" in line}) >= 2
    assert ("  Batches = grouped by length: " in capsys.readouterr().out) == group_by_length
    checkpoint = str(tmp_path / "a" / "checkpoints" / "step_3")
    run_finetune(**common, output_dir=str(tmp_path / "b"), resume_from_checkpoint=checkpoint)
    a, b = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_bad_input_fails_before_training(tmp_path, pretrained):
    rows = [{"text": s, "label": ["neg", "pos"][i % 2]} for i, s in enumerate(SENTENCES * 2)]
    train = write_jsonl(tmp_path / "t.jsonl", rows)
    unseen = write_jsonl(tmp_path / "u.jsonl", [{"text": "x y z", "label": "surprise"}, *rows[:3]])
    no_label = write_jsonl(tmp_path / "n.jsonl", [{"text": s} for s in SENTENCES])
    out = str(tmp_path / "out")
    base = dict(model_name_or_path=pretrained, output_dir=out, max_train_steps=1)
    with pytest.raises(ValueError, match="surprise"):
        run_finetune(**base, train_file=train, validation_file=unseen)
    with pytest.raises(ValueError, match="label column"):
        run_finetune(**base, train_file=no_label, validation_file=no_label)
    with pytest.raises(ValueError, match="--label_column_name 'nope'"):
        run_finetune(**base, train_file=train, label_column_name="nope")
    scores = write_jsonl(tmp_path / "r.jsonl", [{"text": s, "label": i / 10} for i, s in enumerate(SENTENCES)])
    with pytest.raises(ValueError, match=r"--baselines applies to single-label .* not regression"):
        run_finetune(**base, train_file=scores, baselines=True)  # found before training, not after it
    assert not os.path.exists(os.path.join(out, "metrics.jsonl"))
    # a folder of another model type
    from transformers import BertConfig

    BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(
        tmp_path / "bert"
    )
    with pytest.raises(ValueError, match="'bert' model"):
        run_finetune(model_name_or_path=str(tmp_path / "bert"), output_dir=out, train_file=train)
    # a classifier with another number of labels: refused unless --ignore_mismatched_sizes
    three = write_jsonl(
        tmp_path / "3.jsonl", [{"text": s, "label": "abc"[i % 3]} for i, s in enumerate(SENTENCES * 2)]
    )
    run_finetune(**{**base, "output_dir": str(tmp_path / "two")}, train_file=train)
    mismatched = dict(model_name_or_path=str(tmp_path / "two"), output_dir=out, train_file=three, max_train_steps=1)
    with pytest.raises(ValueError, match="--ignore_mismatched_sizes"):
        run_finetune(**mismatched)
    final = run_finetune(**mismatched, ignore_mismatched_sizes=True)
    assert AutoConfig.from_pretrained(out).num_labels == 3 and "eval_accuracy" in final


def test_config_overrides_change_the_head_not_the_weights(tmp_path, pretrained, monkeypatch):
    """`--config_overrides` sets fields of the pretrained config (pooling, dropout) for the fine-tuned model, which
    saves them; an override that would change a pretrained weight's shape, or names no field, is refused before any
    data is read."""
    rows = [{"text": s, "label": ["neg", "pos"][i % 2]} for i, s in enumerate(SENTENCES * 2)]
    train = write_jsonl(tmp_path / "t.jsonl", rows)
    base = dict(model_name_or_path=pretrained, train_file=train, max_train_steps=1)
    out = tmp_path / "mean"
    run_finetune(**base, output_dir=str(out), config_overrides="classifier_pooling=mean,classifier_dropout=0.3")
    saved = AutoConfig.from_pretrained(out)
    assert (saved.classifier_pooling, saved.classifier_dropout) == ("mean", 0.3)
    assert AutoModelForSequenceClassification.from_pretrained(out).pooler.pooling == "mean"
    assert "`classifier_pooling=mean,classifier_dropout=0.3`" in (out / "README.md").read_text()  # the card says so

    def no_data(config):
        raise AssertionError("the data was read before the bad override was refused")

    monkeypatch.setattr(finetuning, "load_task_data", no_data)
    for overrides, message in [
        ("intermediate_size=80", r"changes the shape of \d+ pretrained weight\(s\) \(encoder\.layers\.0\.feed_"),
        ("hidden_size=48,num_attention_heads=4", "changes the shape of"),
        ("no_such_field=1", "the config has no field 'no_such_field'"),
        ("classifier_pooling=max", "`classifier_pooling` must be one of"),
        ("classifier_pooling", "not of the form field=value"),
    ]:
        with pytest.raises(UsageError, match=message):
            run_finetune(**base, output_dir=str(tmp_path / "bad"), config_overrides=overrides)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["text-classification", "span-classification"])
def test_a_small_draw_of_training_examples_keeps_the_labels_of_the_whole_split(tmp_path, pretrained, task):
    """--max_train_samples draws a few rows, here none of the one row labelled "rare", which the validation split
    shows: the head still has the labels of the whole training split (as transformers' examples), and the run
    trains, where the labels of the draw alone would refuse it ("never shows")."""
    if task == "text-classification":
        rows = [{"text": s, "label": ["neg", "pos"][i % 2]} for i, s in enumerate(SENTENCES * 5)]
        rows[0]["label"] = "rare"
    else:  # one span per row: the second word of its sentence
        rows = []
        for s in SENTENCES * 5:
            first, second = s.split()[:2]
            rows.append({"text": s, "spans": [{"start": len(first) + 1, "end": len(first) + 1 + len(second)}]})
        for i, row in enumerate(rows):
            row["spans"][0]["label"] = "rare" if i == 0 else ["neg", "pos"][i % 2]
    train, valid = write_jsonl(tmp_path / "t.jsonl", rows), write_jsonl(tmp_path / "v.jsonl", rows[:4])
    out = tmp_path / "out"
    run_finetune(
        task=task,
        model_name_or_path=pretrained,
        train_file=train,
        validation_file=valid,
        output_dir=str(out),
        max_train_samples=4,
        per_device_train_batch_size=4,
        max_train_steps=1,
    )
    drawn = finetuning.FinetuningConfig(
        task=task,
        model_name_or_path=pretrained,
        train_file=train,
        validation_file=valid,
        output_dir="unused",
        max_train_samples=4,
    )
    raw = finetuning.load_task_data(drawn)
    assert len(raw["train"]) == 40  # the whole split: the recipe draws
    kept = recipes.draw_training_examples(raw, drawn)["train"]
    assert len(kept) == 4 and "rare" not in json.dumps(kept.to_list())  # the draw has none of it
    assert sorted(json.loads((out / "config.json").read_text())["label2id"]) == ["neg", "pos", "rare"]


@pytest.mark.slow
def test_load_best_model_at_end_exports_the_best_evaluations_weights(tmp_path, pretrained):
    """With --load_best_model_at_end the folder holds the weights of the checkpoint of the best evaluation by the
    figure named (the earliest of equal ones, the lowest loss), the final evaluation and eval_results.json are
    theirs, and the card says which step's they are; with --early_stopping_patience 3 the run stops after three
    evaluations that do not improve on it, and the card says so."""
    rows = [{"text": s, "label": ["neg", "pos", "mid"][i % 3]} for i, s in enumerate(SENTENCES * 3)]
    train, valid = write_jsonl(tmp_path / "t.jsonl", rows), write_jsonl(tmp_path / "v.jsonl", rows[:6])
    out = tmp_path / "out"
    final = run_finetune(
        model_name_or_path=pretrained,
        train_file=train,
        validation_file=valid,
        output_dir=str(out),
        learning_rate=3e-2,  # a jumpy loss: the best is seldom the last
        max_train_steps=6,
        eval_steps=1,
        checkpointing_steps=1,
        checkpoints_total_limit=1,
        load_best_model_at_end=True,
        early_stopping_patience=3,
    )
    evaluations = [line for line in metrics(out) if "eval_loss" in line]
    last = len(evaluations)
    assert [line["step"] for line in evaluations] == list(range(1, last + 1))
    best = min(evaluations, key=lambda line: line["eval_loss"])  # the earliest of the lowest
    assert best["step"] < last  # the jumpy loss: an earlier checkpoint is loaded
    assert (last < 6) == (last - best["step"] >= 3)  # stopped once three evaluations did not improve on it
    assert final["eval_loss"] == pytest.approx(best["eval_loss"], abs=1e-6)
    kept = sorted(int(path.name.split("_")[1]) for path in (out / "checkpoints").glob("step_*"))
    assert kept == [best["step"], last]
    exported = load_file(str(out / "model.safetensors"))
    saved = load_file(str(out / "checkpoints" / f"step_{best['step']}" / "model.safetensors"))
    assert saved.keys() == exported.keys() and all(torch.equal(saved[k], exported[k]) for k in saved)
    card = (out / "README.md").read_text()
    stopped = f" It stopped early, at step {last} of 6: 3 evaluations in a row had not improved on the best." * (
        last < 6
    )
    weights = (
        f" The weights are step {best['step']}'s, the best eval_loss ({best['eval_loss']:.4f}) of the evaluations"
    )
    assert f"seed 42.{stopped}{weights} every step." in card
    assert json.loads((out / "eval_results.json").read_text())["eval_loss"] == final["eval_loss"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rows", "batch", "accumulation", "epochs", "steps"), [(5, 2, 1, 2, 6), (3, 32, 1, 1, 1), (5, 2, 2, 2, 4)]
)
def test_every_training_example_is_trained_on_in_every_epoch(
    tmp_path, pretrained, tokenizer, rows, batch, accumulation, epochs, steps
):
    """The last, smaller batch of an epoch is a step of its own, as with transformers' Trainer: 5 rows in batches
    of 2 are 3 steps an epoch, every row's tokens counted each epoch; 3 rows with the default batch of 32 are one
    step (they were refused: "holds 0 full batch(es)"). So are an epoch's last batches fewer than a step's
    `--gradient_accumulation_steps`: 3 batches in steps of 2 are 2 steps an epoch (the third batch was left out)."""
    labelled = [{"text": s, "label": ["neg", "pos"][i % 2]} for i, s in enumerate(SENTENCES)]
    config = finetuning.FinetuningConfig(
        model_name_or_path=pretrained,
        train_file=write_jsonl(tmp_path / "t.jsonl", labelled[:rows]),
        validation_file=write_jsonl(tmp_path / "v.jsonl", labelled),
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accumulation,
        num_train_epochs=epochs,
        max_length=48,
    )
    result = finetuning.finetune(config)
    assert result.max_train_steps == steps and result.progress.completed_steps == steps
    tokens = sum(len(tokenizer(s, truncation=True, max_length=48)["input_ids"]) for s in SENTENCES[:rows])
    assert result.progress.tokens_seen == epochs * tokens


@pytest.mark.slow
@pytest.mark.parametrize(
    ("other_split", "named", "split", "said"),
    [
        ("test", "test", "test", "validated on its `test` split"),
        ("validation", None, "validation", "validated on its `validation` split"),
        ("test", None, None, "validated on 5% of the training split, held out with seed 42"),
    ],
)
def test_the_card_names_the_split_the_results_were_measured_on(tmp_path, pretrained, other_split, named, split, said):
    """The model-index names the split of the dataset its results were measured on, as the Hub shows them, and the
    card's text says it: a named one (`--validation_split_name`), the dataset's own validation split, or none for a
    share of the training split held out (a dataset of train and test only, which the model-index said was
    validated on a split named "validation")."""
    data = tmp_path / "reviews" / "data"
    data.mkdir(parents=True)
    rows = [{"text": s, "label": ["neg", "pos"][i % 2]} for i, s in enumerate(SENTENCES * 5)]
    write_jsonl(data / "train-00000.jsonl", rows)
    write_jsonl(data / f"{other_split}-00000.jsonl", rows[:5])
    out = tmp_path / "out"
    run_finetune(
        model_name_or_path=pretrained,
        dataset_name=str(tmp_path / "reviews"),
        validation_split_name=named,
        output_dir=str(out),
        max_train_steps=1,
    )
    card = (out / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["model-index"][0]["results"][0]["dataset"].get("split") == split
    assert f"a local dataset, `reviews`; {said}" in card


def test_baselines_are_scored_over_the_runs_labels_and_say_what_they_cannot_score():
    """The majority class is scored over the run's labels, as the model is: a validation label (2) that the training
    rows lack counts in the macro-F1 (an F1 of 0: 0.5 / 3, where leaving it out gave 0.5 / 2). TF-IDF + logistic
    regression needs two labels and a term shared by two training rows; without them it is left out, saying why
    (scikit-learn raised a ValueError)."""
    texts = ["the cat sat", "the cat ran", "a dog barked", "a dog slept"]
    scores, missing = classification.run_baselines((texts, [0, 0, 1, 1]), (texts[:3], [0, 1, 2]), 3)
    assert missing is None and scores["majority_accuracy"] == pytest.approx(1 / 3)
    assert scores["majority_macro_f1"] == pytest.approx(0.5 / 3)
    assert set(scores) == {"majority_accuracy", "majority_macro_f1", "tfidf_logreg_accuracy", "tfidf_logreg_macro_f1"}
    for train, reason in [
        ((texts, [1, 1, 1, 1]), "the training rows hold one label"),
        ((texts[:1], [0]), "the training rows hold one label"),
        ((["alpha beta", "gamma delta"], [0, 1]), "no term occurs in two training rows"),
    ]:
        scores, missing = classification.run_baselines(train, (texts, [0, 1, 0, 1]), 2)
        assert set(scores) == {"majority_accuracy", "majority_macro_f1"}
        assert missing == f"TF-IDF + logistic regression not scored: {reason}"


@pytest.mark.slow
def test_fine_tuning_at_a_longer_length_is_the_length_trained_at(tmp_path, pretrained):
    """Fine-tuned at inputs longer than the folder was pretrained at (64), the model has been trained there: its
    config's `max_position_embeddings` says so (as pretraining's context extension), and with it what sentence-
    transformers truncates at and the card; a shorter fine-tuning keeps the folder's length."""
    rows = [{"text": " ".join([s] * 12), "label": ["neg", "pos"][i % 2]} for i, s in enumerate(SENTENCES * 2)]
    train = write_jsonl(tmp_path / "t.jsonl", rows)
    out = tmp_path / "out"
    run_finetune(
        model_name_or_path=pretrained, train_file=train, max_train_steps=1, output_dir=str(out), max_length=96
    )
    assert AutoConfig.from_pretrained(pretrained).max_position_embeddings == 64  # the folder read is unchanged
    assert AutoConfig.from_pretrained(out).max_position_embeddings == 96
    assert json.loads((out / "sentence_bert_config.json").read_text())["max_seq_length"] == 96
    assert "| trained at sequence length | 96 |" in (out / "README.md").read_text()
    shorter = finetuning.FinetuningConfig(model_name_or_path=pretrained, output_dir=str(out), max_length=48)
    model_config = finetuning.load_model_config(shorter)
    finetuning.record_training_length(shorter, model_config)
    assert model_config.max_position_embeddings == 64
    longer = finetuning.FinetuningConfig(model_name_or_path=str(out), output_dir=str(tmp_path / "x"), max_length=128)
    assert finetuning.load_model_config(longer).max_position_embeddings == 96  # evaluation: the model as it runs


def segment_tokenizer_folder(folder, tokenizer):
    """A masked-LM folder whose tokenizer gives `token_type_ids`, as a BERT tokenizer passed as --tokenizer_name
    does (saved that way by earlier versions)."""
    from transformers import AutoTokenizer

    config = se.SinusoidalEncoderConfig(**{**AutoConfig.from_pretrained(tokenizer).to_dict(), "architectures": None})
    se.SinusoidalEncoderForMaskedLM(config).save_pretrained(folder)
    names = ["input_ids", "token_type_ids", "attention_mask"]
    AutoTokenizer.from_pretrained(tokenizer, model_input_names=names).save_pretrained(folder)
    assert "token_type_ids" in AutoTokenizer.from_pretrained(folder)("a test")
    return str(folder)


@pytest.mark.slow
def test_a_tokenizer_with_segment_ids_is_saved_giving_only_what_the_model_takes(tmp_path, pretrained):
    """The model has no segment embeddings and refuses `token_type_ids`: the folder a run writes has a tokenizer
    that gives only `input_ids` and `attention_mask`, so that a pipeline, sentence-transformers and
    `model(**tokenizer(text))` run on it (they ended in the model's ValueError)."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    start = segment_tokenizer_folder(tmp_path / "start", pretrained)
    rows = [{"text": s, "label": ["neg", "pos"][i % 2]} for i, s in enumerate(SENTENCES * 2)]
    train = write_jsonl(tmp_path / "t.jsonl", rows)
    out = tmp_path / "out"
    run_finetune(model_name_or_path=start, train_file=train, max_train_steps=1, output_dir=str(out))
    assert list(AutoTokenizer.from_pretrained(out)("a test", "a pair")) == ["input_ids", "attention_mask"]
    assert pipeline("text-classification", model=str(out))("a test")[0]["label"]
    assert SentenceTransformer(str(out), device="cpu").encode(["a test"]).shape[0] == 1


@pytest.mark.slow
def test_model_init_fine_tunes_a_model_of_your_making(tmp_path, pretrained, tokenizer):
    """`finetune(config, model_init)`: the model is made from the config of --model_name_or_path with the task's
    labels, once every RNG is seeded (the same head in every run), and may be of any architecture (here
    transformers' BERT, which the default loading refuses)."""
    from transformers import BertConfig, BertForSequenceClassification

    bert = tmp_path / "bert"
    BertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    ).save_pretrained(bert)
    rows = [{"text": s, "label": ["neg", "pos"][i % 2]} for i, s in enumerate(SENTENCES * 2)]
    train = write_jsonl(tmp_path / "t.jsonl", rows)
    made = []

    def model_init(model_config):
        made.append(model_config)
        return BertForSequenceClassification(model_config)

    settings = dict(model_name_or_path=str(bert), tokenizer_name=pretrained, train_file=train, max_train_steps=2)
    runs = [
        finetuning.finetune(finetuning.FinetuningConfig(**FAST, **settings, output_dir=str(tmp_path / o)), model_init)
        for o in ("a", "b")
    ]
    assert made[0].num_labels == 2 and made[0].id2label == {0: "neg", 1: "pos"}
    assert made[0].problem_type == "single_label_classification"
    models = [run.accelerator.unwrap_model(run.model) for run in runs]
    assert all(isinstance(model, BertForSequenceClassification) for model in models)
    assert "eval_accuracy" in runs[0].metrics
    assert torch.equal(models[0].classifier.weight, models[1].classifier.weight)  # seeded: the same run twice


def test_baselines_need_scikit_learn_before_any_work(monkeypatch, pretrained):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # not installed
    with pytest.raises(UsageError, match=r"--baselines needs the 'baselines' extra.*pip install"):
        finetuning.FinetuningConfig(model_name_or_path=pretrained, output_dir="out", baselines=True)
    builtin = finetuning.FinetuningConfig(model_name_or_path=pretrained, output_dir="out")
    assert not builtin.with_baselines  # the built-in task goes without them


@pytest.mark.slow
def test_a_failing_optional_step_loses_no_model(tmp_path, pretrained, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("the baselines broke")

    monkeypatch.setattr(classification, "run_baselines", broken)
    monkeypatch.setattr(export, "draw_pictures", broken)
    out = tmp_path / "classifier"
    final = run_finetune(
        model_name_or_path=pretrained,
        output_dir=str(out),
        max_train_samples=32,
        max_eval_samples=16,
        max_train_steps=1,
    )
    shown = capsys.readouterr().out
    assert "could not score the baselines: RuntimeError: the baselines broke" in shown
    assert "could not draw the pictures: RuntimeError" in shown
    assert "eval_accuracy" in final and "majority_accuracy" not in final
    for name in ("model.safetensors", "config.json", "tokenizer.json", "README.md", "eval_results.json"):
        assert (out / name).exists(), name


@pytest.mark.slow
def test_plots_command_draws_the_pictures(tmp_path, pretrained):
    """`python -m sinusoidal_encoder_training.publishing.plots FOLDER [--by_tokens]`: its `main`, in this process."""
    from sinusoidal_encoder_training.publishing.plots import main

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text((Path(pretrained) / "config.json").read_text())
    (folder / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "train_loss": 5 - s / 10}) + "\n" for s in range(1, 20))
        + json.dumps({"step": 19, "eval_loss": 3.2})
        + "\n"
    )
    main([str(folder)])
    for picture in ("encoding_heatmap.png", "encoding_dot_products.png", "loss_curves.png"):
        assert (folder / picture).read_bytes()[:4] == b"\x89PNG"
    by_steps = (folder / "loss_curves.png").read_bytes()
    with open(folder / "metrics.jsonl", "a") as handle:  # tokens seen, for --by_tokens
        handle.write(json.dumps({"step": 20, "train_loss": 3.0, "tokens_seen": 2560}) + "\n")
    main([str(folder), "--by_tokens"])
    assert (folder / "loss_curves.png").read_bytes() not in (by_steps, b"")


def test_metrics():
    assert accuracy_and_macro_f1([0, 1, 1, 2], [0, 1, 2, 2], 3) == pytest.approx(
        {"accuracy": 0.75, "macro_f1": (1 + 2 / 3 + 2 / 3) / 3}
    )
    assert multi_label_scores([[1, 0], [1, 1]], [[1, 0], [0, 1]]) == pytest.approx(
        {"micro_f1": 0.8, "macro_f1": (2 / 3 + 1) / 2, "exact_match": 0.5}
    )
    scores = regression_scores([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0])
    assert scores["spearman"] == pytest.approx(0.8) and scores["mse"] == pytest.approx(0.5)
    assert regression_scores([1, 1, 2], [1, 2, 3])["spearman"] == pytest.approx(0.8660254)  # ties get mean ranks
    assert entity_spans(["B-PER", "I-PER", "O", "B-LOC", "I-ORG", "I-ORG"]) == {
        ("PER", 0, 2),
        ("LOC", 3, 4),
        ("ORG", 4, 6),
    }
    scores = entity_scores([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "B-ORG"]])
    assert scores == pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5, "accuracy": 0.75})
