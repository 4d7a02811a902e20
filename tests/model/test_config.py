"""Invalid configuration values and invalid forward inputs raise a ValueError that names the field."""

from __future__ import annotations

import pytest
import torch
from conftest import random_ids, tiny_config

import sinusoidal_encoder as se


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hidden_size", 33),  # odd: no sin/cos pairs
        ("num_attention_heads", 5),  # does not divide 32
        ("hidden_size", 0),
        ("hidden_size", -8),
        ("vocab_size", 0),
        ("num_hidden_layers", 0),
        ("num_attention_heads", 0),
        ("intermediate_size", -1),
        ("max_position_embeddings", 0),
        ("hidden_size", 32.0),
        ("hidden_act", "not_an_activation"),
        ("position_encoding_base", 0.0),
        ("position_encoding_base", -10000.0),
        ("position_encoding_base", float("inf")),  # every frequency but the first 0
        ("initializer_range", float("inf")),  # a model of NaNs, trained and saved
        ("layer_norm_eps", float("nan")),
        ("hidden_dropout_prob", 1.0),
        ("hidden_dropout_prob", -0.1),
        ("attention_probs_dropout_prob", 1.5),
        ("classifier_dropout", 1.0),
        ("layer_norm_eps", 0.0),
        ("classifier_pooling", "max"),
        ("pad_token_id", 99),
    ],
)
def test_invalid_config_value_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        tiny_config(**{field: value})


def test_model_rechecks_a_config_changed_after_creation():
    config = tiny_config()
    config.num_attention_heads = 3
    with pytest.raises(ValueError, match="num_attention_heads"):
        se.SinusoidalEncoderModel(config)


def test_defaults_are_the_papers_base_encoder():
    config = se.SinusoidalEncoderConfig()
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.intermediate_size) == (
        512,
        6,
        8,
        2048,
    )
    assert config.hidden_act == "relu" and not config.norm_first and config.scale_embeddings
    assert config.position_encoding_base == 10000.0 and config.hidden_dropout_prob == 0.1


@pytest.fixture(scope="module")
def model():
    return se.SinusoidalEncoderModel(tiny_config()).eval()


def test_forward_needs_exactly_one_of_ids_and_embeds(model):
    with pytest.raises(ValueError, match=r"input_ids.*inputs_embeds"):
        model()
    ids = random_ids(2, 5)
    with pytest.raises(ValueError, match=r"input_ids.*inputs_embeds"):
        model(input_ids=ids, inputs_embeds=torch.zeros(2, 5, 32))


@pytest.mark.parametrize("shape", [(2, 6), (3, 5), (5,), (2, 1, 5), (2, 1, 5, 4)])
def test_attention_mask_shape_must_match(model, shape):
    with pytest.raises(ValueError, match="attention_mask"):
        model(random_ids(2, 5), attention_mask=torch.ones(shape, dtype=torch.long))


@pytest.mark.parametrize("shape", [(2, 6), (3, 5), (5,)])
def test_position_ids_shape_must_match(model, shape):
    with pytest.raises(ValueError, match="position_ids"):
        model(random_ids(2, 5), position_ids=torch.zeros(shape, dtype=torch.long))


def test_input_ids_must_be_two_dimensional(model):
    with pytest.raises(ValueError, match="input_ids"):
        model(random_ids(2, 5)[0])
    with pytest.raises(ValueError, match="inputs_embeds"):
        model(inputs_embeds=torch.zeros(5, 32))


def test_token_type_ids_are_refused_not_ignored(model):
    with pytest.raises(ValueError, match="token_type_ids"):
        model(random_ids(2, 5), token_type_ids=torch.zeros(2, 5, dtype=torch.long))
