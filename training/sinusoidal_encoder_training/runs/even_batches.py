"""The examples accelerate repeats to even out the last batch of a prepared evaluation loader across processes:
which of a process's examples are real (`real_examples`), and labels that leave the repeated ones out
(`unlabel_repeated_examples`), so that a sum over every process counts each example once."""

from __future__ import annotations

import torch
from accelerate import Accelerator


def real_examples(accelerator: Accelerator, local: int) -> int:
    """How many of the `local` examples of this process's current evaluation batch are real: all but on the last
    batch of a prepared loader, where accelerate repeats examples to even it out across processes
    (`gradient_state.remainder` r > 0, the real examples of the gathered batch). The example in local row i of
    process p is row p × local + i of the gathered batch, real if that is below r: the real ones are a prefix."""
    state = accelerator.gradient_state
    if not state.end_of_dataloader or state.remainder <= 0:
        return local
    return max(0, min(local, state.remainder - accelerator.process_index * local))


def unlabel_repeated_examples(labels: torch.Tensor, accelerator: Accelerator) -> torch.Tensor:
    """`labels` (one row per example) with -100 in the rows of the examples accelerate repeats to even out the last
    batch of a prepared evaluation loader across processes, so that summing over every process counts each example
    once, while every process still runs the same forwards. On that batch (`gradient_state.remainder` r > 0, the
    number of real examples in the gathered batch), the example in local row i of process p is row
    p × local batch + i of the gathered batch: kept if that is below r. Elsewhere `labels` is returned as it is."""
    state = accelerator.gradient_state
    if not state.end_of_dataloader or state.remainder <= 0:
        return labels
    local = labels.shape[0]
    rows = accelerator.process_index * local + torch.arange(local, device=labels.device)  # (B,)
    repeated = (rows >= state.remainder).reshape(-1, *[1] * (labels.dim() - 1))
    return labels.masked_fill(repeated, -100)
