"""Local data files checked before any work, with the standard library alone: their format, their rows, their
columns (`check_data_file`), the split a run draws from them (`check_split`), and room in datasets' cache
(`check_datasets_cache`). `configs.DataConfig` calls them when a command's flags are parsed."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.runs.run_folder import creation_failure, existing_parent

DATA_CHECK_BYTES = 1 << 28  # how much of a local data file is read through before any work (256 MiB)
LOCAL_FORMATS = {".txt": "text", ".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


CACHE_ROOM = 64 << 20  # the least free space datasets' cache must have before a run prepares data there (64 MiB)


def datasets_cache() -> str:
    """Where `datasets` keeps prepared data: HF_DATASETS_CACHE, else HF_HOME/datasets (HF_HOME: else
    XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface), as `datasets.config` resolves it, without importing it."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return os.path.expanduser(os.environ["HF_DATASETS_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    return os.path.join(os.path.expanduser(home), "datasets")


def check_datasets_cache() -> None:
    """A `UsageError` before any work when datasets' cache (`datasets_cache`) cannot hold what a run prepares: its
    nearest existing folder is not a folder, no file can be created there (read-only, another user's), or it has
    less than `CACHE_ROOM` free. (A disk that fills later is `command_line.environment_fault`'s line.)"""
    import shutil

    cache = datasets_cache()
    folder = existing_parent(cache)
    failure = creation_failure(folder) if os.path.isdir(folder) else "not a folder"
    if failure is None and shutil.disk_usage(folder).free < CACHE_ROOM:
        failure = f"{shutil.disk_usage(folder).free >> 20} MiB free, under the {CACHE_ROOM >> 20} MiB a run needs"
    if failure is not None:
        raise UsageError(
            f"datasets' cache {cache} cannot be written ({failure}): point HF_DATASETS_CACHE (or HF_HOME) at a "
            "folder with room that you can write to."
        )


def _extension(path: str) -> str:
    return os.path.splitext(path)[1].lower()


def check_split(source: str, rows: int, percentage: int) -> None:
    """A `UsageError` when holding out `percentage`% of the `rows` rows of `source` (the flag and its value) for
    validation leaves none to train on: datasets' `train_test_split` rounds the held-out share up."""
    if rows - math.ceil(rows * percentage / 100) < 1:
        raise UsageError(
            f"{source} holds {rows} row(s): too few to hold out --validation_split_percentage {percentage}% for "
            "validation and train on the rest; add rows or pass --validation_file."
        )


def check_data_file(flag: str, path: str, split_percentage: int | None = None) -> list[str] | None:
    """A `UsageError` naming `flag`, the file and the line when the local text or JSON file `path` cannot be read as
    data: not UTF-8 (the line, the byte), a line of a JSON-lines file that is not a JSON object, no text or no row
    at all, a column holding values of two kinds (text in one row, a number in another: datasets would make the
    number a text), too few rows to hold out `split_percentage`% for validation (when given). Returns the columns of
    a JSON file's first row (None for other formats). One pass over the file's first `DATA_CHECK_BYTES` (datasets'
    own errors, named by `load_raw_datasets`, cover the rest)."""
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
        if split_percentage is not None:
            check_split(f"{flag} {path!r}", len(rows), split_percentage)
        return sorted(rows[0]) if isinstance(rows[0], dict) else None
    columns, rows, kinds = None, 0, {}  # kinds: column -> (kind of its first value, line)
    read = 0
    with open(path, "rb") as handle:
        for number, raw_line in enumerate(handle, start=1):
            read += len(raw_line)
            if read > DATA_CHECK_BYTES:
                split_percentage = None  # rows not all counted: load_raw_datasets checks the split
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
    if split_percentage is not None:
        check_split(f"{flag} {path!r}", rows, split_percentage)
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
