"""Evaluation as a library: what a masked-LM model scores on masked blocks, for the training loop (pretraining's
evaluation), the evaluate command (`stages.evaluate`) and the lab. `MaskedLMEvaluation` is a plain callable:
`MaskedLMEvaluation(unigram_log_probs, order_seed)(model, batches)` gives the metrics (`eval_loss`,
`eval_perplexity`, `eval_unigram_loss`, `eval_order_gap`, `eval_masked_tokens`, and the standard errors of the two
differences the verdict reads: `eval_unigram_margin_stderr`, `eval_order_gap_stderr`).

How to read a masked-LM evaluation: is the model better than token frequencies, and does it use word order?

- The **unigram baseline** scores each masked token by its frequency in the training split (add-one smoothed over
  the tokens that can be masked). A model whose eval loss is not clearly below it has learned no context.
- The **order gap** scores every validation block twice: as written, and with its inner tokens (all but the leading
  [CLS]) permuted by a permutation fixed per block, the masked tokens moving with their tokens (the same tokens are
  masked, the same count). A model without position information is permutation-equivariant, so its gap is 0; a
  positive gap (nats per masked token) is how much the model relies on order.

Both are differences of two losses on the same masked tokens, and a small validation split gives them by chance: each
comes with its **standard error**, over the validation documents (each document's difference summed over the masked
tokens of its blocks, the documents taken as the sample: the ratio estimator's, as a cluster sample's, for blocks cut
from one long document are not independent; a block counts with the document it starts in, which its batch carries
as `document`). The sentence that reads an evaluation (`describe_evaluation`) states a finding only where its
threshold lies outside two standard errors of the figure; else it says the split has too few masked tokens to tell.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import datasets
import numpy as np
import torch
import torch.nn.functional as F

from sinusoidal_encoder_training.data.pipeline import derive_seed
from sinusoidal_encoder_training.runs.metrics_log import perplexity

# the first blocks of a streamed training split that the unigram counts read
STREAMING_UNIGRAM_BLOCKS = 20_000
# how the log reads an evaluation: nats below the unigram baseline for "context learned", order gap for "uses order"
CONTEXT_MARGIN = 0.5
ORDER_GAP_USED = 0.1
# how many standard errors from a threshold a figure must lie for the sentence to state a finding (about 95%)
STANDARD_ERRORS = 2.0


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
    """One sentence on what an evaluation shows: context learned (loss against the unigram baseline), order used;
    each figure with two standard errors (`± ...`) where the metrics have them, and a finding stated only where its
    threshold lies outside them (a figure without its standard error is read as it is)."""
    below = metrics["eval_unigram_loss"] - metrics["eval_loss"]
    below_error = STANDARD_ERRORS * stderr_of(metrics, "eval_unigram_margin_stderr")
    gap = metrics["eval_order_gap"]
    gap_error = STANDARD_ERRORS * stderr_of(metrics, "eval_order_gap_stderr")
    if below - below_error >= CONTEXT_MARGIN:
        finding = "the model has learned context"
    elif below + below_error < 0:
        finding = "worse than token frequencies alone, no context learned yet"
    elif below + below_error < CONTEXT_MARGIN:
        finding = "little context learned yet"
    else:  # the margin within reach of chance (or no standard error: a single block)
        finding = "too few masked tokens to tell whether the model has learned context"
    side = "below" if below >= 0 else "above"
    context = (
        f"eval loss {metrics['eval_loss']:.3f} is {abs(below):.3f}{plus_minus(below_error)} nats {side} the unigram "
        f"baseline {metrics['eval_unigram_loss']:.3f}: {finding}"
    )
    if gap - gap_error >= ORDER_GAP_USED:
        finding = "the model uses word order"
    elif gap + gap_error < ORDER_GAP_USED:
        finding = "the model (almost) ignores word order"
    else:
        finding = "too few masked tokens to tell whether the model uses word order"
    return f"{context}; order gap {gap:+.3f}{plus_minus(gap_error)} nats: {finding}."


def stderr_of(metrics: dict[str, float], name: str) -> float:
    """A standard error of `metrics`: 0.0 where it has none (read as it is), NaN where it is unknown (None: the
    metrics as read back from metrics.jsonl, which writes NaN as null)."""
    value = metrics.get(name, 0.0)
    return math.nan if value is None else value


def plus_minus(error: float) -> str:
    """` ± 0.123` for a figure's error (two standard errors); nothing where the metrics have none, or where one
    block cannot give it (NaN: the finding then says the split is too small to tell)."""
    return f" ± {error:.3f}" if error != 0.0 and math.isfinite(error) else ""


def block_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(B,) float64: each block's masked-LM loss summed over its labelled tokens, from the model's `logits` (`(B, T,
    V)`, or `(N, V)` over the labelled positions in row-major order, with sparse prediction)."""
    labelled = labels != -100  # (B, T)
    rows = labelled.nonzero()[:, 0]  # (N,): the block of each labelled token, row-major as sparse logits are
    if logits.dim() == 3:
        logits = logits[labelled]  # (N, V)
    losses = F.cross_entropy(logits.float(), labels[labelled], reduction="none")  # (N,)
    return torch.zeros(labels.shape[0], dtype=torch.float64, device=labels.device).index_add_(0, rows, losses.double())


