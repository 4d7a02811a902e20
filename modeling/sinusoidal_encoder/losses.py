"""The heads' losses, one convention for all: a loss summed over its units (masked tokens, examples, labels,
labelled tokens, candidate spans) and divided by `num_items_in_batch` when the caller counts the units of a whole
step (transformers' Trainer, the training library's loop), else by this batch's units.

This file is copied as-is into Hub repositories with the modeling file: it imports only torch and its sibling
`configuration_sinusoidal_encoder.py`.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from .configuration_sinusoidal_encoder import SinusoidalEncoderConfig


def mean_over_units(loss_sum: torch.Tensor, count: int | torch.Tensor, num_items_in_batch: int | torch.Tensor | None):
    """A loss summed over items, divided by the items of this batch, or by `num_items_in_batch` when the caller
    (transformers' Trainer under gradient accumulation) counts them over several batches."""
    if num_items_in_batch is not None:
        return loss_sum / num_items_in_batch
    return loss_sum / count


def classification_losses(problem_type: str, logits: torch.Tensor, labels: torch.Tensor):
    """Loss sums and loss units per example, `(B,)` and `(B,)`, for the problem types of the heads:
    "single_label_classification" (cross-entropy; one unit), "multi_label_classification" (BCE with logits; one unit
    per label), "regression" (squared error; one unit per output), "token_classification" (cross-entropy per token;
    one unit per labelled token, -100 ignored). A head's `loss` is the sum over its batch divided by the units."""
    logits = logits.float()
    batch = labels.shape[0]
    if problem_type == "token_classification":
        losses = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100, reduction="none")  # (B, T)
        return losses.sum(dim=1), (labels != -100).sum(dim=1)
    if problem_type == "single_label_classification":
        losses = F.cross_entropy(logits.reshape(batch, -1), labels.reshape(-1), reduction="none")  # (B,)
        return losses, torch.ones_like(losses)
    if problem_type == "regression":
        errors = F.mse_loss(logits.reshape(batch, -1), labels.reshape(batch, -1).float(), reduction="none")  # (B, L)
    elif problem_type == "multi_label_classification":
        errors = F.binary_cross_entropy_with_logits(logits, labels.float(), reduction="none")  # (B, L)
    else:
        raise ValueError(f"Unknown `problem_type` {problem_type!r}.")
    return errors.sum(dim=1), torch.full_like(errors[:, 0], errors.shape[1])


def sequence_problem_type(config: SinusoidalEncoderConfig, num_labels: int, labels: torch.Tensor) -> str:
    """`config.problem_type`, inferred as BERT does when unset (and then stored in the config, as BERT does):
    regression for one label, single-label for integer labels, multi-label otherwise."""
    if config.problem_type is None:
        if num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    return config.problem_type


def classification_loss(
    problem_type: str,
    logits: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    loss_sums, units = classification_losses(problem_type, logits, labels)
    return mean_over_units(loss_sums.sum(), units.sum(), num_items_in_batch)


def multi_label_loss(
    logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
) -> torch.Tensor:
    """Binary cross-entropy with logits over every entry of `labels` that is not -100 (one unit each): the span
    head's, whose labels mark each candidate span with 1 or 0 per label, and -100 where a span is no candidate."""
    kept = labels != -100
    loss_sum = F.binary_cross_entropy_with_logits(logits.float()[kept], labels[kept].float(), reduction="sum")
    return mean_over_units(loss_sum, kept.sum(), num_items_in_batch)


def masked_lm_loss(
    logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
) -> torch.Tensor:
    """Cross-entropy of every labelled token (one unit each; -100 ignored): the masked-LM head's, `logits`
    `(B, T, V)` or, with sparse prediction, `(N, V)`."""
    loss_sum = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100, reduction="sum"
    )
    return mean_over_units(loss_sum, (labels != -100).sum(), num_items_in_batch)


def answer_span_loss(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    start_positions: torch.Tensor,
    end_positions: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The question-answering head's: the mean of the start and end cross-entropies, one unit per example with a
    position inside the sequence (positions outside are ignored, as in BERT). Padded positions (0 in a `(B, T)`
    `attention_mask`) are left out of the softmax: no answer lies there, and a window's loss is the same however much
    padding its batch gives it."""
    ignored = start_logits.shape[1]
    start_positions = start_positions.view(-1).clamp(0, ignored)  # (B,)
    end_positions = end_positions.view(-1).clamp(0, ignored)  # (B,)
    padded = attention_mask == 0 if attention_mask is not None and attention_mask.dim() == 2 else None  # (B, T)

    def scores(logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()  # (B, T)
        return logits if padded is None else logits.masked_fill(padded, torch.finfo(logits.dtype).min)

    loss_sum = sum(
        F.cross_entropy(scores(logits), positions, ignore_index=ignored, reduction="sum")
        for logits, positions in ((start_logits, start_positions), (end_logits, end_positions))
    )
    return mean_over_units(loss_sum / 2, (start_positions != ignored).sum(), num_items_in_batch)
