"""Corpora in, packed token blocks out: loading (Hub, local files, built-in), tokenisation, packing, masking.

Shared by pretraining and tokenizer training, so that both accept exactly the same data flags.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from itertools import chain
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import torch
from transformers import PreTrainedTokenizerBase

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import DataConfig
from sinusoidal_encoder_training.data.corpus import load_builtin_corpus
from sinusoidal_encoder_training.data.files import LOCAL_FORMATS, _extension, check_split
from sinusoidal_encoder_training.resources import SHIPPED_TOKENIZER  # noqa: F401  (where the stages import it from)


def load_raw_datasets(
    config: DataConfig, seed: int, numbers: bool = False
) -> datasets.DatasetDict | datasets.IterableDatasetDict:
    """The corpus as "train" and "validation" splits, from the Hub, local files, or the built-in corpus; `seed` draws
    the validation split of a dataset without one. With `numbers` (a command that reads the numeric columns:
    fine-tuning's labels and targets), a NaN or infinite number in the splits as loaded is refused
    (`check_finite_numbers`), before the training split is divided, so that its rows are the file's. Commands that
    read one text column (pretraining, tokenizer training, distillation) leave the other columns alone."""
    if config.dataset_name is None and config.train_file is None:
        return load_builtin_corpus()
    if config.dataset_name is not None:
        source, kwargs = config.dataset_name, {"name": config.dataset_config_name}
    else:
        files = {"train": config.train_file}
        if config.validation_file:
            files["validation"] = config.validation_file
        source, kwargs = LOCAL_FORMATS[_extension(config.train_file)], {"data_files": files}
    try:
        raw = datasets.load_dataset(source, streaming=config.streaming, **kwargs)
    except Exception as error:  # missing Hub dataset, unreadable or malformed file, ...: say which input failed
        raise UsageError(f"Could not load {_source_flag(config)}: {type(error).__name__}: {error}") from error
    if "train" not in raw:
        raise UsageError(f"The dataset has no 'train' split (it has {list(raw)}).")
    if numbers and not config.streaming:
        for split in ("train", "validation"):
            if split in raw:
                check_finite_numbers(raw[split], _split_source(config, split))
    if "validation" in raw:
        return type(raw)({"train": raw["train"], "validation": raw["validation"]})
    if config.streaming:
        held_out = config.streaming_validation_examples
        return datasets.IterableDatasetDict(
            {"train": raw["train"].skip(held_out), "validation": raw["train"].take(held_out)}
        )
    check_split(_source_flag(config), len(raw["train"]), config.validation_split_percentage)  # a Hub dataset's
    split = raw["train"].train_test_split(test_size=config.validation_split_percentage / 100, seed=seed)
    return datasets.DatasetDict({"train": split["train"], "validation": split["test"]})


def _source_flag(config: DataConfig) -> str:
    """The flag that named the corpus, with its value."""
    return f"--dataset_name {config.dataset_name!r}" if config.dataset_name else f"--train_file {config.train_file!r}"


def _split_source(config: DataConfig, split: str) -> str:
    """Where a split as loaded comes from: its file (flag and path), or the split of the Hub dataset."""
    if config.dataset_name:
        return f"--dataset_name {config.dataset_name!r}, split {split!r},"
    flag = "--train_file" if split == "train" else "--validation_file"
    return f"{flag} {getattr(config, flag[2:])!r},"


FINITE_CHECK_ROWS = 10_000_000  # rows of each split that `check_finite_numbers` reads
FINITE_CHECK_SLICE = 100_000  # rows read at once


def check_finite_numbers(dataset: datasets.Dataset, source: str) -> None:
    """A `UsageError` naming `source` (the file or split), the row (from 1, a CSV header not counted) and the column
    when a number of `dataset` is NaN or infinite, in a column of numbers, a list of them or a nested field: a
    regression target of NaN trains a model of NaNs, a label of NaN becomes a class named "nan". (A missing value,
    null, is not refused here: the tasks say what they need.) Only columns whose type holds floats are read, with
    Arrow's vectorised `is_finite`, in slices of `FINITE_CHECK_SLICE` rows; the scan is bounded to the first
    `FINITE_CHECK_ROWS` rows of the split (about a second per ten million numbers): past them, a non-finite value
    is left to the training loop, which stops at a non-finite loss."""
    table = dataset.with_format("arrow")
    columns = [name for name in dataset.column_names if _holds_floats(dataset.data.schema.field(name).type)]
    for start in range(0, min(len(dataset), FINITE_CHECK_ROWS) if columns else 0, FINITE_CHECK_SLICE):
        rows = table[start : min(start + FINITE_CHECK_SLICE, FINITE_CHECK_ROWS)]
        for name in columns:
            found = _first_non_finite(rows.column(name).combine_chunks())
            if found is not None:
                row = start + found
                value = repr(dataset[row][name])
                value = value if len(value) <= 60 else value[:57] + "..."
                raise UsageError(
                    f"{source} row {row + 1}, column {name!r} is {value}: NaN and infinity are not numbers a "
                    "model can learn from; fix the value or remove the row."
                )


def _holds_floats(kind: pa.DataType) -> bool:
    """Whether an Arrow type holds floating-point numbers, itself or in its lists or fields."""
    if pa.types.is_floating(kind):
        return True
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _holds_floats(kind.value_type)
    if pa.types.is_struct(kind):
        return any(_holds_floats(kind.field(i).type) for i in range(kind.num_fields))
    return False


def _first_non_finite(array: pa.Array) -> int | None:
    """The position of the first value of `array` that is, or holds, a NaN or an infinity; None when none does."""
    kind = array.type
    if pa.types.is_floating(kind):
        found = pc.indices_nonzero(pc.fill_null(pc.invert(pc.is_finite(array)), False))
        return found[0].as_py() if len(found) else None
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        inner = _first_non_finite(pc.list_flatten(array)) if _holds_floats(kind.value_type) else None
        return None if inner is None else pc.list_parent_indices(array)[inner].as_py()
    if pa.types.is_struct(kind):
        fields = [pc.struct_field(array, [i]) for i in range(kind.num_fields) if _holds_floats(kind.field(i).type)]
        found = [at for at in map(_first_non_finite, fields) if at is not None]
        return min(found) if found else None
    return None


def text_column(dataset: datasets.Dataset | datasets.IterableDataset, requested: str | None) -> str:
    names = dataset.column_names
    if names is None:  # some streamed datasets only know their columns once read
        names = list(next(iter(dataset)).keys())
    if requested is not None and requested not in names:
        raise UsageError(f"--text_column_name {requested!r} is not a column of the dataset (columns: {names}).")
    column = requested or ("text" if "text" in names else names[0])
    feature = (dataset.features or {}).get(column)
    if feature is not None and getattr(feature, "dtype", None) not in ("string", "large_string"):
        raise UsageError(f"--text_column_name: column {column!r} holds {feature}, not text (columns: {names}).")
    return column


def iterate_texts(raw: datasets.DatasetDict | datasets.IterableDatasetDict, column: str, split: str = "train"):
    """Batches of raw texts of one split (for tokenizer training), empty lines skipped."""
    batch: list[str] = []
    for example in raw[split]:
        text = example[column]
        if text and text.strip():
            batch.append(text)
            if len(batch) == 1000:
                yield batch
                batch = []
    if batch:
        yield batch


def tokenize_documents(
    raw: datasets.DatasetDict | datasets.IterableDatasetDict,
    tokenizer: PreTrainedTokenizerBase,
    text_column_name: str | None = None,
    num_proc: int | None = None,
) -> datasets.DatasetDict | datasets.IterableDatasetDict:
    """Every document's token ids, without special tokens, one row per document (`input_ids`; None for an empty or
    blank document, which packing leaves out), for `pack_blocks` at any length: a corpus evaluated at several
    lengths is tokenised once. Map-style datasets are cached by `datasets`; streamed ones are tokenised on the fly."""
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise UsageError("The tokenizer needs a cls_token and a sep_token to pack documents into blocks.")
    column = text_column(raw["train"], text_column_name)
    streaming = isinstance(raw["train"], datasets.IterableDataset)

    def tokenize(batch: dict[str, list[Any]]) -> dict[str, list[list[int] | None]]:
        kept = [i for i, text in enumerate(batch[column]) if text and text.strip()]
        ids: list[list[int] | None] = [None] * len(batch[column])
        if kept:
            texts = [batch[column][i] for i in kept]
            encoded = tokenizer(texts, add_special_tokens=False, return_attention_mask=False, verbose=False)
            for i, row in zip(kept, encoded["input_ids"], strict=True):
                ids[i] = row
        return {"input_ids": ids}

    tokenized = {}
    for split, dataset in raw.items():
        kwargs: dict[str, Any] = {"batched": True, "remove_columns": dataset.column_names}
        if not streaming:
            kwargs.update(num_proc=num_proc, desc=f"Tokenizing {split}")
        tokenized[split] = dataset.map(tokenize, **kwargs)
    return type(raw)(tokenized)


def pack_blocks(
    tokenized: datasets.DatasetDict | datasets.IterableDatasetDict,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    num_proc: int | None = None,
) -> datasets.DatasetDict | datasets.IterableDatasetDict:
    """The documents of `tokenize_documents` packed into blocks of exactly `max_seq_length` ids.

    Documents are joined with the separator token; each block starts with the classification token and holds
    `max_seq_length - 1` ids of the stream, so no compute goes to padding. The tail of each map batch (1,000
    documents) shorter than a block is dropped."""
    streaming = isinstance(tokenized["train"], datasets.IterableDataset)
    span = max_seq_length - 1
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id

    def pack(batch: dict[str, list[Any]]) -> dict[str, list[list[int]]]:
        stream = list(chain.from_iterable([*ids, sep_id] for ids in batch["input_ids"] if ids is not None))
        usable = len(stream) // span * span
        return {"input_ids": [[cls_id, *stream[i : i + span]] for i in range(0, usable, span)]}

    packed = {}
    for split, dataset in tokenized.items():
        kwargs: dict[str, Any] = {"batched": True, "remove_columns": ["input_ids"]}
        if not streaming:
            kwargs.update(num_proc=num_proc, desc=f"Packing {split} into blocks of {max_seq_length}")
        packed[split] = dataset.map(pack, **kwargs)
        if not streaming and len(packed[split]) == 0:
            raise UsageError(
                f"The {split} split holds no complete block of --max_seq_length={max_seq_length} tokens after "
                f"tokenisation ({len(dataset)} documents, empty ones dropped): give it more text or lower the length."
            )
    return type(tokenized)(packed)


def tokenize_and_pack(
    raw: datasets.DatasetDict | datasets.IterableDatasetDict,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    text_column_name: str | None = None,
    num_proc: int | None = None,
) -> datasets.DatasetDict | datasets.IterableDatasetDict:
    """Tokenise every document and pack the token stream into blocks of exactly `max_seq_length` ids
    (`tokenize_documents`, then `pack_blocks`)."""
    tokenized = tokenize_documents(raw, tokenizer, text_column_name, num_proc)
    return pack_blocks(tokenized, tokenizer, max_seq_length, num_proc)


def take_rows(dataset: datasets.Dataset, indices: list[int]) -> pa.Table | None:
    """The rows `indices` of `dataset` as one Arrow table, one chunk per column: one take on the table that backs
    it (datasets' own gather makes a chunk of every row, which each column read then pays to join). None where the
    dataset reads its rows through an indices mapping (after `shuffle`, `select`, `filter`), for the caller to read
    them the datasets way."""
    if dataset._indices is not None:
        return None
    return dataset.data.table.take(pa.array(indices, type=pa.int64()))


class IndexedExamples(torch.utils.data.Dataset):
    """Rows of a packed map-style dataset, each tagged with its index (the key of its masks). A DataLoader reads a
    batch's rows at once (`__getitems__`: one Arrow take, no Python object per token). An index may come tagged with
    the epoch it was drawn in, `(epoch, index)` (`EpochTaggedSampler`): the row then carries its `epoch` too."""

    def __init__(self, dataset: datasets.Dataset):
        self.dataset = dataset
        self.arrays = dataset.with_format("numpy", columns=["input_ids"])

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int | tuple[int, int]) -> dict[str, Any]:
        if isinstance(index, tuple):
            epoch, index = index
            return {**self[index], "epoch": epoch}
        return {"input_ids": self.dataset[index]["input_ids"], "example_id": index}

    def __getitems__(self, indices: list[int] | list[tuple[int, int]]) -> dict[str, torch.Tensor]:
        """The rows `indices` as one batch: `input_ids` (B, T) and their `example_id` (B,), and `epoch` (B,) when
        the indices came tagged with it."""
        tagged = bool(indices) and isinstance(indices[0], tuple)
        rows = [index for _, index in indices] if tagged else indices
        ids = self.block(rows)  # (B, T) when the blocks have one length
        if ids is None:  # blocks of several lengths: each row on its own
            return [self[index] for index in indices]
        batch = {"input_ids": torch.from_numpy(ids).long(), "example_id": torch.tensor(rows, dtype=torch.long)}
        if tagged:
            batch["epoch"] = torch.tensor([epoch for epoch, _ in indices], dtype=torch.long)
        return batch

    def block(self, rows: list[int]):
        """The ids of `rows` as one (B, T) int64 numpy array, or None when they have several lengths."""
        table = take_rows(self.dataset, rows) if rows else None
        if table is None:
            arrays = self.arrays[rows]["input_ids"]
            return None if arrays.dtype == object else arrays
        column = table.column("input_ids").combine_chunks()
        lengths = pc.min_max(pc.list_value_length(column))
        if lengths["min"] != lengths["max"]:
            return None
        return column.flatten().to_numpy().astype("int64").reshape(len(rows), -1)  # a copy of its own


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
    """A streamed packed dataset, each block tagged with its position in the stream."""

    def __init__(self, dataset: datasets.IterableDataset):
        self.dataset = dataset

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for index, example in enumerate(self.dataset):
            yield {"input_ids": example["input_ids"], "example_id": index}


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed derived from `parts` (a seed, a purpose, an epoch, an example index, ...) by SHA-256: the same
    on every process and in every run, and unrelated for different parts."""
    digest = hashlib.sha256("-".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


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
    epoch of a row is that of its tag where it has one (`EpochTaggedSampler`), else `epoch`.

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
            epochs = examples.get("epoch")  # (B,), where the indices came tagged with their epoch
        else:
            input_ids = torch.tensor([example["input_ids"] for example in examples], dtype=torch.long)  # (B, T)
            example_ids = torch.tensor([example["example_id"] for example in examples], dtype=torch.long)  # (B,)
            epochs = torch.tensor([example["epoch"] for example in examples]) if "epoch" in examples[0] else None
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
        return {"input_ids": ids, "labels": torch.where(masked, input_ids, -100), "example_id": example_ids}

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
