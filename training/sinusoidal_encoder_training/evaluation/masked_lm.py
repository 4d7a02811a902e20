"""Evaluation as a library: what a masked-LM model scores on masked blocks, for the training loop (pretraining's
evaluation), the evaluate command (`stages.evaluate`) and the lab. `MaskedLMEvaluation` is a plain callable:
`MaskedLMEvaluation(unigram_log_probs, order_seed)(model, batches)` gives the metrics (`eval_loss`,
`eval_perplexity`, `eval_unigram_loss`, `eval_order_gap`, `eval_masked_tokens`).

How to read a masked-LM evaluation: is the model better than token frequencies, and does it use word order?

- The **unigram baseline** scores each masked token by its frequency in the training split (add-one smoothed over
  the tokens that can be masked). A model whose eval loss is not clearly below it has learned no context.
- The **order gap** scores every validation block twice: as written, and with its inner tokens (all but the leading
  [CLS]) permuted by a permutation fixed per block, the masked tokens moving with their tokens (the same tokens are
  masked, the same count). A model without position information is permutation-equivariant, so its gap is 0; a
  positive gap (nats per masked token) is how much the model relies on order.
"""

from __future__ import annotations

from collections.abc import Iterable

import datasets
import numpy as np
import torch

from sinusoidal_encoder_training.data.pipeline import derive_seed
from sinusoidal_encoder_training.runs.metrics_log import perplexity

# the first blocks of a streamed training split that the unigram counts read
STREAMING_UNIGRAM_BLOCKS = 20_000
# how the log reads an evaluation: nats below the unigram baseline for "context learned", order gap for "uses order"
CONTEXT_MARGIN = 0.5
ORDER_GAP_USED = 0.1


def unigram_log_probs(
    train: datasets.Dataset | datasets.IterableDataset, vocab_size: int, special_ids: Iterable[int]
) -> torch.Tensor:
    """(V,) float64 log-frequencies of the token ids of a packed training split, add-one smoothed over the ids that
    can be masked; special tokens (never masked) get -inf. A streamed split is counted over its first blocks."""
    counts = np.zeros(vocab_size, dtype=np.float64)
    if isinstance(train, datasets.IterableDataset):
        for index, example in enumerate(train):
            if index == STREAMING_UNIGRAM_BLOCKS:
                break
            counts += np.bincount(np.asarray(example["input_ids"]), minlength=vocab_size)[:vocab_size]
    else:
        for batch in train.with_format("numpy").iter(batch_size=4096):
            ids = np.asarray(batch["input_ids"]).ravel()
            counts += np.bincount(ids, minlength=vocab_size)[:vocab_size]
    counts += 1.0
    special = [i for i in special_ids if 0 <= i < vocab_size]
    counts[special] = 0.0
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(counts / counts.sum()))


