"""The inputs the benchmarks time (benchmark.py, utilization.py, deployment.py; gpu.py with larger batches): seeded
random token ids of the main job's paths, the same in every benchmark and every run. Ids start at 5 (past the special
tokens); 4 is the mask token of the shipped tokenizer, 0 the padding."""

from __future__ import annotations

import torch

MASK_ID, PAD_ID, FIRST_ID = 4, 0, 5


def mlm_batch(vocab_size: int, batch: int = 16, length: int = 128, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A masked-LM training batch: `batch` × `length` ids with 15% of them masked, and the labels of the masked ones
    (-100 elsewhere)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(FIRST_ID, vocab_size, (batch, length), generator=generator)
    masked = torch.rand(batch, length, generator=generator) < 0.15
    return ids.masked_fill(masked, MASK_ID), torch.where(masked, ids, -100)


def dense_batch(vocab_size: int, seed: int = 2, batch: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch` × 128 ids (32 by default) and an all-ones attention mask."""
    ids = torch.randint(FIRST_ID, vocab_size, (batch, 128), generator=torch.Generator().manual_seed(seed))
    return ids, torch.ones_like(ids)


def padded_batch(vocab_size: int, seed: int = 1, batch: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch` sequences (32 by default) of 40–256 tokens (about 40% padding), right-padded to 256, and the attention
    mask. The lengths depend on the seed and the batch size only, not on the vocabulary."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(40, 257, (batch,), generator=generator)
    ids = torch.randint(FIRST_ID, vocab_size, (batch, 256), generator=generator)
    mask = (torch.arange(256)[None] < lengths[:, None]).long()  # (batch, 256)
    return ids.masked_fill(mask == 0, PAD_ID), mask


INFERENCE_BATCHES = {"dense": dense_batch, "padded": padded_batch}
