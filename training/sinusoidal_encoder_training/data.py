"""Corpora in, packed token blocks out: loading (Hub, local files, built-in), tokenisation, packing, masking.

Shared by pretraining and tokenizer training, so that both accept exactly the same data flags.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterator
from itertools import chain
from typing import Any

import datasets
import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from .arguments import FlagConfig
from .command_line import UsageError
from .corpus import load_builtin_corpus
from .resources import SHIPPED_TOKENIZER  # noqa: F401  (where the stages import it from)

DATA_CHECK_BYTES = 1 << 28  # how much of a local data file is read through before any work (256 MiB)
LOCAL_FORMATS = {".txt": "text", ".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig(FlagConfig):
    """The corpus of a run (with no data setting: the built-in offline corpus), checked when built: the files it
    names must exist, be readable and of a known format."""

    _argument_group_name = "data (with no data flag: the built-in offline corpus)"

    dataset_name: str | None = dataclasses.field(
        default=None, metadata={"help": "A dataset on the Hugging Face Hub, e.g. 'wikitext'."}
    )
    dataset_config_name: str | None = dataclasses.field(
        default=None, metadata={"help": "The configuration of --dataset_name, e.g. 'wikitext-103-raw-v1'."}
    )
    train_file: str | None = dataclasses.field(
        default=None, metadata={"help": "A local training file: .txt, .json/.jsonl, .csv or .parquet."}
    )
    validation_file: str | None = dataclasses.field(
        default=None, metadata={"help": "A local validation file, same formats as --train_file."}
    )
    validation_split_percentage: int = dataclasses.field(
        default=5,
        metadata={
            "help": "Percent of the training split held out for validation when the data has no validation split."
        },
    )
    text_column_name: str | None = dataclasses.field(
        default=None, metadata={"help": "The column holding the text (default: 'text', else the first one)."}
    )
    streaming: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Stream the dataset instead of downloading and preparing it: for corpora larger than memory or "
            "disk."
        },
    )
    streaming_validation_examples: int = dataclasses.field(
        default=1000,
        metadata={
            "help": "With --streaming and no validation split: how many leading documents are held out for validation."
        },
    )
    preprocessing_num_workers: int | None = dataclasses.field(
        default=None, metadata={"help": "Processes for tokenisation (Dataset.map)."}
    )
    language: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The language(s) of the data as ISO 639-1 codes, comma-separated (e.g. 'en' or 'de,fr'), for the "
            "model card's `language:` (default: 'en' for the built-in data; none for other data)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset_name and (self.train_file or self.validation_file):
            raise UsageError("Pass either --dataset_name or --train_file/--validation_file, not both.")
        if self.validation_file and not self.train_file:
            raise UsageError("--validation_file needs --train_file.")
        for flag in ("train_file", "validation_file"):
            path = getattr(self, flag)
            if path is None:
                continue
            if not os.path.isfile(path):
                raise UsageError(f"--{flag} {path!r} does not exist or is not a file.")
            if not os.access(path, os.R_OK):
                raise UsageError(f"--{flag} {path!r} is not readable.")
            if _extension(path) not in LOCAL_FORMATS:
                raise UsageError(f"--{flag} {path!r}: the extension must be one of {sorted(LOCAL_FORMATS)}.")
        if (
            self.train_file
            and self.validation_file
            and _extension(self.train_file) != _extension(self.validation_file)
        ):
            raise UsageError("--train_file and --validation_file must have the same format.")
        if self.train_file:  # what datasets would stop on (or, for mixed kinds, silently accept), said before work
            columns = check_data_file("--train_file", self.train_file)
            other = check_data_file("--validation_file", self.validation_file) if self.validation_file else None
            if columns is not None and other is not None and other != columns:
                raise UsageError(
                    f"--validation_file {self.validation_file!r} has the columns {other}, --train_file "
                    f"{self.train_file!r} has {columns}: give both files the same columns."
                )
        if not 0 < self.validation_split_percentage < 100:
            raise UsageError(
                f"--validation_split_percentage must be in (0, 100), got {self.validation_split_percentage}."
            )
        for code in (self.language or "").split(","):
            if self.language is not None and not re.fullmatch(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})*", code.strip()):
                raise UsageError(
                    f"--language {self.language!r}: {code.strip()!r} is not a language code such as 'en' or 'pt-BR'."
                )
        if self.streaming and not (self.dataset_name or self.train_file):
            raise UsageError("--streaming needs --dataset_name or --train_file (the built-in corpus is small).")


def _extension(path: str) -> str:
    return os.path.splitext(path)[1].lower()


def check_data_file(flag: str, path: str) -> list[str] | None:
    """A `UsageError` naming `flag`, the file and the line when the local text or JSON file `path` cannot be read as
    data: not UTF-8 (the line, the byte), a line of a JSON-lines file that is not a JSON object, no text or no row
    at all, a column holding values of two kinds (text in one row, a number in another: datasets would make the
    number a text). Returns the columns of a JSON file's first row (None for other formats). One pass over the
    file's first `DATA_CHECK_BYTES` (datasets' own errors, named by `load_raw_datasets`, cover the rest)."""
    extension = _extension(path)
    if extension not in (".txt", ".json", ".jsonl"):
        return None
    with open(path, "rb") as handle:
        head = handle.read(1 << 16).lstrip()
    if extension == ".json" and head[:1] == b"[":  # one JSON document (a list of rows): datasets reads it whole
        try:
            with open(path, encoding="utf-8") as handle:
                rows = json.load(handle)
        except UnicodeDecodeError as error:
            byte = error.object[error.start]
            raise UsageError(f"{flag} {path!r} is not UTF-8 (byte {byte:#04x}): save it as UTF-8.") from None
        except ValueError as error:
            raise UsageError(f"{flag} {path!r} is not valid JSON: {error}.") from None
        if not rows:
            raise UsageError(f"{flag} {path!r} holds no rows.")
        return sorted(rows[0]) if isinstance(rows[0], dict) else None
    columns, rows, kinds = None, 0, {}  # kinds: column -> (kind of its first value, line)
    read = 0
    with open(path, "rb") as handle:
        for number, raw_line in enumerate(handle, start=1):
            read += len(raw_line)
            if read > DATA_CHECK_BYTES:
                break
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise UsageError(
                    f"{flag} {path!r}: line {number} is not UTF-8 (byte {raw_line[error.start]:#04x} at column "
                    f"{error.start + 1}): save the file as UTF-8 (from Latin-1: iconv -f latin1 -t utf-8)."
                ) from None
            if not line.strip():
                continue
            rows += 1
            if extension == ".txt":
                continue
            try:
                row = json.loads(line)
            except ValueError as error:
                raise UsageError(
                    f"{flag} {path!r}: line {number} is not valid JSON ({error}): fix or remove the line."
                ) from None
            if not isinstance(row, dict):
                raise UsageError(
                    f"{flag} {path!r}: line {number} is a JSON {type(row).__name__}, not an object of columns "
                    '(one {"column": value, ...} per line).'
                )
            if columns is None:
                columns = sorted(row)
            for column, value in row.items():
                kind = _kind(value)
                first = kinds.setdefault(column, (kind, number, value))
                if kind is not None and first[0] is None:
                    kinds[column] = first = (kind, number, value)
                if kind is not None and kind != first[0]:
                    raise UsageError(
                        f"{flag} {path!r}: column {column!r} holds {first[0]} ({first[2]!r}, line {first[1]}) and "
                        f'{kind} ({value!r}, line {number}): give every row the same kind ("1" or 1, not both).'
                    )
    if rows == 0:
        what = "text" if extension == ".txt" else "rows"
        raise UsageError(f"{flag} {path!r} holds no {what}: every line is empty.")
    return columns


def _kind(value: Any) -> str | None:
    """The kind of a JSON value that a column must keep in every row (None: a missing value, allowed anywhere)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "booleans"
    if isinstance(value, (int, float)):
        return "numbers"
    return {str: "text", list: "lists", dict: "objects"}[type(value)]


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
        flag = (
            f"--dataset_name {config.dataset_name!r}" if config.dataset_name else f"--train_file {config.train_file!r}"
        )
        raise UsageError(f"Could not load {flag}: {type(error).__name__}: {error}") from error
    if "train" not in raw:
        raise UsageError(f"The dataset has no 'train' split (it has {list(raw)}).")
    if "validation" in raw:
        return type(raw)({"train": raw["train"], "validation": raw["validation"]})
    if config.streaming:
        held_out = config.streaming_validation_examples
        return datasets.IterableDatasetDict(
            {"train": raw["train"].skip(held_out), "validation": raw["train"].take(held_out)}
        )
    split = raw["train"].train_test_split(test_size=config.validation_split_percentage / 100, seed=seed)
    return datasets.DatasetDict({"train": split["train"], "validation": split["test"]})


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
    if max_seq_length < 8:
        raise UsageError(f"--max_seq_length must be at least 8, got {max_seq_length}.")
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
        if not 0.0 < mlm_probability < 1.0:
            raise UsageError(f"--mlm_probability must be in (0, 1), got {mlm_probability}.")
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
