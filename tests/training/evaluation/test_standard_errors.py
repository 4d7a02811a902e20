"""The standard errors beside the masked-LM evaluation's two differences (the margin below the unigram baseline and
the order gap), against each block scored alone, and the sentence that states a finding only outside them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import VOCAB_SIZE, tiny_config
from test_order_metric import masked_batch

import sinusoidal_encoder as se
from sinusoidal_encoder_training.evaluation.masked_lm import (
    MaskedLMEvaluation,
    describe_evaluation,
    permute_inner_tokens,
)

SEED = 5


def unigram() -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.log_softmax(torch.randn(VOCAB_SIZE, generator=generator, dtype=torch.float64), 0)


def model(**overrides) -> se.SinusoidalEncoderForMaskedLM:
    torch.manual_seed(0)
    return se.SinusoidalEncoderForMaskedLM(tiny_config(**overrides)).eval()


def batches(rows: int) -> list[dict[str, torch.Tensor]]:
    """12 blocks of 24 tokens (30% masked) in batches of `rows`."""
    blocks = {k: torch.cat([masked_batch(seed=s)[k] for s in range(2)]) for k in ("input_ids", "labels", "example_id")}
    return [{k: v[i : i + rows] for k, v in blocks.items()} for i in range(0, 12, rows)]


def by_hand(
    net, blocks: list[dict[str, torch.Tensor]], log_probs: torch.Tensor, documents: dict[int, int] | None = None
) -> dict[str, float]:
    """Each block through the model alone: its summed loss as written and permuted, its unigram loss, its masked
    tokens; summed over the blocks of each document (`documents`: example id -> document; none: each block its
    own); the standard error of each per-token difference from them, with numpy (the ratio estimator's)."""
    rows, owners = [], []
    for batch in blocks:
        for i in range(batch["input_ids"].shape[0]):
            block = {k: v[i : i + 1] for k, v in batch.items()}
            labels = block["labels"]
            n = int((labels != -100).sum())
            with torch.no_grad():
                loss = net(input_ids=block["input_ids"], labels=labels).loss.item() * n
                permuted = permute_inner_tokens(block, SEED)
                shuffled = net(input_ids=permuted["input_ids"], labels=permuted["labels"]).loss.item() * n
            frequency = -log_probs[labels[labels != -100]].sum().item()
            rows.append((n, loss, shuffled, frequency))
            example = int(block["example_id"])
            owners.append(example if documents is None else documents[example])
    rows = np.array(rows)
    _, owner = np.unique(owners, return_inverse=True)
    n, loss, shuffled, frequency = np.stack([np.bincount(owner, weights=column) for column in rows.T])

    def stderr(differences: np.ndarray) -> float:
        residuals = differences - differences.sum() / n.sum() * n
        return math.sqrt(len(n) / (len(n) - 1) * (residuals**2).sum()) / n.sum()

    return {"eval_unigram_margin_stderr": stderr(frequency - loss), "eval_order_gap_stderr": stderr(shuffled - loss)}


@pytest.mark.parametrize("sparse_prediction", [True, False])
@pytest.mark.parametrize("rows", [1, 5, 12])
def test_standard_errors_are_those_of_the_blocks_scored_alone(sparse_prediction, rows):
    """Whatever the batches and whichever logits the head gives (sparse: the labelled positions only), each block
    is one sample: the figures equal those of the blocks scored one by one."""
    net, log_probs = model(sparse_prediction=sparse_prediction), unigram()
    metrics = MaskedLMEvaluation(log_probs, order_seed=SEED)(net, batches(rows))
    expected = by_hand(net, batches(12), log_probs)
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, rel=1e-4), name
        assert 0 < value < 1


# the document of each of the 12 blocks (example ids 0-5 and 10-15): documents of 3, 2, 1, 4, 1 and 1 blocks
DOCUMENTS = {0: 7, 1: 7, 2: 7, 3: 2, 4: 2, 5: 0, 10: 9, 11: 9, 12: 9, 13: 9, 14: 4, 15: 1}


@pytest.mark.parametrize("rows", [1, 5, 12])
def test_standard_errors_take_the_documents_as_the_sample(rows):
    """With the document of each block in its batch (`document`, as the readers of `data.batches` give it), a
    document is one sample: its blocks' masked tokens and differences summed, whatever the batches. Each block its
    own document gives the blocks' figures."""
    net, log_probs = model(), unigram()

    def with_documents(owner) -> list[dict[str, torch.Tensor]]:
        return [{**batch, "document": batch["example_id"].clone().apply_(owner)} for batch in batches(rows)]

    metrics = MaskedLMEvaluation(log_probs, order_seed=SEED)(net, with_documents(DOCUMENTS.__getitem__))
    expected, blocks = by_hand(net, batches(12), log_probs, DOCUMENTS), by_hand(net, batches(12), log_probs)
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, rel=1e-4), name
        assert value != pytest.approx(blocks[name], rel=1e-2), name  # the grouping changes the figure
    own = MaskedLMEvaluation(log_probs, order_seed=SEED)(net, with_documents(lambda example: example + 100))
    for name, value in blocks.items():
        assert own[name] == pytest.approx(value, rel=1e-4), name


