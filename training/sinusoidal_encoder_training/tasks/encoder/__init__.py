"""The tasks of every model folder, which no recipe fine-tunes: fill-mask (the masked-LM head pretraining trains)
and feature-extraction (the encoder alone, in every folder)."""

from __future__ import annotations

from sinusoidal_encoder_training.tasks.task import Task

TASKS = (
    Task(
        "fill-mask",
        "AutoModelForMaskedLM",
        "ForMaskedLM",
        "masked-LM head",
        "pretrained by masked language modelling",
        "Fill-Mask",
        {"": "nats per masked token"},
        ("logits",),
        metrics={"": ("perplexity",)},
    ),
    Task(
        "feature-extraction",
        "AutoModel",
        "Model",
        "encoder",
        "an encoder",
        "Feature Extraction",
        {},
        ("last_hidden_state",),
    ),
)
