"""The models compared, all of one size: the reference code's encoder (5 layers, d=64, 8 heads, feed-forward 256,
ReLU, post-LN, token embeddings × √d; google-deepmind/randomized_positional_encodings, `models/transformer.py`).

    sincos       ours as the paper: sinusoidal encoding of positions 0…T-1
    none         ours without a position encoding (tokens × √d alone): the floor
    learned      transformers' BertForTokenClassification: learned absolute positions (a table up to 2,048)
    randomized   ours with `position_mode="ordered_subset"`: the paper's randomized sin/cos (L = 2,048)
    offset       ours with `position_mode="random_offset"`: each training sequence starts at a random position, so that
                 positions up to 2,048 are seen in training (a shifted block: gaps are always 1)
    window       ours with `long_input_attention_window`: past the training length each token attends only to
                 tokens within half the training length
    randomized_evenly
                 the randomized arm's models with `position_inference="evenly_spaced"`: in evaluation the
                 k-th of n tokens gets ⌊k·L/n⌋ instead of a random draw (training is the randomized arm's)
    stratified   ours with `position_mode="stratified"`, `position_inference="evenly_spaced"`: in
                 training the k-th of n tokens gets a position drawn from the k-th of n equal cells of 0…L-1 (its
                 rank stays in its position); in evaluation the middle of that cell
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import BertForTokenClassification

import sinusoidal_encoder as se
from benchmarks.bert_reference import bert_config

from .tasks import PAD, Task, vocab_size

ARMS = ("sincos", "none", "learned", "randomized", "offset", "window", "randomized_evenly", "stratified")
# arms that train exactly as another arm and differ only at inference: the window acts on inputs longer than the
# training length, which training never sees; `position_inference` acts in evaluation mode only. Their runs
# are the base arm's runs, evaluated once more.
EVALUATED_FROM = {"window": "sincos", "randomized_evenly": "randomized"}
POSITION_RANGE = 2048  # the reference code's `noise_max_length`: positions the randomized arms train on


@dataclass(frozen=True)
class ModelSize:
    hidden_size: int = 64
    num_hidden_layers: int = 5
    num_attention_heads: int = 8
    intermediate_size: int = 256
    dropout: float = 0.0
    norm_first: bool = False  # the paper's post-LN; True: pre-LN (ours only: BERT is post-LN)


def our_config(task: Task, size: ModelSize, train_length: int, **overrides) -> se.SinusoidalEncoderConfig:
    values = dict(
        vocab_size=vocab_size(task),
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        intermediate_size=size.intermediate_size,
        hidden_act="relu",
        hidden_dropout_prob=size.dropout,
        attention_probs_dropout_prob=size.dropout,
        classifier_dropout=0.0,
        max_position_embeddings=task.sequence_length(train_length),  # the longest training sequence
        norm_first=size.norm_first,
        pad_token_id=PAD,
        num_labels=task.symbols,
    )
    values.update(overrides)
    return se.SinusoidalEncoderConfig(**values)


def inference_overrides(arm: str, task: Task, train_length: int) -> dict:
    """The config fields that make `arm`'s inference differ from its base arm's (see `EVALUATED_FROM`)."""
    if arm == "window":
        return {"long_input_attention_window": task.sequence_length(train_length) // 2}
    if arm == "randomized_evenly":
        return {"position_inference": "evenly_spaced"}
    return {}


def build_model(arm: str, task: Task, size: ModelSize, train_length: int):
    """A freshly initialised model of `arm` (seed the global RNG first) with a per-token head over the symbols."""
    if arm not in ARMS:
        raise ValueError(f"Unknown arm {arm!r}: choose from {list(ARMS)}.")
    if arm == "learned":  # transformers' BERT with our dimensions, activation and dropouts
        config = bert_config(our_config(task, size, train_length), max_length=POSITION_RANGE)
        config.num_labels = task.symbols
        config.classifier_dropout = 0.0
        return BertForTokenClassification(config)
    randomized = {"position_mode": "ordered_subset", "position_range": POSITION_RANGE}
    overrides = {
        "sincos": {},
        "none": {"position_mode": "none"},
        "randomized": randomized,
        "randomized_evenly": randomized | inference_overrides("randomized_evenly", task, train_length),
        "offset": {
            "position_mode": "random_offset",
            "max_position_offset": POSITION_RANGE - task.sequence_length(train_length),
        },
        "window": inference_overrides("window", task, train_length),
        "stratified": {
            "position_mode": "stratified",
            "position_range": POSITION_RANGE,
            "position_inference": "evenly_spaced",
        },
    }[arm]
    return se.SinusoidalEncoderForTokenClassification(our_config(task, size, train_length, **overrides))
