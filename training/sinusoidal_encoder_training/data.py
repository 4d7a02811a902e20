"""Corpora in, packed token blocks out: loading (Hub, local files, built-in), tokenisation, packing, masking.

Shared by pretraining and tokenizer training, so that both accept exactly the same data flags.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from itertools import chain
from typing import Any

import datasets
import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from .command_line import UsageError
from .configs import LOCAL_FORMATS, DataConfig, _extension, check_split
from .corpus import load_builtin_corpus
from .resources import SHIPPED_TOKENIZER  # noqa: F401  (where the stages import it from)


def load_raw_datasets(config: DataConfig, seed: int) -> datasets.DatasetDict | datasets.IterableDatasetDict:
    """The corpus as "train" and "validation" splits, from the Hub, local files, or the built-in corpus; `seed` draws
    the validation split of a dataset without one."""
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


def tokenize_and_pack(
    raw: datasets.DatasetDict | datasets.IterableDatasetDict,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    text_column_name: str | None = None,
    num_proc: int | None = None,
) -> datasets.DatasetDict | datasets.IterableDatasetDict:
    """Tokenise every document and pack the token stream into blocks of exactly `max_seq_length` ids.

    Documents are joined with the separator token; each block starts with the classification token and holds
    `max_seq_length - 1` ids of the stream, so no compute goes to padding. The tail of each map batch shorter than a
    block is dropped. Map-style datasets are cached by `datasets`; streamed ones are packed on the fly.
    """
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise UsageError("The tokenizer needs a cls_token and a sep_token to pack documents into blocks.")
    column = text_column(raw["train"], text_column_name)
    streaming = isinstance(raw["train"], datasets.IterableDataset)
    span = max_seq_length - 1
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id

    def pack(batch: dict[str, list[Any]]) -> dict[str, list[list[int]]]:
        texts = [t for t in batch[column] if t and t.strip()]
        if not texts:
            return {"input_ids": []}
        encoded = tokenizer(texts, add_special_tokens=False, return_attention_mask=False, verbose=False)["input_ids"]
        stream = list(chain.from_iterable([*ids, sep_id] for ids in encoded))
        usable = len(stream) // span * span
        return {"input_ids": [[cls_id, *stream[i : i + span]] for i in range(0, usable, span)]}

    packed = {}
    for split, dataset in raw.items():
        kwargs: dict[str, Any] = {"batched": True, "remove_columns": dataset.column_names}
        if not streaming:
            kwargs.update(num_proc=num_proc, desc=f"Tokenizing and packing {split} into blocks of {max_seq_length}")
        packed[split] = dataset.map(pack, **kwargs)
        if not streaming and len(packed[split]) == 0:
            raise UsageError(
                f"The {split} split holds no complete block of --max_seq_length={max_seq_length} tokens after "
                f"tokenisation ({len(dataset)} documents, empty ones dropped): give it more text or lower the length."
            )
    return type(raw)(packed)


class IndexedExamples(torch.utils.data.Dataset):
    """Rows of a packed map-style dataset, each tagged with its index (the key of its masks)."""

    def __init__(self, dataset: datasets.Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"input_ids": self.dataset[index]["input_ids"], "example_id": index}


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


class KeyedMaskingCollator:
    """`DataCollatorForLanguageModeling` masking (`mlm_probability`, 80% [MASK] / 10% random / 10% kept), with the
    random numbers of each example drawn from a generator seeded by (seed, epoch, example index).

    The masks of a block therefore do not depend on batching, the number of processes, DataLoader prefetching or
    workers, or on where a run was resumed: a resumed run sees the masks of the uninterrupted one, and evaluation
    (a fixed epoch key) sees the same masks every time.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, mlm_probability: float, seed: int, epoch: int | str = 0):
        self.collator = DataCollatorForLanguageModeling(
            tokenizer=tokenizer, mlm=True, mlm_probability=mlm_probability, return_tensors="pt"
        )
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)))
        self.seed = seed
        self.epoch = epoch

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        input_ids = torch.tensor([example["input_ids"] for example in examples])  # (B, T)
        masked_ids, labels = [], []
        for row, example in zip(input_ids, examples, strict=True):
            self.collator.generator = torch.Generator().manual_seed(
                derive_seed(self.seed, self.epoch, example["example_id"])
            )
            row = row.unsqueeze(0)  # (1, T)
            ids, row_labels = self.collator.torch_mask_tokens(
                row.clone(), special_tokens_mask=torch.isin(row, self.special_ids)
            )
            masked_ids.append(ids)
            labels.append(row_labels)
        self.collator.generator = None
        return {
            "input_ids": torch.cat(masked_ids),
            "labels": torch.cat(labels),
            "example_id": torch.tensor([example["example_id"] for example in examples]),
        }
