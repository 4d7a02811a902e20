"""Atomic checkpoints (accelerate's full training state, written to a temporary folder and renamed when complete,
with a manifest of its files and their sizes) and how a run finds the one to resume from: the newest that is whole,
a damaged one (a file missing, cut short, or a safetensors file that cannot be read) named and skipped, and the
run's state loaded from it (`resume`)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # accelerate is imported by the code that saves (arguments.py, which checks a path, needs not)
    from accelerate import Accelerator

    from sinusoidal_encoder_training.configs import TrainingConfig

CHECKPOINT_PATTERN = re.compile(r"^step_(\d+)$")
MANIFEST = "manifest.json"  # {relative path: size in bytes} of every file of the checkpoint, written last
RUN_FILE = "run.json"  # the settings of the run that wrote the checkpoint (run_folder.py)


def checkpoints_dir(output_dir: str) -> str:
    return os.path.join(output_dir, "checkpoints")


def complete_checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """(step, path) of every complete checkpoint, oldest first. Temporary folders never match `step_N`."""
    folder = checkpoints_dir(output_dir)
    if not os.path.isdir(folder):
        return []
    found = []
    for name in os.listdir(folder):
        match = CHECKPOINT_PATTERN.match(name)
        if match and os.path.isdir(os.path.join(folder, name)):
            found.append((int(match.group(1)), os.path.join(folder, name)))
    return sorted(found)


def checkpoint_damage(path: str) -> str | None:
    """Why the checkpoint folder `path` cannot be resumed from, or None when it is whole: every file of its manifest
    present with its recorded size, and every safetensors file's header readable. (A checkpoint from before the
    manifest needs the files accelerate always writes: the model weights, the optimizer and the RNG states.)"""
    manifest = os.path.join(path, MANIFEST)
    if os.path.isfile(manifest):
        with open(manifest) as handle:
            sizes = json.load(handle)
    else:
        names = os.listdir(path) if os.path.isdir(path) else []
        for kind, prefixes in (("model weights", ("model", "pytorch_model")), ("optimizer state", ("optimizer",))):
            if not any(name.startswith(prefixes) for name in names):
                return f"no {kind} file"
        sizes = {name: None for name in names if os.path.isfile(os.path.join(path, name))}
    for name, size in sizes.items():
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            return f"{name} is missing"
        if size is not None and os.path.getsize(file) != size:
            return f"{name} has {os.path.getsize(file):,} bytes, not the {size:,} written"
        if name.endswith(".safetensors"):
            from safetensors import safe_open

            try:
                with safe_open(file, framework="pt"):
                    pass
            except Exception as error:  # safetensors raises its own error types for a damaged header
                return f"{name} cannot be read ({error})"
    return None


def resolve_checkpoint(output_dir: str, requested: str | None, report=None) -> str | None:
    """The checkpoint to resume from: None without `requested`; for "latest", the newest whole checkpoint of
    `output_dir`, each damaged newer one passed to `report(path, reason)` and skipped; else `requested` itself."""
    if requested is None:
        return None
    if requested != "latest":
        return requested
    for _, path in reversed(complete_checkpoints(output_dir)):
        damage = checkpoint_damage(path)
        if damage is None:
            return path
        if report is not None:
            report(path, damage)
    return None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


SHARED_TENSOR_LOGGER = "accelerate.utils.other"  # where accelerate says it stored shared tensors once


class TiedWeightsNotice(logging.Filter):
    """Drops accelerate's warning that a checkpoint stored tensors that share memory once ("Removed shared tensor
    {...} while saving. This should be OK, but check ..."), at every save of a model with tied weights, when every
    tensor it names is one of the models' tied weights (`tied`: their names), which loading ties again; the warning
    for any other tensor still shows."""

    def __init__(self, tied: set[str]):
        super().__init__()
        self.tied = tied

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "Removed shared tensor " not in text:
            return True
        names = re.findall(r"'([^']+)'", text.split(" while saving", 1)[0])
        # under DDP or compilation the names carry the wrapper's prefix (module., _orig_mod.)
        ours = [name for name in names if any(name == key or name.endswith("." + key) for key in self.tied)]
        return not names or len(ours) < len(names)


@contextlib.contextmanager
def _tied_weights_quiet(accelerator: Accelerator) -> Iterator[None]:
    """Within it, `TiedWeightsNotice` filters accelerate's warning for the tied weights of the accelerator's models."""
    tied = set()
    for model in getattr(accelerator, "_models", ()):  # the prepared models (accelerate keeps no public list)
        model = accelerator.unwrap_model(model)
        tied.update(getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or ())
    notice = TiedWeightsNotice(tied)
    logger = logging.getLogger(SHARED_TENSOR_LOGGER)
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


def save_checkpoint(
    accelerator: Accelerator, output_dir: str, step: int, total_limit: int | None, keep: int | None = None
) -> str:
    """`accelerator.save_state` into a temporary folder, renamed to `step_N` once every process has written its part:
    a kill during the save leaves the previous checkpoints as they were and no broken `step_N`. Then, with
    `total_limit`, the older checkpoints beyond the newest `total_limit` are removed, but for the one of step `keep`
    (--load_best_model_at_end's best)."""
    folder = checkpoints_dir(output_dir)
    final = os.path.join(folder, f"step_{step}")
    temporary = os.path.join(folder, f".incomplete-step_{step}")
    if accelerator.is_main_process:
        os.makedirs(folder, exist_ok=True)
        shutil.rmtree(temporary, ignore_errors=True)
    accelerator.wait_for_everyone()
    with _tied_weights_quiet(accelerator):
        accelerator.save_state(temporary)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        run = os.path.join(folder, RUN_FILE)  # the run's settings (run_folder.py), which a resume compares
        if os.path.isfile(run):
            shutil.copyfile(run, os.path.join(temporary, RUN_FILE))
        sizes = {}
        for directory, _, files in os.walk(temporary):
            for name in files:
                file = os.path.join(directory, name)
                with open(file, "rb") as handle:
                    os.fsync(handle.fileno())
                sizes[os.path.relpath(file, temporary)] = os.path.getsize(file)
        with open(os.path.join(temporary, MANIFEST), "w") as handle:
            json.dump(sizes, handle, indent=1, sort_keys=True, allow_nan=False)  # sizes: strict JSON
            handle.flush()
            os.fsync(handle.fileno())
        shutil.rmtree(final, ignore_errors=True)
        os.rename(temporary, final)
        _fsync_dir(folder)
        if total_limit is not None:
            for older, old in complete_checkpoints(output_dir)[:-total_limit]:
                if older != keep:
                    shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def resume(accelerator: Accelerator, config: TrainingConfig) -> str | None:
    """The state of every registered object (model, optimizer, scheduler, progress, RNGs) loaded from the checkpoint
    `--resume_from_checkpoint` names (`latest`: the newest whole one, damaged ones skipped with a line); its path, or
    None for a fresh start."""
    checkpoint = resolve_checkpoint(
        config.output_dir,
        config.resume_from_checkpoint,
        report=lambda path, damage: accelerator.print(f"Skipping the damaged checkpoint {path}: {damage}"),
    )
    if checkpoint is not None:
        accelerator.print(f"Resuming from {checkpoint}")
        accelerator.load_state(checkpoint)
    elif config.resume_from_checkpoint == "latest":
        accelerator.print(f"No checkpoint in {config.output_dir}/checkpoints yet: starting from scratch")
    return checkpoint
