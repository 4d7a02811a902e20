"""Task heads: masked LM with tied embeddings, sequence classification (BERT's problem types), token
classification, extractive question answering and multiple choice."""

from __future__ import annotations

import pytest
import torch
from conftest import random_ids, tiny_config
from torch.nn import functional as F
from transformers import AutoModelForMaskedLM

import sinusoidal_encoder as se


def is_tied(model) -> bool:
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_masked_lm_decoder_is_tied_to_the_input_embeddings(tmp_path):
    assert se.SinusoidalEncoderForMaskedLM._tied_weights_keys == {
        "lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"
    }
    model = se.SinusoidalEncoderForMaskedLM(tiny_config())
    assert is_tied(model)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert is_tied(loaded)
    torch.testing.assert_close(loaded.get_output_embeddings().weight, model.get_input_embeddings().weight)
    # training one keeps them one
    loaded.train()
    optimizer = torch.optim.SGD(loaded.parameters(), lr=0.1)
    ids = random_ids(2, 8)
    loaded(ids, labels=ids).loss.backward()
    optimizer.step()
    assert is_tied(loaded)


def test_tie_survives_resize_token_embeddings(tmp_path):
    model = se.SinusoidalEncoderForMaskedLM(tiny_config())
    model.resize_token_embeddings(120)
    assert model.config.vocab_size == 120
    assert model.get_input_embeddings().weight.shape == (120, 32)
    assert model.get_output_embeddings().bias.shape == (120,)
    assert is_tied(model)
    ids = torch.tensor([[1, 119, 5]])
    assert model(ids).logits.shape == (1, 3, 120)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert is_tied(loaded) and loaded.config.vocab_size == 120


def test_untied_when_config_says_so():
    model = se.SinusoidalEncoderForMaskedLM(tiny_config(tie_word_embeddings=False))
    assert not is_tied(model)


def test_masked_lm_loss_ignores_unmasked_positions():
    model = se.SinusoidalEncoderForMaskedLM(tiny_config()).eval()
    ids = random_ids(2, 10)
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, 7] = 5, 9
    out = model(ids, labels=labels)
    expected = F.cross_entropy(out.logits[[0, 1], [3, 7]], torch.tensor([5, 9]))
    torch.testing.assert_close(out.loss, expected)


@pytest.mark.parametrize(
    ("num_labels", "labels", "problem_type", "loss_fn"),
    [
        (1, torch.tensor([0.5, -1.25]), "regression", lambda logits, y: F.mse_loss(logits.squeeze(-1), y)),
        (3, torch.tensor([2, 0]), "single_label_classification", F.cross_entropy),
        (
            3,
            torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]),
            "multi_label_classification",
            F.binary_cross_entropy_with_logits,
        ),
    ],
)
def test_sequence_classification_problem_types(num_labels, labels, problem_type, loss_fn):
    model = se.SinusoidalEncoderForSequenceClassification(tiny_config(num_labels=num_labels)).eval()
    out = model(random_ids(2, 7), labels=labels)
    assert out.logits.shape == (2, num_labels)
    assert model.config.problem_type == problem_type
    torch.testing.assert_close(out.loss, loss_fn(out.logits, labels))


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sequence_classification_ignores_padding(pooling):
    model = se.SinusoidalEncoderForSequenceClassification(tiny_config(num_labels=2, classifier_pooling=pooling))
    model.eval()
    ids = random_ids(1, 6)
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 6 + [0] * 4])
    with torch.no_grad():
        torch.testing.assert_close(model(padded, attention_mask=mask).logits, model(ids).logits, atol=1e-5, rtol=1e-5)


def test_token_classification():
    model = se.SinusoidalEncoderForTokenClassification(tiny_config(num_labels=5)).eval()
    labels = torch.randint(0, 5, (2, 9))
    labels[:, 0] = -100
    out = model(random_ids(2, 9), labels=labels)
    assert out.logits.shape == (2, 9, 5)
    keep = labels != -100
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits[keep], labels[keep]))