def permute_inner_tokens(batch: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """The batch with each block's tokens 1..T-1 permuted (position 0, [CLS], stays), labels moved with their tokens.
    The permutation of a block is keyed by (seed, its `example_id`): the same at every evaluation and on every
    process."""
    input_ids, labels = batch["input_ids"], batch["labels"]  # (B, T), (B, T)
    seq_len = input_ids.shape[1]
    orders = []
    for example_id in batch["example_id"].tolist():
        generator = torch.Generator().manual_seed(derive_seed(seed, "order", example_id))
        inner = torch.randperm(seq_len - 1, generator=generator) + 1  # (T-1,)
        orders.append(torch.cat([torch.zeros(1, dtype=torch.long), inner]))
    index = torch.stack(orders).to(input_ids.device)  # (B, T): source position of each new position
    return {
        **batch,
        "input_ids": input_ids.gather(1, index),
        "labels": labels.gather(1, index),
    }


def describe_evaluation(metrics: dict[str, float]) -> str:
    """One sentence on what an evaluation shows: context learned (loss against the unigram baseline), order used."""
    below = metrics["eval_unigram_loss"] - metrics["eval_loss"]
    gap = metrics["eval_order_gap"]
    if below >= 0:
        context = (
            f"eval loss {metrics['eval_loss']:.3f} is {below:.3f} nats below the unigram baseline "
            f"{metrics['eval_unigram_loss']:.3f}: "
            + ("the model has learned context" if below >= CONTEXT_MARGIN else "little context learned yet")
        )
    else:  # worse than predicting every masked token by its frequency alone
        context = (
            f"eval loss {metrics['eval_loss']:.3f} is {-below:.3f} nats above the unigram baseline "
            f"{metrics['eval_unigram_loss']:.3f}: worse than token frequencies alone, no context learned yet"
        )
    order = f"order gap {gap:+.3f} nats: " + (
        "the model uses word order" if gap >= ORDER_GAP_USED else "the model (almost) ignores word order"
    )
    return f"{context}; {order}."


def masked_lm_loss_sum(model, batch: dict[str, torch.Tensor], **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's masked-LM loss summed over its labelled tokens, and their number: the model's loss times the
    count, the model being given `num_items_in_batch` (transformers' convention: the summed loss divided by it, which
    `SinusoidalEncoderForMaskedLM` follows). `inputs` go to the model as well (`position_ids`, ...)."""
    count = (batch["labels"] != -100).sum()
    items = count.clamp(min=1)
    output = model(input_ids=batch["input_ids"], labels=batch["labels"], num_items_in_batch=items, **inputs)
    return output.loss * items, count


class MaskedLMEvaluation:
    """A masked-LM evaluator: called with a model and batches of masked blocks (`input_ids`, `labels`, and
    `example_id` for the order gap), it gives the masked-token-weighted loss and perplexity over all of them, and
    beside them the unigram baseline on the same masked tokens (with `unigram_log_probs`, `unigram_log_probs`'s
    (V,) tensor) and the order gap (with `order_seed`): the loss of the same blocks with their tokens permuted
    (`permute_inner_tokens`), minus the loss. With an `accelerator`, the sums of every process are added up
    (each process passing its own batches)."""

    def __init__(self, unigram_log_probs: torch.Tensor | None = None, order_seed: int | None = None):
        self.unigram_log_probs = unigram_log_probs
        self.order_seed = order_seed

    @torch.no_grad()
    def __call__(self, model, batches: Iterable[dict[str, torch.Tensor]], accelerator=None, **inputs) -> dict:
        training = model.training
        model.eval()
        device = accelerator.device if accelerator is not None else next(model.parameters()).device
        totals = torch.zeros(4, dtype=torch.float64, device=device)  # loss, permuted, unigram, count
        unigram = None if self.unigram_log_probs is None else self.unigram_log_probs.to(device)
        for batch in batches:
            batch = {name: value.to(device) for name, value in batch.items()}
            loss_sum, count = masked_lm_loss_sum(model, batch, **inputs)
            permuted_sum = torch.zeros((), device=device)
            if self.order_seed is not None:
                permuted_sum, _ = masked_lm_loss_sum(model, permute_inner_tokens(batch, self.order_seed), **inputs)
            unigram_sum = torch.zeros((), dtype=torch.float64, device=device)
            if unigram is not None:
                labels = batch["labels"]  # (B, T)
                unigram_sum = -torch.where(labels != -100, unigram[labels.clamp(min=0)], 0.0).sum()
            totals += torch.stack([loss_sum.double(), permuted_sum.double(), unigram_sum, count.double()])
        if accelerator is not None:
            totals = accelerator.reduce(totals, reduction="sum")
        model.train(training)
        loss, permuted, unigram_loss = (totals[:3] / totals[3].clamp(min=1)).tolist()
        metrics = {"eval_loss": loss, "eval_perplexity": perplexity(loss)}
        if unigram is not None:
            metrics["eval_unigram_loss"] = unigram_loss
        if self.order_seed is not None:
            metrics["eval_order_gap"] = permuted - loss
        metrics["eval_masked_tokens"] = int(totals[3].item())
        return metrics
