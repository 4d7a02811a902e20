"""Shared fixtures: tiny configs (hidden 32, 2 layers) so the whole suite runs in minutes on 2 CPU cores."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

import sinusoidal_encoder as se

VOCAB_SIZE = 99


def tiny_config(**overrides) -> se.SinusoidalEncoderConfig:
    values = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    values.update(overrides)
    return se.SinusoidalEncoderConfig(**values)


def random_ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB_SIZE, (batch, length), generator=generator)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="session")
def tokenizer():
    """A small byte-level BPE trained here with the `tokenizers` library on the Python documentation topics that ship
    with CPython (real English text, offline), wrapped as a transformers fast tokenizer."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE * 4, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(list(topics.values()), trainer=trainer)
    cls_id, sep_id = bpe.token_to_id("[CLS]"), bpe.token_to_id("[SEP]")
    bpe.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=64,
        model_input_names=["input_ids", "attention_mask"],
    )
