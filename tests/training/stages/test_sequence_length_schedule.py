"""--seq_length_schedule: sequence-length warmup in pretraining (blocks cut into shorter rows for the first steps)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import VOCAB_SIZE, random_ids, tiny_config
from torch.nn import functional as F

import sinusoidal_encoder as se
from sinusoidal_encoder_training.configs import PretrainingConfig, parse_length_schedule
from sinusoidal_encoder_training.stages.pretraining import MaskedLMTask, describe_length_schedule


def test_schedule_is_parsed_and_checked():
    assert parse_length_schedule(None, 128) == ()
    assert parse_length_schedule("32:200,64:400", 128) == ((32, 200), (64, 400))
    for bad, message in [
        ("32", "LENGTH:STEP"),
        ("32:x", "LENGTH:STEP"),
        ("48:10", "divide"),
        ("128:10", "shorter"),
        ("64:10,32:20", "rising"),
        ("32:20,64:10", "rising"),
        ("32:0", "rising"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_length_schedule(bad, 128)
    assert describe_length_schedule(()) == ""
    assert "rows of 16 tokens until step 150, of 32 tokens until step 300" in describe_length_schedule(
        ((16, 150), (32, 300))
    )
    with pytest.raises(ValueError, match="--seq_length_schedule"):
        PretrainingConfig(output_dir="x", max_seq_length=64, seq_length_schedule="48:10")
    config = PretrainingConfig(output_dir="x", max_seq_length=64, seq_length_schedule="16:10,32:20")
    assert config.length_schedule == ((16, 10), (32, 20))


def masked_blocks(batch: int = 4, length: int = 32) -> dict[str, torch.Tensor]:
    ids = random_ids(batch, length, seed=3)
    masked = torch.rand(batch, length, generator=torch.Generator().manual_seed(4)) < 0.25
    return {
        "input_ids": torch.where(masked, torch.full_like(ids, 4), ids),
        "labels": torch.where(masked, ids, -100),
        "example_id": torch.arange(batch),
    }


def test_short_steps_compute_the_loss_of_the_cut_rows_and_evaluation_stays_whole():
    model = se.SinusoidalEncoderForMaskedLM(tiny_config(sparse_prediction=True))
    unigram = torch.full((VOCAB_SIZE,), -math.log(VOCAB_SIZE), dtype=torch.float64)
    task = MaskedLMTask(torch.Generator(), None, 0, unigram, length_schedule=((8, 2), (16, 4)))
    batch = masked_blocks()

    def by_hand(length: int) -> torch.Tensor:
        ids, labels = batch["input_ids"].reshape(-1, length), batch["labels"].reshape(-1, length)
        logits = se.SinusoidalEncoderForMaskedLM.forward(model, input_ids=ids, labels=labels).logits  # (N, V)
        return F.cross_entropy(logits, labels[labels != -100], reduction="sum")

    model.train()
    for step, length in [(0, 8), (1, 8), (2, 16), (3, 16), (4, 32), (100, 32)]:
        task.begin_step(step)
        loss_sum, count = task.loss_sum(model, batch)
        torch.testing.assert_close(loss_sum, by_hand(length), rtol=1e-5, atol=1e-5)
        assert count == (batch["labels"] != -100).sum()  # the same masked tokens at every length
    task.begin_step(0)
    short, _ = task.loss_sum(model, batch)
    model.eval()
    whole, _ = task.loss_sum(model, batch)  # evaluation: always the whole blocks
    torch.testing.assert_close(whole, by_hand(32), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(short, whole)
