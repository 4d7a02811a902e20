"""The metrics of a run: one JSON line per logged step in `output_dir/metrics.jsonl` (and the trackers); and the
strict JSON of every JSON file the package writes (`strict_json`, `write_json`)."""

from __future__ import annotations

import json
import math
import os
import time
from typing import TYPE_CHECKING, Any

from sinusoidal_encoder_training.runs.atomic import temporary_path

if TYPE_CHECKING:
    from accelerate import Accelerator

METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """Every logged metric as one JSON line in `output_dir/metrics.jsonl` (main process), and to the trackers.

    On resume, lines from steps after the checkpoint (logged by the killed run) are dropped, so the file reads as
    one uninterrupted run."""

    def __init__(self, accelerator: Accelerator, output_dir: str, resumed_step: int | None, tracking: bool):
        self.accelerator = accelerator
        self.tracking = tracking
        self.path = os.path.join(output_dir, METRICS_FILE)
        if accelerator.is_main_process:
            os.makedirs(output_dir, exist_ok=True)
            kept = []
            if resumed_step is not None and os.path.exists(self.path):
                with open(self.path) as handle:
                    kept = [
                        line for line in handle if (_record(line) or {}).get("step", resumed_step + 1) <= resumed_step
                    ]
            temporary = temporary_path(self.path)  # the kept lines replace the file whole: a kill keeps the old one
            with open(temporary, "w") as handle:
                handle.writelines(line if line.endswith("\n") else line + "\n" for line in kept)
            os.replace(temporary, self.path)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.tracking:
            self.accelerator.log(metrics, step=step)
        if self.accelerator.is_main_process:
            with open(self.path, "a") as handle:
                handle.write(strict_json({"step": step, "time": time.time(), **metrics}) + "\n")


def _record(line: str) -> dict[str, Any] | None:
    """The metrics of one line of the log, or None for a line that is not whole JSON: the last line of a run killed
    while writing it, which a resume drops."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def finite_or_null(value: Any) -> Any:
    """`value` with every NaN or infinite float, in lists, tuples and dicts too, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(item) for item in value]
    return value


def strict_json(value: Any, **kwargs: Any) -> str:
    """`value` as strict JSON, which every JSON parser reads: a NaN or infinite float (a Pearson correlation of
    constant predictions, a loss that overflowed) is written as null, never as the bare NaN or Infinity that
    Python's `json` writes by default and other parsers refuse. `kwargs` go to `json.dumps` (`indent`, ...)."""
    return json.dumps(finite_or_null(value), allow_nan=False, **kwargs)


def write_json(path: str, value: Any, indent: int = 2) -> None:
    """Write `value` to the file `path` as strict JSON (`strict_json`): how the package writes every JSON file."""
    with open(path, "w") as handle:
        handle.write(strict_json(value, indent=indent))


def read_metrics(output_dir: str) -> list[dict[str, Any]]:
    path = os.path.join(output_dir, METRICS_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [record for record in map(_record, handle) if record is not None]


def perplexity(loss: float) -> float:
    return math.exp(loss) if loss < 100 else float("inf")


def format_metrics(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())