def test_question_answering():
    model = se.SinusoidalEncoderForQuestionAnswering(tiny_config()).eval()
    start, end = torch.tensor([1, 4]), torch.tensor([3, 8])
    out = model(random_ids(2, 11), start_positions=start, end_positions=end)
    assert out.start_logits.shape == out.end_logits.shape == (2, 11)
    expected = (F.cross_entropy(out.start_logits, start) + F.cross_entropy(out.end_logits, end)) / 2
    torch.testing.assert_close(out.loss, expected)
    # an answer outside the input (truncated away) is left out of the loss, as in BERT
    out_of_range = model(random_ids(2, 11), start_positions=torch.tensor([1, 50]), end_positions=torch.tensor([3, 60]))
    expected = (
        F.cross_entropy(out_of_range.start_logits[:1], start[:1])
        + F.cross_entropy(out_of_range.end_logits[:1], end[:1])
    ) / 2
    torch.testing.assert_close(out_of_range.loss, expected)
    assert model(random_ids(2, 11)).loss is None


def test_question_answering_leaves_padded_positions_out_of_the_loss():
    """A window's loss is the same alone as in a batch that pads it: padded positions take no share of the start and
    end softmax (no answer lies there); the logits are returned as computed."""
    model = se.SinusoidalEncoderForQuestionAnswering(tiny_config()).eval()
    ids, mask = random_ids(2, 11), torch.ones(2, 11, dtype=torch.long)
    mask[1, 6:] = 0
    start, end = torch.tensor([1, 2]), torch.tensor([3, 4])
    batch = model(ids, attention_mask=mask, start_positions=start, end_positions=end)
    alone = [
        model(ids[i : i + 1, :length], start_positions=start[i : i + 1], end_positions=end[i : i + 1]).loss
        for i, length in ((0, 11), (1, 6))
    ]
    torch.testing.assert_close(batch.loss, sum(alone) / 2)
    assert torch.isfinite(batch.start_logits).all() and torch.isfinite(batch.end_logits).all()


def test_multiple_choice():
    model = se.SinusoidalEncoderForMultipleChoice(tiny_config()).eval()
    ids = random_ids(6, 8).view(2, 3, 8)
    labels = torch.tensor([2, 0])
    out = model(ids, attention_mask=torch.ones_like(ids), labels=labels)
    assert out.logits.shape == (2, 3)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))
    # each choice is scored on its own: the score of a choice does not depend on the others
    with torch.no_grad():
        single = model(ids[:1, 1:2]).logits[0, 0]
    torch.testing.assert_close(single, out.logits[0, 1], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="num_choices"):
        model(random_ids(2, 8))


def test_sparse_prediction_gives_the_dense_loss_and_gradients():
    dense = se.SinusoidalEncoderForMaskedLM(tiny_config())
    sparse = se.SinusoidalEncoderForMaskedLM(tiny_config(sparse_prediction=True))
    sparse.load_state_dict(dense.state_dict())
    ids = random_ids(3, 12)
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5], labels[1, 6], labels[2, 11] = 7, 8, 9, 10
    out_dense, out_sparse = dense(ids, labels=labels), sparse(ids, labels=labels)
    assert out_dense.logits.shape == (3, 12, 99) and out_sparse.logits.shape == (4, 99)  # labelled positions only
    torch.testing.assert_close(out_sparse.loss, out_dense.loss, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out_sparse.logits, out_dense.logits[labels != -100], atol=1e-5, rtol=1e-5)
    out_dense.loss.backward()
    out_sparse.loss.backward()
    for (name, a), b in zip(dense.named_parameters(), sparse.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-6, rtol=1e-5, msg=name)
    # without labels (pipelines, users) the logits stay dense
    assert sparse(ids).logits.shape == (3, 12, 99)
