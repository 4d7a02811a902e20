"""The finished runs of a study, one JSON Lines file per study: `<study folder>/results.jsonl`, one run's record per
line (its settings, which name its task, arm and seed; its training curve; its evaluation), in the order the runs
ended. `runs/` holds the benchmark's runs, each `runs-probes/<study>/` a study's.

    from benchmarks.algorithmic.records import load_runs, results_file
    runs = load_runs(results_file(Path("benchmarks/algorithmic/runs")))   # [record, ...]
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from pathlib import Path

RESULTS_FILE = "results.jsonl"


def results_file(study: Path) -> Path:
    """The file holding the finished runs of the study in folder `study`."""
    return study / RESULTS_FILE


def load_runs(path: Path) -> list[dict]:
    """Every run recorded in `path`, in the order they were written; [] where the file is not there yet. A last line
    cut short (a run killed while writing it, whose checkpoint is still there: it runs again) is left out with a
    warning; any other line that is not a JSON object is an error naming the file and line."""
    if not path.exists():
        return []
    lines = path.read_text().split("\n")  # a complete file ends with a newline: its last piece is empty
    runs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                warnings.warn(
                    f"{path}, line {number}: cut short (a run killed while writing it?), left out.", stacklevel=2
                )
                continue
            raise ValueError(f"{path}, line {number}: not a JSON record ({error}).") from error
        if not isinstance(record, dict):
            raise ValueError(f"{path}, line {number}: a record is a JSON object, got {type(record).__name__}.")
        runs.append(record)
    return runs


def append_run(path: Path, record: dict) -> None:
    """Append `record` to `path` as one line, written whole, flushed and synced to disk before returning. Runs
    ending at once in parallel processes append in turn (an exclusive lock on the file); a last line cut short by a
    writer killed mid-line is removed first, with a warning, so that the new line starts a line of its own."""
    line = (json.dumps(record) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        handle.seek(0)
        written = handle.read()
        if written and not written.endswith(b"\n"):
            complete = written.rfind(b"\n") + 1
            try:
                json.loads(written[complete:])
                handle.write(b"\n")  # a whole record missing its newline (written by hand): kept
            except json.JSONDecodeError:
                warnings.warn(f"{path}: removing a last line cut short (a run killed while writing it).", stacklevel=2)
                handle.truncate(complete)
        handle.write(line)  # the file is opened for appending: every write lands at its end
        handle.flush()
        os.fsync(handle.fileno())
