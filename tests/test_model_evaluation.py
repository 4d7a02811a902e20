"""The evaluate command (`sinusoidal-encoder-evaluate`, `model_evaluation`): a pretrained folder scored on a dataset
by the evaluation library that pretraining's own evaluation calls, at several lengths; what it refuses, in one
line, before any data is read."""

from __future__ import annotations

import json

import pytest
from accelerate.state import AcceleratorState
from conftest import folder_digest, metrics, pretrain_cmd, run, run_command, write_text_corpus

from sinusoidal_encoder_training import model_evaluation
from sinusoidal_encoder_training.configs import EvaluationConfig

FINAL = ("eval_loss", "eval_perplexity", "eval_unigram_loss", "eval_order_gap", "eval_masked_tokens")


@pytest.fixture
def fresh_accelerate():
    AcceleratorState._reset_state(reset_partial_state=True)  # an earlier in-process run's settings
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture(scope="module")
def pretrained_run(tmp_path_factory):
    """A tiny pretraining run on two text files (blocks of 32 tokens, evaluated in batches of 16)."""
    folder = tmp_path_factory.mktemp("evaluate")
    corpus = write_text_corpus(folder / "data")
    run(pretrain_cmd(corpus, folder / "model", "--max_train_steps", "3"))
    return corpus, folder / "model"


def test_evaluate_gives_pretrainings_final_evaluation_and_scores_other_lengths(
    pretrained_run, tmp_path, fresh_accelerate
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
    results = model_evaluation.run(config)
    same = ("eval_masked_tokens", "eval_unigram_loss")
    assert {name: results[32][name] for name in same} == {name: final[name] for name in same}
    assert {name: results[32][name] for name in FINAL} == pytest.approx(
        {name: final[name] for name in FINAL}, rel=1e-6, abs=1e-6
    )
    longer = results[64]
    assert longer["eval_masked_tokens"] > 0 and longer["eval_loss"] != results[32]["eval_loss"]
    written = json.loads(results_file.read_text())
    assert written["results"] == {"32": results[32], "64": results[64]} and written["model"] == str(model)


def test_a_fine_tuned_or_damaged_folder_and_a_bad_length_are_refused_in_one_line(
    pretrained_run, tmp_path, monkeypatch, capsys
):
    _, model = pretrained_run
    classifier = tmp_path / "classifier"
    classifier.mkdir()
    config = json.loads((model / "config.json").read_text())
    config["architectures"] = ["SinusoidalEncoderForSequenceClassification"]
    (classifier / "config.json").write_text(json.dumps(config))
    cases = {
        "a fine-tuned folder": ([classifier], "is a SinusoidalEncoderForSequenceClassification, without a trained"),
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
        status, _, err = run_command(model_evaluation.main, "evaluate", argv, monkeypatch, capsys)
        assert status == 2 and len(err.strip().splitlines()) == 1 and expected in err, (case, err)
    assert folder_digest(model) == before