def test_blocks_without_example_ids_are_each_a_sample():
    """Batches without `example_id` (no order gap to key): each block is a sample of its own, whatever the batches."""
    net, log_probs = model(), unigram()
    bare = [{k: v for k, v in batch.items() if k != "example_id"} for batch in batches(5)]
    metrics = MaskedLMEvaluation(log_probs)(net, bare)
    expected = by_hand(net, batches(12), log_probs)["eval_unigram_margin_stderr"]
    assert metrics["eval_unigram_margin_stderr"] == pytest.approx(expected, rel=1e-4)
    assert "eval_order_gap_stderr" not in metrics


def test_a_block_without_masked_tokens_is_no_sample():
    """A block repeated to even out the last batch has its labels removed (`unlabel_repeated_examples`): it adds
    nothing, its zero difference counted as no block; a single block gives no standard error (NaN)."""
    net, log_probs = model(), unigram()
    evaluation = MaskedLMEvaluation(log_probs, order_seed=SEED)
    plain = evaluation(net, batches(6))
    padded = batches(6)
    padded[-1] = {k: torch.cat([v, v[:2]]) for k, v in padded[-1].items()}
    padded[-1]["labels"][-2:] = -100
    repeated = evaluation(net, padded)
    for name in ("eval_unigram_margin_stderr", "eval_order_gap_stderr"):
        assert repeated[name] == pytest.approx(plain[name], rel=1e-6)
    alone = evaluation(net, [{k: v[:1] for k, v in batches(6)[0].items()}])
    assert math.isnan(alone["eval_order_gap_stderr"]) and math.isnan(alone["eval_unigram_margin_stderr"])


def test_without_position_information_every_block_has_no_gap():
    """A model that cannot see order scores every shuffled block as written: the gap and its error are 0."""
    metrics = MaskedLMEvaluation(unigram(), order_seed=SEED)(model(position_mode="none"), batches(6))
    assert abs(metrics["eval_order_gap"]) < 1e-5 and metrics["eval_order_gap_stderr"] < 1e-5
    assert "the model (almost) ignores word order" in describe_evaluation(metrics)


def figures(margin: float, margin_stderr: float, gap: float, gap_stderr: float) -> dict[str, float]:
    return {
        "eval_loss": 7.0 - margin,
        "eval_unigram_loss": 7.0,
        "eval_order_gap": gap,
        "eval_unigram_margin_stderr": margin_stderr,
        "eval_order_gap_stderr": gap_stderr,
    }


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        (
            figures(3.0, 0.1, 0.3, 0.05),
            "eval loss 4.000 is 3.000 ± 0.200 nats below the unigram baseline 7.000: the model has learned context; "
            "order gap +0.300 ± 0.100 nats: the model uses word order.",
        ),
        (
            figures(0.6, 0.1, 0.3, 0.15),
            "eval loss 6.400 is 0.600 ± 0.200 nats below the unigram baseline 7.000: too few masked tokens to tell "
            "whether the model has learned context; order gap +0.300 ± 0.300 nats: too few masked tokens to tell "
            "whether the model uses word order.",
        ),
        (
            figures(0.2, 0.1, 0.02, 0.03),
            "eval loss 6.800 is 0.200 ± 0.200 nats below the unigram baseline 7.000: little context learned yet; "
            "order gap +0.020 ± 0.060 nats: the model (almost) ignores word order.",
        ),
        (
            figures(-1.0, 0.2, -0.05, 0.01),
            "eval loss 8.000 is 1.000 ± 0.400 nats above the unigram baseline 7.000: worse than token frequencies "
            "alone, no context learned yet; order gap -0.050 ± 0.020 nats: the model (almost) ignores word order.",
        ),
        (
            figures(3.0, math.nan, 0.3, math.nan),
            "eval loss 4.000 is 3.000 nats below the unigram baseline 7.000: too few masked tokens to tell whether "
            "the model has learned context; order gap +0.300 nats: too few masked tokens to tell whether the model "
            "uses word order.",
        ),
    ],
    ids=["clear", "within-two-errors", "below-the-thresholds", "above-the-baseline", "one-block"],
)
def test_a_finding_is_stated_only_outside_two_standard_errors(metrics, expected):
    assert describe_evaluation(metrics) == expected
