"""Before a run: the free space of its output folder's disk against what it will write (its checkpoints and the
exported model), so that a run that cannot finish is refused before it trains."""

from __future__ import annotations

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import TrainingConfig

CHECKPOINT_BYTES_PER_PARAMETER = 12  # float32 weights and AdamW's two float32 moments (accelerate's save_state)
EXPORT_BYTES_PER_PARAMETER = 4  # the exported float32 weights


def space_needed(
    config: TrainingConfig, parameters: int, steps_left: int, steps_per_epoch: int | None
) -> tuple[int, str]:
    """About how many bytes the rest of a run writes, and how: the checkpoints it keeps at once (one more while a
    new one is written before the oldest goes; `--checkpointing_steps epoch`: one every `steps_per_epoch`), and the
    exported model."""
    checkpoints = 0
    every = steps_per_epoch if config.checkpointing_steps == "epoch" else config.checkpointing_steps
    if every:
        checkpoints = steps_left // every
        if config.checkpoints_total_limit is not None:
            # one more while a new one is written; with --load_best_model_at_end the best is kept beside them
            kept = config.checkpoints_total_limit + 1 + config.load_best_model_at_end
            checkpoints = min(checkpoints, kept)
    each = parameters * CHECKPOINT_BYTES_PER_PARAMETER
    export = parameters * EXPORT_BYTES_PER_PARAMETER
    how = f"{checkpoints} checkpoint(s) of {each / 1e9:.2f} GB and the model of {export / 1e9:.2f} GB"
    return checkpoints * each + export, how


def check_free_space(config: TrainingConfig, parameters: int, steps_left: int, steps_per_epoch: int | None) -> None:
    """Before training: the free space of the output folder's disk against what the run will write; with
    `--overwrite_output_dir`, checked before the folder is emptied, its files' space counted as free."""
    import shutil

    needed, how = space_needed(config, parameters, steps_left, steps_per_epoch)
    free = shutil.disk_usage(config.output_dir).free
    if config.overwrite_output_dir:
        free += folder_bytes(config.output_dir)
    if free < needed:
        raise UsageError(
            f"--output_dir {config.output_dir} has {free / 1e9:.2f} GB free, and this run writes about "
            f"{needed / 1e9:.2f} GB ({how}): free space, keep fewer checkpoints (--checkpoints_total_limit), or "
            "choose a folder on another disk.",
            shared=True,  # every process of the machine reads the same disk
        )


def folder_bytes(folder: str) -> int:
    """The bytes of the files under `folder` (links not followed): what emptying it frees."""
    import os

    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total
