"""transformers' BERT of our model's shape: the reference the benchmarks and experiments measure ours against."""

from __future__ import annotations

from transformers import BertConfig


def bert_config(ours, max_length: int, **overrides) -> BertConfig:
    """BERT with our model's dimensions, activation, dropouts, epsilon and padding id, one token type, tied
    embeddings, and learned positions for `max_length` tokens; `overrides` set other fields."""
    settings = dict(
        vocab_size=ours.vocab_size,
        hidden_size=ours.hidden_size,
        num_hidden_layers=ours.num_hidden_layers,
        num_attention_heads=ours.num_attention_heads,
        intermediate_size=ours.intermediate_size,
        hidden_act=ours.hidden_act,
        hidden_dropout_prob=ours.hidden_dropout_prob,
        attention_probs_dropout_prob=ours.attention_probs_dropout_prob,
        layer_norm_eps=ours.layer_norm_eps,
        max_position_embeddings=max_length,
        type_vocab_size=1,
        pad_token_id=ours.pad_token_id,
        tie_word_embeddings=True,
    )
    return BertConfig(**{**settings, **overrides})
