"""A batch's rows read at once and collated, with no Python object per token: the readers of a dataset's rows
(`take_rows`, `IndexedExamples` and its `EpochTaggedSampler`, `IndexedStream`, `BatchedRows`), the keyed masking of
masked-LM batches (`KeyedMaskingCollator`) and dynamic padding (`PaddingCollator`). The DataLoaders of pretraining,
evaluation and fine-tuning are built of them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from transformers import PreTrainedTokenizerBase

from sinusoidal_encoder_training.data.pipeline import derive_seed


def take_rows(dataset: datasets.Dataset, indices: list[int]) -> pa.Table | None:
    """The rows `indices` of `dataset` as one Arrow table, one chunk per column: one take on the table that backs
    it (datasets' own gather makes a chunk of every row, which each column read then pays to join). None where the
    dataset reads its rows through an indices mapping (after `shuffle`, `select`, `filter`), for the caller to read
    them the datasets way."""
    if dataset._indices is not None:
        return None
    return dataset.data.table.take(pa.array(indices, type=pa.int64()))


class IndexedExamples(torch.utils.data.Dataset):
    """Rows of a packed map-style dataset, each tagged with its index (the key of its masks) and, where the split
    has the column (`data.pipeline.pack_blocks`), its `document`. A DataLoader reads a batch's rows at once
    (`__getitems__`: one Arrow take, no Python object per token). An index may come tagged with the epoch it was
    drawn in, `(epoch, index)` (`EpochTaggedSampler`): the row then carries its `epoch` too."""

    def __init__(self, dataset: datasets.Dataset):
        self.dataset = dataset
        self.columns = ["input_ids", *(["document"] if "document" in dataset.column_names else [])]
        self.arrays = dataset.with_format("numpy", columns=self.columns)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int | tuple[int, int]) -> dict[str, Any]:
        if isinstance(index, tuple):
            epoch, index = index
            return {**self[index], "epoch": epoch}
        row = self.dataset[index]
        return {**{name: row[name] for name in self.columns}, "example_id": index}

    def __getitems__(self, indices: list[int] | list[tuple[int, int]]) -> dict[str, torch.Tensor]:
        """The rows `indices` as one batch: `input_ids` (B, T) and their `example_id` (B,), `document` (B,) where
        the split has it, and `epoch` (B,) when the indices came tagged with it."""
        tagged = bool(indices) and isinstance(indices[0], tuple)
        rows = [index for _, index in indices] if tagged else indices
        arrays = self.read(rows)  # (B, T) ids when the blocks have one length
        if arrays is None:  # blocks of several lengths: each row on its own
            return [self[index] for index in indices]
        batch = {name: torch.from_numpy(array).long() for name, array in arrays.items()}
        batch["example_id"] = torch.tensor(rows, dtype=torch.long)
        if tagged:
            batch["epoch"] = torch.tensor([epoch for epoch, _ in indices], dtype=torch.long)
        return batch

    def read(self, rows: list[int]) -> dict[str, np.ndarray] | None:
        """The columns of `rows`: their ids as one (B, T) int64 numpy array, and their `document` (B,) where the
        split has it; None when the blocks have several lengths."""
        table = take_rows(self.dataset, rows) if rows else None
        if table is None:
            arrays = self.arrays[rows]
            return None if arrays["input_ids"].dtype == object else {name: arrays[name] for name in self.columns}
        column = table.column("input_ids").combine_chunks()
        lengths = pc.min_max(pc.list_value_length(column))
        if lengths["min"] != lengths["max"]:
            return None
        ids = column.flatten().to_numpy().astype("int64").reshape(len(rows), -1)  # a copy of its own
        return {"input_ids": ids, **{name: table.column(name).to_numpy().astype("int64") for name in self.columns[1:]}}


class EpochTaggedSampler(torch.utils.data.Sampler):
    """The indices of `sampler`, each tagged with the epoch it is drawn in: `(epoch, index)`, which
    `IndexedExamples` hands on with the row. DataLoader workers that persist from one epoch to the next keep the
    collator they were started with; the epoch travels with each index instead, so the masks of a block are those of
    its epoch (`KeyedMaskingCollator`). The task sets `epoch` before each epoch's batches are drawn."""

    def __init__(self, sampler: torch.utils.data.Sampler):
        self.sampler = sampler
        self.epoch = 0

    @property
    def generator(self) -> torch.Generator | None:
        """The order's generator (that of `sampler`), which accelerate synchronises across processes."""
        return self.sampler.generator

    @generator.setter
    def generator(self, generator: torch.Generator | None) -> None:
        self.sampler.generator = generator

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.epoch
        return ((epoch, index) for index in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)


class IndexedStream(torch.utils.data.IterableDataset):
    """A streamed packed dataset, each block tagged with an index no other block of the stream has (the key of its
    masks): its position in the stream, read by one reader. DataLoader workers share a stream of several shards out
    (datasets gives each of the first `readers = min(workers, shards)` its own shards, and the others nothing): a
    block's index is then its position in its worker's part times `readers`, plus the worker's number. A stream of
    one shard is read by one worker whatever their number: its indices, and masks, are those of no workers. A block
    carries its `document` (`data.pipeline.pack_blocks`), numbered the same way: each reader counts the documents of
    its own shards."""

    def __init__(self, dataset: datasets.IterableDataset):
        self.dataset = dataset

    @property
    def shards(self) -> int:
        """The stream's shards: the most DataLoader workers that can read it."""
        return getattr(self.dataset, "num_shards", None) or self.dataset.n_shards  # n_shards: datasets 3

    def __iter__(self) -> Iterator[dict[str, Any]]:
        worker = torch.utils.data.get_worker_info()
        readers, reader = 1, 0
        if worker is not None:
            readers, reader = min(worker.num_workers, self.shards), worker.id
        for index, example in enumerate(self.dataset):
            block = {"input_ids": example["input_ids"], "example_id": index * readers + reader}
            if "document" in example:  # each reader counts the documents of its own shards from 0
                block["document"] = example["document"] * readers + reader
            yield block


# SplitMix64's constants (Steele, Lea & Flood, 2014), as the signed 64-bit integers of torch's int64 arithmetic
_GOLDEN, _MIX1, _MIX2 = -7046029254386353131, -4658895280553007687, -7723592293110705685
UNIT = 1 << 53  # a keyed draw is an integer in [0, UNIT): a probability p is the draws below round(p * UNIT)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """The logical right shift of int64 `x` (torch's `>>` is arithmetic: it copies the sign bit)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on an int64 tensor, element-wise: a bijection of 64-bit integers whose outputs for
    consecutive inputs pass as independent and uniform (int64 multiplication wraps, as the algorithm needs)."""
    z = x + _GOLDEN
    z = (z ^ _shift_right(z, 30)) * _MIX1
    z = (z ^ _shift_right(z, 27)) * _MIX2
    return z ^ _shift_right(z, 31)


def keyed_draws(keys: torch.Tensor, length: int, stream: int) -> torch.Tensor:
    """(B, T) integers uniform in [0, UNIT), one per (row key, position, stream): a counter-based generator, so the
    draw of a position depends only on its row's key, the position and the stream, never on the batch."""
    positions = splitmix64(torch.arange(length, dtype=torch.long) * 8 + stream)  # (T,)
    return _shift_right(splitmix64(keys[:, None] + positions[None, :]), 11)  # (B, T)


def masked_per_row(mlm_probability: float, length: int) -> int:
    """The masked tokens of a row of `length` tokens under exact counting: max(1, round(mlm_probability x length))
    (BERT's `num_to_predict`), at most the row."""
    return min(max(1, round(mlm_probability * length)), length)


class KeyedMaskingCollator:
    """BERT's masking, as `DataCollatorForLanguageModeling` does it (`mlm_probability` of the tokens that are not
    special, of which 80% become [MASK], 10% a random token and 10% stay), with the random numbers of each position
    drawn from a counter-based generator keyed by (seed, epoch, example index, position): `keyed_draws`, for the
    whole batch at once.

    The masks of a block therefore do not depend on batching, the number of processes, DataLoader prefetching or
    workers, or on where a run was resumed: a resumed run sees the masks of the uninterrupted one, and evaluation
    (a fixed epoch key) sees the same masks every time. Takes a list of examples or a batch (`IndexedExamples`); the
    epoch of a row is that of its tag where it has one (`EpochTaggedSampler`), else `epoch`. The rows' `document`,
    where they have one, goes on with the batch (the sample of an evaluation's standard errors).

    With `exact_count`, each row of T tokens has exactly max(1, round(mlm_probability × T)) masked tokens (all its
    tokens that are not special, where it has fewer): those of its smallest draws, as BERT's original data
    (`create_pretraining_data.py`, `num_to_predict`) does. Batches of one shape then have one number of masked
    tokens, which a model predicting at the masked tokens only needs to replay one CUDA graph.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        mlm_probability: float,
        seed: int,
        epoch: int | str = 0,
        exact_count: bool = False,
    ):
        if not 0 < mlm_probability < 1:
            raise ValueError(f"mlm_probability must be in (0, 1), got {mlm_probability}.")
        self.mlm_probability = mlm_probability
        self.exact_count = exact_count
        self.mask_token_id = tokenizer.mask_token_id
        self.vocab_size = len(tokenizer)
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)))
        self.seed = seed
        self.epoch = epoch

    def __call__(self, examples: list[dict[str, Any]] | dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if isinstance(examples, dict):
            input_ids, example_ids = examples["input_ids"], examples["example_id"]  # (B, T), (B,)
            epochs, documents = examples.get("epoch"), examples.get("document")  # (B,) each, where the rows have them
        else:
            input_ids = torch.tensor([example["input_ids"] for example in examples], dtype=torch.long)  # (B, T)
            example_ids = torch.tensor([example["example_id"] for example in examples], dtype=torch.long)  # (B,)
            epochs, documents = (
                torch.tensor([example[name] for example in examples]) if name in examples[0] else None
                for name in ("epoch", "document")
            )
        keys = splitmix64(example_ids + self.epoch_keys(epochs))  # (B,)
        length = input_ids.shape[1]
        draws, special = keyed_draws(keys, length, 0), torch.isin(input_ids, self.special_ids)  # (B, T), (B, T)
        if self.exact_count:
            count = masked_per_row(self.mlm_probability, length)
            chosen = torch.where(special, UNIT, draws).topk(count, dim=1, largest=False).indices  # (B, count)
            masked = torch.zeros_like(special).scatter_(1, chosen, True) & ~special  # (B, T)
        else:
            masked = (draws < round(self.mlm_probability * UNIT)) & ~special  # (B, T)
        replaced = masked & (keyed_draws(keys, length, 1) < round(0.8 * UNIT))
        randomised = masked & ~replaced & (keyed_draws(keys, length, 2) < UNIT // 2)
        ids = torch.where(replaced, self.mask_token_id, input_ids)
        ids = torch.where(randomised, keyed_draws(keys, length, 3) % self.vocab_size, ids)
        batch = {"input_ids": ids, "labels": torch.where(masked, input_ids, -100), "example_id": example_ids}
        return batch if documents is None else {**batch, "document": documents}  # for the standard errors

    def epoch_keys(self, epochs: torch.Tensor | None) -> torch.Tensor | int:
        """The key of each row's epoch: that of its tag (B,), or without tags that of `self.epoch`."""
        if epochs is None:
            return derive_seed(self.seed, self.epoch)
        unique, inverse = torch.unique(epochs, return_inverse=True)
        return torch.tensor([derive_seed(self.seed, epoch) for epoch in unique.tolist()], dtype=torch.long)[inverse]


class BatchedRows(torch.utils.data.Dataset):
    """Rows of a tokenised split (`datasets.Dataset`); a DataLoader reads a batch's rows at once, as one Arrow
    table (`__getitems__`), for `PaddingCollator`."""

    def __init__(self, dataset: datasets.Dataset):
        self.dataset = dataset
        self.tables = dataset.with_format("arrow")

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.dataset[index]

    def __getitems__(self, indices: list[int]) -> pa.Table:
        table = take_rows(self.dataset, indices)
        return table if table is not None else self.tables[indices]


def row_lengths(rows: BatchedRows) -> np.ndarray:
    """(N,) the tokens of each row of a tokenised split (`input_ids`; a row of several token lists, the choices of
    multiple choice: its longest), read as Arrow lengths, no Python object per row."""
    column = rows.dataset.with_format("arrow")[:]["input_ids"].combine_chunks()
    if pa.types.is_list(column.type.value_type) or pa.types.is_large_list(column.type.value_type):
        inner = pc.list_value_length(pc.list_flatten(column)).to_numpy(zero_copy_only=False)
        longest = np.zeros(len(column), dtype=np.int64)
        np.maximum.at(longest, pc.list_parent_indices(column).to_numpy(zero_copy_only=False), inner)
        return longest
    return pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)


