"""The evaluation of pretraining: the order gap (0 for a model without position information, positive for a model
trained where order decides the answer) and the unigram baseline (checked against a hand computation)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import datasets
import pytest
import torch
from accelerate import Accelerator
from conftest import VOCAB_SIZE, metrics, pretrain_cmd, random_ids, run_command_afresh, tiny_config

import sinusoidal_encoder as se
from sinusoidal_encoder_training.evaluation.masked_lm import permute_inner_tokens, unigram_log_probs
from sinusoidal_encoder_training.stages.pretraining import MaskedLMTask

SPECIAL = [0, 1, 2]  # stand-ins for [PAD], [CLS], [SEP] in the tiny vocabulary


def masked_batch(batch: int = 6, length: int = 24, seed: int = 0) -> dict[str, torch.Tensor]:
    ids = random_ids(batch, length, seed).clamp(min=3)  # (B, T)
    ids[:, 0] = 1  # [CLS]
    generator = torch.Generator().manual_seed(seed + 1)
    masked = torch.rand(batch, length, generator=generator) < 0.3
    masked[:, 0] = False
    labels = torch.where(masked, ids, -100)
    inputs = torch.where(masked, torch.full_like(ids, 4), ids)  # token 4 plays [MASK]
    return {"input_ids": inputs, "labels": labels, "example_id": torch.arange(batch) + 10 * seed}


def test_permutation_moves_masks_with_their_tokens():
    batch = masked_batch()
    permuted = permute_inner_tokens(batch, seed=7)
    assert torch.equal(permuted["input_ids"][:, 0], batch["input_ids"][:, 0])  # [CLS] stays first
    for row in range(batch["input_ids"].shape[0]):
        before = sorted(zip(batch["input_ids"][row].tolist(), batch["labels"][row].tolist(), strict=True))
        after = sorted(zip(permuted["input_ids"][row].tolist(), permuted["labels"][row].tolist(), strict=True))
        assert before == after  # same tokens, same masked ones, same count
    assert not torch.equal(permuted["input_ids"], batch["input_ids"])
    again = permute_inner_tokens(batch, seed=7)
    assert torch.equal(again["input_ids"], permuted["input_ids"])  # fixed: the same at every evaluation
    # keyed by the example, not by its place in the batch
    reordered = {k: v.flip(0) for k, v in batch.items()}
    assert torch.equal(permute_inner_tokens(reordered, seed=7)["labels"], permuted["labels"].flip(0))


def evaluate(model, seed: int = 0) -> dict[str, float]:
    batches = [masked_batch(seed=s) for s in range(3)]
    unigram = torch.full((VOCAB_SIZE,), -math.log(VOCAB_SIZE), dtype=torch.float64)
    task = MaskedLMTask(torch.Generator(), None, seed, unigram)
    return task.evaluate(model, batches, Accelerator(cpu=True))


@pytest.mark.parametrize("norm_first", [False, True])
def test_order_gap_is_zero_without_position_information(norm_first):
    model = se.SinusoidalEncoderForMaskedLM(tiny_config(norm_first=norm_first, sparse_prediction=True))
    with_positions = evaluate(model)
    blind = se.SinusoidalEncoderForMaskedLM(
        tiny_config(norm_first=norm_first, sparse_prediction=True, position_mode="none")
    )
    blind.load_state_dict(model.state_dict())  # the same weights, no position encoded
    without = evaluate(blind)
    assert abs(without["eval_order_gap"]) < 1e-5  # permutation-equivariant: the same loss, token for token
    assert abs(with_positions["eval_order_gap"]) > 1e-3  # the encoding makes order matter, even untrained
    assert with_positions["eval_masked_tokens"] == without["eval_masked_tokens"] > 0
    assert without["eval_unigram_loss"] == pytest.approx(math.log(VOCAB_SIZE))


def test_unigram_baseline_is_the_smoothed_training_frequency():
    train = datasets.Dataset.from_dict({"input_ids": [[1, 5, 5, 6, 2], [1, 5, 7, 7, 2]]})
    log_probs = unigram_log_probs(train, vocab_size=8, special_ids=[0, 1, 2])
    counts = {3: 0, 4: 0, 5: 3, 6: 1, 7: 2}  # ids that can be masked, add-one smoothed below
    total = sum(counts.values()) + len(counts)
    for token, count in counts.items():
        assert log_probs[token].item() == pytest.approx(math.log((count + 1) / total))
    assert all(log_probs[i].item() == -math.inf for i in (0, 1, 2))
    streamed = unigram_log_probs(train.to_iterable_dataset(), vocab_size=8, special_ids=[0, 1, 2])
    assert torch.equal(streamed, log_probs)


def counting_corpus(folder: Path, documents: int, seed: int) -> Path:
    """Number words counted upwards from a random start: each masked word is decided by its neighbours' order
    (every block holds every word equally often, so a bag of words cannot tell)."""
    words = "one two three four five six seven eight nine ten".split()
    rng = random.Random(seed)
    lines = []
    for _ in range(documents):
        start = rng.randrange(len(words))
        lines.append(" ".join(words[(start + i) % len(words)] for i in range(200)))
    path = folder / f"counting-{seed}.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_a_model_trained_where_order_decides_has_a_positive_gap(tmp_path, monkeypatch, capsys):
    """(The command runs in-process: `run_command_afresh`.)"""
    from sinusoidal_encoder_training.stages import pretraining

    corpus = counting_corpus(tmp_path, 60, seed=0), counting_corpus(tmp_path, 6, seed=1)
    out = tmp_path / "out"
    flags = {
        "--config_overrides": "norm_first=true,hidden_dropout_prob=0,attention_probs_dropout_prob=0",  # preset tiny
        "--per_device_train_batch_size": "16",
        "--learning_rate": "3e-3",
        "--lr_scheduler_type": "constant_with_warmup",
        "--max_train_steps": "300",
        "--num_warmup_steps": "10",
        "--eval_steps": "100",
        "--logging_steps": "20",
    }
    argv = pretrain_cmd(corpus, out, *[part for item in flags.items() for part in item])[2:]
    status, stdout, stderr = run_command_afresh(pretraining.main, "pretrain.py", argv, monkeypatch, capsys)
    assert status == 0, stderr[-3000:]
    evals = [m for m in metrics(out) if "eval_loss" in m]
    final = evals[-1]
    # eleven tokens (" seven" is two), about equally frequent: the loss of a bag of words is about log 10; order
    # takes it far below, and shuffled blocks lose what order gave
    assert evals[0]["eval_order_gap"] < final["eval_order_gap"]
    assert final["eval_loss"] < 1.0 < final["eval_unigram_loss"]
    assert final["eval_order_gap"] > 1.0
    assert "the model uses word order" in stdout


@pytest.mark.parametrize(
    ("loss", "expected"),
    [
        (4.0, "eval loss 4.000 is 3.000 nats below the unigram baseline 7.000: the model has learned context"),
        (10.071, "eval loss 10.071 is 3.071 nats above the unigram baseline 7.000: worse than token frequencies"),
    ],
)
def test_the_closing_line_says_below_or_above_the_baseline(loss, expected):
    """The closing sentence says "below" the unigram baseline by a positive margin, and "above" for a run worse than
    it (never "-3.326 nats below")."""
    from sinusoidal_encoder_training.evaluation.masked_lm import describe_evaluation

    line = describe_evaluation({"eval_loss": loss, "eval_unigram_loss": 7.0, "eval_order_gap": 0.0})
    assert line.startswith(expected) and "-" not in line.split(";")[0], line
