"""Corpora in, packed token blocks out: loading (Hub, local files, built-in), tokenisation, packing (the batches
they are read and masked into: `data.batches`).

Shared by pretraining and tokenizer training, so that both accept exactly the same data flags.
"""

from __future__ import annotations

import hashlib
import os
from bisect import bisect_right
from itertools import accumulate, chain, islice
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc
from transformers import PreTrainedTokenizerBase

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import DataConfig
from sinusoidal_encoder_training.data.corpus import load_builtin_corpus
from sinusoidal_encoder_training.data.files import LOCAL_FORMATS, _extension, check_split
from sinusoidal_encoder_training.resources import SHIPPED_TOKENIZER  # noqa: F401  (where the stages import it from)


def load_raw_datasets(
    config: DataConfig, seed: int, numbers: bool = False
) -> datasets.DatasetDict | datasets.IterableDatasetDict:
    """The corpus as "train" and "validation" splits, from the Hub, local files, or the built-in corpus; "validation"
    is the split --validation_split_name names, if any; `seed` draws the validation split of a dataset without one.
    With `numbers` (a command that reads the numeric columns: fine-tuning's labels and targets), a NaN or infinite
    number in the splits as loaded is refused (`check_finite_numbers`), before the training split is divided, so
    that its rows are the file's. Commands that read one text column (pretraining, tokenizer training,
    distillation) leave the other columns alone."""
    if config.dataset_name is None and config.train_file is None:
        return load_builtin_corpus()
    if config.dataset_name is not None:
        source, kwargs = config.dataset_name, {"name": config.dataset_config_name}
    else:
        files = {"train": config.train_file}
        if config.validation_file and config.validation_file != config.train_file:
            files["validation"] = config.validation_file
        source, kwargs = LOCAL_FORMATS[_extension(config.train_file)], {"data_files": files}
    try:
        raw = datasets.load_dataset(source, streaming=config.streaming, **kwargs)
    except Exception as error:  # missing Hub dataset, unreadable or malformed file, ...: say which input failed
        raise UsageError(load_failure(config, error)) from error
    if "train" not in raw:
        raise UsageError(f"The dataset has no 'train' split (it has {list(raw)}).")
    named = config.validation_split_name
    if named is not None and named not in raw:
        raise UsageError(
            f"--dataset_name {config.dataset_name!r} has no split {named!r} (it has {list(raw)}): name one of them "
            "with --validation_split_name."
        )
    validation = named or "validation"
    if numbers and not config.streaming:
        for split in dict.fromkeys(("train", validation)):
            if split in raw:
                check_finite_numbers(raw[split], _split_source(config, split))
    if validation in raw:
        return type(raw)({"train": raw["train"], "validation": raw[validation]})
    if config.validation_file and config.validation_file == config.train_file:  # one file as both: read once
        return type(raw)({"train": raw["train"], "validation": raw["train"]})
    if config.streaming:
        held_out = config.streaming_validation_examples
        train = raw["train"].skip(held_out)
        if next(iter(train), None) is None:  # read up to the first document past the held-out ones
            raise UsageError(
                f"{source_flag(config)} holds no document past the first {held_out}, which --streaming holds out "
                "for validation (--streaming_validation_examples): lower it, or give a --validation_file."
            )
        return datasets.IterableDatasetDict({"train": train, "validation": raw["train"].take(held_out)})
    check_split(source_flag(config), len(raw["train"]), config.validation_split_percentage)  # a Hub dataset's
    split = raw["train"].train_test_split(test_size=config.validation_split_percentage / 100, seed=seed)
    return datasets.DatasetDict({"train": split["train"], "validation": split["test"]})


def validation_split(config: DataConfig, validation: datasets.Dataset | datasets.IterableDataset) -> str | None:
    """The split of the run's data that its "validation" split (`load_raw_datasets`', or what tokenisation made of
    it) is: the one --validation_split_name names, the dataset's own "validation", "validation" for a validation
    file and the built-in corpus, "train" for a file read as both; None for a share of the training split held out
    (datasets keeps a split's name through `train_test_split`, `take`, `select` and `map`)."""
    if config.validation_file:
        return "train" if config.validation_file == config.train_file else "validation"
    if config.dataset_name is None and config.train_file is None:
        return "validation"
    if config.validation_split_name:
        return config.validation_split_name
    return None if str(validation.split) == "train" else str(validation.split)