def length_grouped_sampler(lengths: np.ndarray, batch_size: int, generator: torch.Generator):
    """transformers' `LengthGroupedSampler` (Trainer's `group_by_length`) over rows of `lengths`: a random order
    drawn from `generator` (reseeded by the task every epoch, as the random sampler it replaces), cut into groups of
    50 batches of `batch_size` (fewer for a small set), each sorted by length, longest first, and the longest batch
    first of all (an out-of-memory shows at once)."""
    from transformers.trainer_pt_utils import LengthGroupedSampler

    return LengthGroupedSampler(batch_size, lengths=lengths.tolist(), generator=generator)


def longest_first(lengths: np.ndarray) -> list[int]:
    """The rows' positions, the longest row first (ties in their order): batches of rows of similar lengths."""
    return np.argsort(-lengths, kind="stable").tolist()


def padding_share(lengths: np.ndarray, order: list[int], batch_size: int, multiple: int | None) -> float:
    """The share of padding among the tokens of batches of `batch_size` rows taken in `order`, each padded to its
    longest row (rounded up to `multiple`), as `PaddingCollator` pads them."""
    real = padded = 0
    for start in range(0, len(order), batch_size):
        batch = lengths[order[start : start + batch_size]]
        longest = int(batch.max())
        if multiple:
            longest = -(-longest // multiple) * multiple
        real += int(batch.sum())
        padded += longest * len(batch)
    return 1 - real / max(padded, 1)


# what each padded column is filled with past a row's end (the ids: the tokenizer's padding token)
PADDING_VALUES = {"attention_mask": 0, "token_type_ids": 0, "special_tokens_mask": 1, "labels": -100}


class PaddingCollator:
    """Dynamic padding per batch, as transformers' `DataCollatorWithPadding`, `DataCollatorForTokenClassification`
    and `DataCollatorForMultipleChoice` make it, for a whole batch at once (numpy over the Arrow columns, no Python
    object per token): each column of token lists padded on the tokenizer's side to the batch's longest row
    (rounded up to `pad_to_multiple_of`), the ids with the padding token, `attention_mask` and `token_type_ids` with
    0, integer `labels` (a tag per token) with -100; a list of token lists per row (the choices of multiple choice)
    as (batch, choices, tokens); lists of floats of one length (multi-label targets) stacked; scalars as they are
    (float labels as float32); `label` named `labels`. Takes a table (`BatchedRows`) or a list of rows."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, pad_to_multiple_of: int | None = None):
        self.pad_token_id = tokenizer.pad_token_id
        self.left = tokenizer.padding_side == "left"
        self.multiple = pad_to_multiple_of

    def __call__(self, rows: pa.Table | list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
        batch = {}
        for name in table.column_names:
            column = table.column(name).combine_chunks()
            key = "labels" if name in ("label", "label_ids") else name
            if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
                batch[key] = self.pad(column, key)
            else:
                batch[key] = _tensor(column.to_numpy(zero_copy_only=False))
        return batch

    def pad(self, column: pa.ListArray, key: str) -> torch.Tensor:
        """(B, T) of the rows of a list column: padded to the longest (token lists), or stacked (float vectors);
        (B, C, T) of a column of C lists per row (multiple choice: every choice padded to the batch's longest)."""
        import numpy as np

        if pa.types.is_list(column.type.value_type) or pa.types.is_large_list(column.type.value_type):
            choices = self.pad(column.flatten(), key)  # (B * C, T)
            return choices.view(len(column), -1, choices.shape[-1])  # (B, C, T)
        values = column.flatten().to_numpy(zero_copy_only=False)  # every row's items, row after row
        lengths = np.diff(column.offsets.to_numpy())  # (B,)
        if values.dtype.kind == "f":  # a vector per row (multi-label targets): one length, stacked
            return _tensor(values.reshape(len(column), -1))
        longest = int(lengths.max(initial=0))
        if self.multiple:
            longest = -(-longest // self.multiple) * self.multiple
        fill = self.pad_token_id if key not in PADDING_VALUES else PADDING_VALUES[key]
        padded = np.full((len(column), longest), fill, dtype=np.int64)  # (B, T)
        positions = np.arange(longest)[None, :]  # (1, T)
        filled = positions >= longest - lengths[:, None] if self.left else positions < lengths[:, None]  # (B, T)
        padded[filled] = values  # row-major: each row's items in order, in its filled positions
        return torch.from_numpy(padded)


def _tensor(array) -> torch.Tensor:
    """A numpy array as the tensor transformers' collators make: floats as float32, integers as int64."""
    tensor = torch.from_numpy(array.copy())
    return tensor.float() if tensor.is_floating_point() else tensor.long()