def sample_rows(samples: torch.Tensor, counts: torch.Tensor, differences: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """(B, 2 + K) float64: what the standard errors need of a batch's blocks: the sample each block belongs to (its
    document), its masked-token count n_b, and each of the K differences summed over its masked tokens."""
    return torch.stack([samples.double(), counts.double(), *(d.double() for d in differences)], dim=1)


def difference_stderrs(rows: torch.Tensor) -> list[float]:
    """The standard error of each per-token difference Σd/N of the split's `sample_rows`, the samples (documents)
    taken as the sample: their blocks' counts and differences summed (n_s, d_s), the ratio estimator's
    sqrt(S/(S-1) · Σ_s (d_s - mean·n_s)²) / N over the S samples holding a masked token (a block repeated to even out
    the last batch holds none); NaN below two samples."""
    rows = rows.cpu().double()  # (M, 2 + K), from any device
    unique, sample = torch.unique(rows[:, 0], return_inverse=True)  # (S,), (M,): the sample of each row
    # (S, 1 + K): each sample's n_s, then each of its d_s
    sums = torch.zeros(len(unique), rows.shape[1] - 1, dtype=torch.float64).index_add_(0, sample, rows[:, 1:])
    sums = sums[sums[:, 0] > 0]
    samples, tokens = len(sums), sums[:, 0].sum().item()
    if samples < 2:
        return [math.nan] * (rows.shape[1] - 2)
    errors = []
    for difference in sums[:, 1:].T:  # (S,) each
        residuals = difference - difference.sum() / tokens * sums[:, 0]  # d_s - mean·n_s
        errors.append(math.sqrt(samples / (samples - 1) * residuals.square().sum().item()) / tokens)
    return errors


def masked_lm_loss_sum(
    model, batch: dict[str, torch.Tensor], **inputs
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch's masked-LM loss summed over its labelled tokens, their number, and each block's loss summed
    (`block_losses`, (B,)): the model's loss times the count, the model being given `num_items_in_batch`
    (transformers' convention: the summed loss divided by it, which `SinusoidalEncoderForMaskedLM` follows).
    `inputs` go to the model as well (`position_ids`, ...)."""
    count = (batch["labels"] != -100).sum()
    items = count.clamp(min=1)
    output = model(input_ids=batch["input_ids"], labels=batch["labels"], num_items_in_batch=items, **inputs)
    return output.loss * items, count, block_losses(output.logits, batch["labels"])


class MaskedLMEvaluation:
    """A masked-LM evaluator: called with a model and batches of masked blocks (`input_ids`, `labels`, and
    `example_id` for the order gap), it gives the masked-token-weighted loss and perplexity over all of them, and
    beside them the unigram baseline on the same masked tokens (with `unigram_log_probs`, `unigram_log_probs`'s
    (V,) tensor) and the order gap (with `order_seed`): the loss of the same blocks with their tokens permuted
    (`permute_inner_tokens`), minus the loss; and the standard errors of the margin below the baseline and of the
    gap (`difference_stderrs`), the documents taken as the sample: a batch's `document` (B,) gives the document of
    each block (`data.batches`); without it, each block is a sample of its own. With an `accelerator`, the sums of
    every process are added up (each process passing its own batches)."""

    def __init__(self, unigram_log_probs: torch.Tensor | None = None, order_seed: int | None = None):
        self.unigram_log_probs = unigram_log_probs
        self.order_seed = order_seed

    @torch.no_grad()
    def __call__(self, model, batches: Iterable[dict[str, torch.Tensor]], accelerator=None, **inputs) -> dict:
        training = model.training
        model.eval()
        device = accelerator.device if accelerator is not None else next(model.parameters()).device
        totals = torch.zeros(4, dtype=torch.float64, device=device)  # loss, permuted, unigram, count
        rows, seen = [], 0  # (B, 4) per batch: document, masked tokens, margin below the unigram baseline, gap
        unigram = None if self.unigram_log_probs is None else self.unigram_log_probs.to(device)
        for batch in batches:
            batch = {name: value.to(device) for name, value in batch.items()}
            labels = batch["labels"]  # (B, T)
            loss_sum, count, blocks = masked_lm_loss_sum(model, batch, **inputs)
            permuted_sum, permuted_blocks = torch.zeros((), device=device), blocks
            if self.order_seed is not None:
                permuted = permute_inner_tokens(batch, self.order_seed)
                permuted_sum, _, permuted_blocks = masked_lm_loss_sum(model, permuted, **inputs)
            unigram_sum, unigram_blocks = torch.zeros((), dtype=torch.float64, device=device), blocks
            if unigram is not None:
                unigram_blocks = -torch.where(labels != -100, unigram[labels.clamp(min=0)], 0.0).sum(1)  # (B,)
                unigram_sum = unigram_blocks.sum()
            totals += torch.stack([loss_sum.double(), permuted_sum.double(), unigram_sum, count.double()])
            counts = (labels != -100).sum(1)  # (B,)
            samples = block_samples(batch, seen, accelerator)  # (B,)
            seen += len(samples)
            rows.append(sample_rows(samples, counts, (unigram_blocks - blocks, permuted_blocks - blocks)))
        rows = torch.cat(rows) if rows else torch.zeros(0, 4, dtype=torch.float64, device=device)
        if accelerator is not None:
            totals = accelerator.reduce(totals, reduction="sum")
            rows = accelerator.gather(accelerator.pad_across_processes(rows))  # padding: rows of no masked token
        model.train(training)
        loss, permuted, unigram_loss = (totals[:3] / totals[3].clamp(min=1)).tolist()
        tokens = totals[3].item()
        metrics = {"eval_loss": loss, "eval_perplexity": perplexity(loss)}
        if unigram is not None:
            metrics["eval_unigram_loss"] = unigram_loss
        if self.order_seed is not None:
            metrics["eval_order_gap"] = permuted - loss
        metrics["eval_masked_tokens"] = int(tokens)
        margin_stderr, gap_stderr = difference_stderrs(rows)
        if unigram is not None:
            metrics["eval_unigram_margin_stderr"] = margin_stderr
        if self.order_seed is not None:
            metrics["eval_order_gap_stderr"] = gap_stderr
        return metrics


def block_samples(batch: dict[str, torch.Tensor], seen: int, accelerator) -> torch.Tensor:
    """(B,) the sample of each block of `batch` for the standard errors: its `document` where the batch has it, else
    the block itself (its `example_id`); blocks without either are numbered as they come (`seen` before them), apart
    on every process of `accelerator`."""
    for name in ("document", "example_id"):
        if name in batch:
            return batch[name]
    rows = torch.arange(seen, seen + batch["labels"].shape[0], device=batch["labels"].device)  # (B,)
    return rows if accelerator is None else rows * accelerator.num_processes + accelerator.process_index