def load_failure(config: DataConfig, error: Exception) -> str:
    """The line for `datasets.load_dataset` failing on the run's data: the error, and the one that caused it when
    `datasets` wraps it (`DatasetGenerationError: An error occurred while generating the dataset` says nothing),
    in one line; for a local folder, that it reads every data file under it (another run's JSON files in it make
    it fail to cast)."""
    line = f"Could not load {source_flag(config)}: {type(error).__name__}: {error}"
    cause = error.__cause__
    if cause is not None:
        said = " ".join(str(cause).split())
        said = said if len(said) <= 300 else f"{said[:160]} ... {said[-120:]}"  # its start and its conclusion
        line += f" ({type(cause).__name__}: {said})"
    if config.dataset_name and os.path.isdir(config.dataset_name):
        line += ". A local folder is loaded with every data file under it, subfolders too: keep only the dataset's."
    return line


def source_flag(config: DataConfig) -> str:
    """The flag that named the corpus, with its value."""
    return f"--dataset_name {config.dataset_name!r}" if config.dataset_name else f"--train_file {config.train_file!r}"


def _split_source(config: DataConfig, split: str) -> str:
    """Where a split as loaded comes from: its file (flag and path), or the split of the Hub dataset."""
    if config.dataset_name:
        return f"--dataset_name {config.dataset_name!r}, split {split!r},"
    flag = "--train_file" if split == "train" and config.validation_file != config.train_file else "--validation_file"
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


def column_names(dataset: datasets.Dataset | datasets.IterableDataset) -> list[str]:
    """The columns of a split; those of its first row for a stream that knows them only once read (a folder of text
    files, say), none for an empty one."""
    names = dataset.column_names
    if names is None:
        first = next(iter(dataset), None)
        names = list(first) if first is not None else []
    return names


def text_column(dataset: datasets.Dataset | datasets.IterableDataset, requested: str | None) -> str:
    names = column_names(dataset)
    if not names:
        raise UsageError("The training split holds no documents: give it some text.")
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
        kwargs: dict[str, Any] = {"batched": True, "remove_columns": column_names(dataset)}
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
    """The documents of `tokenize_documents` packed into blocks of exactly `max_seq_length` ids (`input_ids`), each
    with the `document` its first id after [CLS] comes from (the document's row in its split: blocks of one
    document share it, which the standard errors of an evaluation read, `evaluation.masked_lm`).

    Documents are joined with the separator token; each block starts with the classification token and holds
    `max_seq_length - 1` ids of the stream, so no compute goes to padding. The tail of each map batch (1,000
    documents) shorter than a block is dropped."""
    streaming = isinstance(tokenized["train"], datasets.IterableDataset)
    span = max_seq_length - 1
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id

    def pack(batch: dict[str, list[Any]], rows: list[int]) -> dict[str, list[Any]]:
        documents = [(row, ids) for row, ids in zip(rows, batch["input_ids"], strict=True) if ids is not None]
        stream = list(chain.from_iterable([*ids, sep_id] for _, ids in documents))
        starts = list(accumulate((len(ids) + 1 for _, ids in documents), initial=0))  # each document's first id
        usable = len(stream) // span * span
        return {
            "input_ids": [[cls_id, *stream[i : i + span]] for i in range(0, usable, span)],
            "document": [documents[bisect_right(starts, i) - 1][0] for i in range(0, usable, span)],
        }

    packed = {}
    for split, dataset in tokenized.items():
        kwargs: dict[str, Any] = {"batched": True, "with_indices": True, "remove_columns": ["input_ids"]}
        if not streaming:
            kwargs.update(num_proc=num_proc, desc=f"Packing {split} into blocks of {max_seq_length}")
        packed[split] = dataset.map(pack, **kwargs)
        if not streaming and len(packed[split]) == 0:
            raise UsageError(
                f"The {split} split holds no complete block of --max_seq_length={max_seq_length} tokens after "
                f"tokenisation ({len(dataset)} documents, empty ones dropped): give it more text or lower the length."
            )
    return type(tokenized)(packed)


def check_stream_blocks(packed: datasets.IterableDatasetDict, max_seq_length: int, step: int) -> None:
    """A `UsageError` for streamed splits (`pack_blocks`) too short to run on: a training split of fewer complete
    blocks than the `step` of one optimizer step (the global batch: without them the stream ends before its first
    step), a validation split of none. Reads each stream up to that far."""
    for split, needed in (("train", step), ("validation", 1)):
        held = sum(1 for _ in islice(packed[split], needed))
        if held == needed:
            continue
        if split == "train":
            raise UsageError(
                f"The streamed train split holds {held} complete block(s) of --max_seq_length={max_seq_length} "
                f"tokens, fewer than the {needed} of one optimizer step (the global batch): give it more text, or "
                "lower the length or the batch size."
            )
        raise UsageError(
            f"The streamed validation split holds no complete block of --max_seq_length={max_seq_length} tokens: "
            "give it more text, or lower the length."
        )


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


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed derived from `parts` (a seed, a purpose, an epoch, an example index, ...) by SHA-256: the same
    on every process and in every run, and unrelated for different parts."""
    digest = hashlib.sha256("-".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)
