"""The output folder of a training run is the user's: a run claims it before any work, and a resume is the same run
or refused.

- A run writes into an empty (or new) folder, or into the folder of its own run when resuming it
  (`--resume_from_checkpoint`), or starting it again when it stopped before its first checkpoint and its model
  (bad data found after the folder was claimed, a kill early on). A folder holding anything else (another run's or
  model's files, the user's own, a run of the other stage) is refused in one line unless `--overwrite_output_dir`,
  which empties it (`empty_claimed_folder`) once the run's data and model are ready, right before training: nothing
  of the old run is left to be mixed with the new one, and a run stopped by bad data leaves the folder as it was.
- The run's settings are written to `checkpoints/run.json` when it starts and into every checkpoint it saves. A
  resume compares the checkpoint's with its own and names, in one line, every setting that differs, except those a
  resume may change (`MAY_CHANGE`): then the continued run is the run that was interrupted.
- One writer: the main process holds a lock on `checkpoints/.lock` (`fcntl.lockf`) for the run's life. A second run
  on the folder is refused with the first one's process id; the lock of a process that was killed goes with it,
  and the next run says it takes it over.
- A run that stops having written nothing but its record and lock (bad data found after the claim) takes back what
  its claim made when it stops: `checkpoints/`, and the folders on the way when the claim made them
  (`given_back_if_stopped`, `release_lock`).

Every process of a launch takes the same decision: the main process checks, and its answer is shared."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.runs.atomic import clean_leftovers, is_temporary
from sinusoidal_encoder_training.runs.checkpoints import CHECKPOINT_PATTERN, RUN_FILE, checkpoints_dir
from sinusoidal_encoder_training.runs.metrics_log import write_json

if TYPE_CHECKING:
    from accelerate import Accelerator

LOCK_FILE = ".lock"
# settings a resume may change: where and how often it reports and saves, how far it trains (with a linear or
# cosine schedule a new length also changes the learning rates of the steps still to come), and how it runs
MAY_CHANGE = frozenset(
    {
        "output_dir",
        "resume_from_checkpoint",
        "overwrite_output_dir",
        "max_train_steps",
        "num_train_epochs",
        "early_stopping_patience",  # how far it trains, too: a run stopped early goes on with more patience
        "early_stopping_threshold",
        "eval_steps",
        "logging_steps",
        "checkpointing_steps",
        "checkpoints_total_limit",
        "with_tracking",
        "report_to",
        "push_to_hub",
        "hub_model_id",
        "hub_private_repo",
        "per_device_eval_batch_size",
        "dataloader_num_workers",
        "preprocessing_num_workers",
        "activation_checkpointing",  # the same gradients, in less memory
        "torch_compile",
        "torch_compile_backend",
        "torch_compile_mode",
        "teacher_batch_size",  # distillation: how many sentences the teacher encodes at once (its cache is kept)
    }
)
_held_locks: dict[str, int] = {}  # output folder -> the open lock file of this process
# output folder -> the record of the run that claimed it to empty it: until `empty_claimed_folder`
_to_empty: dict[str, dict[str, Any]] = {}
# output folder -> (the nearest folder on its path that was there before the claim, or None when the folder was;
# whether the claim made its checkpoints/): what `release_lock` takes back when the run wrote nothing else
_made: dict[str, tuple[str | None, bool]] = {}


def run_settings(config: Any, stage: str, processes: int, mixed_precision: str) -> dict[str, Any]:
    """What identifies a run: its stage, every setting (local paths made absolute, so that a resume from another
    working directory compares equal), the processes and the precision it trains with."""
    settings = {}
    for name, value in dataclasses.asdict(config).items():
        if isinstance(value, str) and value and os.path.exists(value):
            value = os.path.abspath(value)
        settings[name] = list(value) if isinstance(value, tuple) else value
    settings["processes"] = processes
    settings["mixed_precision"] = mixed_precision
    return {"stage": stage, "settings": settings}


def read_run(folder: str) -> dict[str, Any] | None:
    """The run record in `folder` (a checkpoint, or `checkpoints/`), or None when it has none."""
    path = os.path.join(folder, RUN_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_run(folder: str, run: dict[str, Any]) -> None:
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, RUN_FILE), run, indent=1)


def settings_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """'--name old (now new)' for every setting that differs between two run records, `MAY_CHANGE` aside. A setting
    the recorded run did not have (a flag added since) is a difference only when it is on now (not False or None):
    flags are added off, so the recorded run ran as though it were."""
    old, new = recorded.get("settings", {}), current["settings"]
    differences = []
    for name in sorted(set(old) | set(new)):
        if name in MAY_CHANGE or old.get(name) == new.get(name):
            continue
        if name not in old and new.get(name) in (None, False):
            continue
        flag = name if name in ("processes", "mixed_precision") else f"--{name}"
        differences.append(f"{flag} {_shown(old.get(name))} (now {_shown(new.get(name))})")
    return differences


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, str) and os.path.isabs(value):
        return os.path.basename(value.rstrip(os.sep)) or value
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def check_resume(checkpoint: str, run: dict[str, Any]) -> str | None:
    """Why the run `run` may not resume `checkpoint` (another stage, other settings), or None. A checkpoint written
    before runs recorded their settings is not compared."""
    recorded = read_run(checkpoint)
    if recorded is None:
        return None
    name = os.path.join(os.path.basename(os.path.dirname(checkpoint)), os.path.basename(checkpoint))
    if recorded.get("stage") != run["stage"]:
        return (
            f"--resume_from_checkpoint: {name} is a {recorded.get('stage')} checkpoint, and this is {run['stage']}: "
            f"{run['stage']} does not resume it. Start {run['stage']} in another --output_dir (from an exported model "
            "folder: --model_name_or_path)."
        )
    differences = settings_differences(recorded, run)
    if differences:
        return (
            f"--resume_from_checkpoint: {name} was written by a run with other settings: {'; '.join(differences)}. "
            "A resume continues the same run: pass the same settings (those a resume may change are listed in "
            "docs/pretraining.md), or start a new run with --overwrite_output_dir or another --output_dir."
        )
    return None


def folder_problem(
    output_dir: str, stage: str, resuming: bool, overwrite: bool, earlier: Callable[[str], bool] | None = None
) -> str | None:
    """Why a run of `stage` may not write into `output_dir`, or None: a file, not a folder; a folder that holds
    another run's or model's files (without `overwrite`); a folder of a run that is not resumed; unwritable.
    `earlier(output_dir)`: whether the folder holds a run of `stage` by a version that recorded none (by default
    its `step_N` checkpoints)."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        return f"--output_dir {output_dir} is a file, not a folder: choose a folder."
    entries = sorted(name for name in _listing(output_dir) if not is_temporary(name))  # leftovers are cleaned
    if entries and not overwrite:
        record = read_run(checkpoints_dir(output_dir))
        legacy = record is None and (earlier or _has_step_checkpoints)(output_dir)  # of a version without records
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        if record is not None and record.get("stage") != stage:
            return (
                f"--output_dir {output_dir} holds a {record.get('stage')} run; this is {stage}: choose another "
                "--output_dir, or pass --overwrite_output_dir to empty it first."
            )
        if record is None and not legacy:
            return (
                f"--output_dir {output_dir} already holds files that are not this run's ({shown}): choose another "
                "--output_dir, or pass --overwrite_output_dir to empty it first."
            )
        started_only = not any(CHECKPOINT_PATTERN.match(name) for name in _listing(checkpoints_dir(output_dir)))
        if not resuming and started_only and "config.json" not in entries:
            return None  # a run of this stage that stopped before its first checkpoint or its model: starts again
        if not resuming:
            return (
                f"--output_dir {output_dir} holds a {stage} run: pass --resume_from_checkpoint latest to continue it, "
                "or --overwrite_output_dir to start again from scratch (its files are removed), or choose another "
                "--output_dir."
            )
    parent = output_dir if os.path.isdir(output_dir) else existing_parent(output_dir)
    if not os.path.isdir(parent):
        return f"--output_dir {output_dir}: {parent} is a file, not a folder: choose a folder."
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--output_dir {output_dir}: {parent} is not writable: choose a folder you can write to."
    return None


def _has_step_checkpoints(output_dir: str) -> bool:
    return any(name.startswith("step_") for name in _listing(checkpoints_dir(output_dir)))


def _listing(folder: str) -> list[str]:
    return os.listdir(folder) if os.path.isdir(folder) else []


def creation_failure(folder: str) -> str | None:
    """Why no file can be created in the existing `folder` (the system's reason), or None: a file is created there
    and removed, which tells what `os.access` cannot (a superuser on a read-only or special file system)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as error:
        return error.strerror or type(error).__name__


def existing_parent(path: str) -> str:
    """`path` made absolute, or its nearest ancestor that exists."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def take_lock(output_dir: str, report: Callable[[str], None] | None = None) -> str | None:
    """Lock `output_dir` for this process (held until it exits or `release_lock`), or say which process holds it.
    The lock file names its holder while held and is emptied when released: a name found in a lock that is free is
    a holder that was killed, whose lock is taken over with a line to `report`. A POSIX record lock
    (`fcntl.lockf`): it belongs to this process alone, so the DataLoader workers forked from it, which keep its open
    files and outlive a killed run by seconds, do not keep the folder locked (a `flock` is theirs too)."""
    import fcntl

    if output_dir in _held_locks:
        return None
    folder = checkpoints_dir(output_dir)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
        os.close(fd)
        return (
            f"--output_dir {output_dir} is in use by another run ({holder}): wait for it to end, or choose another "
            "--output_dir."
        )
    dead = os.read(fd, 200).decode(errors="replace").strip()
    if dead and report is not None:
        report(f"Taking over the lock of {output_dir} from {dead}, which ended without releasing it")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()}".encode(), 0)
    if not _held_locks:
        atexit.register(release_all_locks)  # a run that ends (normally, by an error or by a signal) releases them
    _held_locks[output_dir] = fd
    return None


def lock_holder(output_dir: str) -> str | None:
    """Which live process holds the run lock of `output_dir` (as its lock file names it), or None when no run
    writes there now (no lock, or the lock of a process that ended). Asks the system for the lock without waiting
    and gives it back at once. A folder this process holds is named without asking (a process's own record locks
    never conflict with its requests, and closing any of its descriptors of the file would release them)."""
    import fcntl

    if output_dir in _held_locks:
        return f"process {os.getpid()} on {socket.gethostname()}"
    path = os.path.join(checkpoints_dir(output_dir), LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return os.read(fd, 200).decode(errors="replace").strip() or "another process"
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def release_lock(output_dir: str) -> None:
    """Give the lock of `output_dir` back. When the claim made `checkpoints/` and the run left nothing there but its
    lock and record (no checkpoint), and nothing else in the folder (or, not yet emptied for `--overwrite_output_dir`,
    no record), they go too, and the folders the claim made on the way when left empty: a run stopped by bad
    data leaves the disk as it found it (removed while the lock is held: no other run writes there meanwhile)."""
    fd = _held_locks.pop(output_dir, None)
    if fd is not None:
        os.ftruncate(fd, 0)
    _to_empty.pop(output_dir, None)
    existed, made_checkpoints = _made.pop(output_dir, (None, False))
    if made_checkpoints:
        with contextlib.suppress(OSError):  # the folder went, or something else was written there
            _take_back_claim(output_dir, existed)
    if fd is not None:
        os.close(fd)


def _take_back_claim(output_dir: str, existed: str | None) -> None:
    """Remove what a claim wrote (see `release_lock`) if the run wrote nothing else; the folders it made on the way
    to the output folder too (up to `existed`, the nearest one that was there), when left empty."""
    folder = checkpoints_dir(output_dir)
    held = set(os.listdir(folder))
    if not held <= {LOCK_FILE, RUN_FILE}:
        return  # a checkpoint (or anything else) in checkpoints/
    if RUN_FILE in held and os.listdir(output_dir) != [os.path.basename(folder)]:
        return  # the run wrote into the folder (its log, its model): its record stays, to start it again
    for name in held:
        os.remove(os.path.join(folder, name))
    os.rmdir(folder)
    made = os.path.abspath(output_dir)
    while existed is not None and made != existed and not os.listdir(made):
        os.rmdir(made)
        made = os.path.dirname(made)


def release_all_locks() -> None:
    for output_dir in list(_held_locks):
        try:
            release_lock(output_dir)
        except OSError:  # the folder went (removed by the user): nothing to release
            pass


def empty_folder(folder: str, keep: str | None = None) -> None:
    """Remove everything inside `folder` (kept itself), but the file `keep` (a path inside it) and its folders."""
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if keep is not None and path == keep:
            continue
        if keep is not None and os.path.isdir(path) and not os.path.islink(path) and keep.startswith(path + os.sep):
            empty_folder(path, keep)
        elif os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def claim_output_folder(accelerator: Accelerator, config: Any, stage: str) -> dict[str, Any]:
    """Before any work: the output folder checked and, by the main process, locked and given this run's record (with
    `--overwrite_output_dir`, locked only: `empty_claimed_folder` empties it and writes the record once the data and
    the model are ready); a resume checked against its checkpoint's. Raises `UsageError` on every process alike.
    Returns this run's record (saved into every checkpoint)."""
    from sinusoidal_encoder_training.runs.checkpoints import resolve_checkpoint

    run = run_settings(config, stage, accelerator.num_processes, accelerator.mixed_precision)
    problem = None
    if accelerator.is_main_process:
        output_dir = config.output_dir
        resuming = config.resume_from_checkpoint is not None
        problem = folder_problem(output_dir, stage, resuming, config.overwrite_output_dir)
        if problem is None and resuming and not config.overwrite_output_dir:
            checkpoint = resolve_checkpoint(output_dir, config.resume_from_checkpoint)
            problem = check_resume(checkpoint, run) if checkpoint else None
        problem = problem or _take_folder(output_dir, run, config.overwrite_output_dir)
    _share_problem(accelerator, problem)
    return run


def claim_folder_to_run_again(config: Any, stage: str, earlier: Callable[[str], bool]) -> None:
    """`claim_output_folder` for a command of one process that resumes when run again with the same settings
    (distillation, whose trainer keeps checkpoints of its own): its folder may be new, empty, or that of an earlier
    run of `stage` with the same settings (those of `MAY_CHANGE` aside), which its record in `checkpoints/` tells, or,
    for a run of a version that recorded none, `earlier(output_dir)`; with `--overwrite_output_dir` any other folder
    is emptied later (`empty_claimed_folder`). Raises `UsageError` before any work. Started by torchrun, the first
    process claims the folder for the others."""
    if os.environ.get("RANK", "0") != "0":
        return
    output_dir, overwrite = config.output_dir, config.overwrite_output_dir
    run = run_settings(config, stage, 1, "no")
    problem = folder_problem(output_dir, stage, True, overwrite, earlier)
    recorded = read_run(checkpoints_dir(output_dir))
    differences = settings_differences(recorded, run) if recorded is not None and not overwrite else []
    if problem is None and differences:
        problem = (
            f"--output_dir {output_dir} holds a {stage} run with other settings: {'; '.join(differences)}. Running "
            "again continues that run: pass its settings, or start a new run with --overwrite_output_dir or another "
            "--output_dir."
        )
    problem = problem or _take_folder(output_dir, run, overwrite)
    if problem is not None:
        raise UsageError(problem)


def _take_folder(output_dir: str, run: dict[str, Any], overwrite: bool) -> str | None:
    """The output folder made, locked and given the run's record (with `overwrite`, locked only: emptied and given
    the record by `empty_claimed_folder`), what the claim made noted (`release_lock`); or why not."""
    try:
        # what the claim makes, now or by a claim of this process still held (a run again in one process)
        made_before = _made.get(output_dir, (None, False))
        existed = made_before[0] if output_dir in _made else existing_parent(output_dir)
        os.makedirs(output_dir, exist_ok=True)
        made_checkpoints = not os.path.isdir(checkpoints_dir(output_dir)) or made_before[1]
        problem = take_lock(output_dir, report=print)
        if problem is not None:
            return problem
        _made[output_dir] = (existed if existed != os.path.abspath(output_dir) else None), made_checkpoints
        if overwrite:
            _to_empty[output_dir] = run
        else:
            clean_leftovers(output_dir)  # what a killed run of this folder left half-written, the lock held
            write_run(checkpoints_dir(output_dir), run)
    except OSError as error:  # a read-only or full disk, a folder of another user's: found before any work
        release_lock(output_dir)
        return cannot_write(output_dir, error)
    return None


@contextlib.contextmanager
def given_back_if_stopped(accelerator: Accelerator | None, output_dir: str) -> Iterator[None]:
    """The run's work after `claim_output_folder`: when it stops with an exception (bad data found once read, an
    interruption), the main process gives the folder back then (`release_lock`: the lock, and what the claim made if
    the run wrote nothing else), not when the process ends: code that goes on (a notebook, a script that catches the
    error) finds the folder free and the disk as the run found it."""
    try:
        yield
    except BaseException:
        if accelerator is None or accelerator.is_main_process:
            release_lock(output_dir)
        raise


def empty_claimed_folder(accelerator: Accelerator | None, config: Any) -> None:
    """With `--overwrite_output_dir`, once the run's data, model and step plan are ready, before it writes anything:
    the folder that `claim_output_folder` claimed is emptied by the main process, its lock held throughout, and
    given the run's record. Without the flag, or for a folder not claimed so, nothing (the claim wrote the record).
    Raises `UsageError` on every process alike."""
    if not config.overwrite_output_dir:
        return
    problem = None
    output_dir = config.output_dir
    if (accelerator is None or accelerator.is_main_process) and output_dir in _to_empty:
        try:
            empty_folder(output_dir, keep=os.path.join(checkpoints_dir(output_dir), LOCK_FILE))
            write_run(checkpoints_dir(output_dir), _to_empty.pop(output_dir))
        except OSError as error:
            release_lock(output_dir)
            problem = cannot_write(output_dir, error)
    _share_problem(accelerator, problem)


def cannot_write(output_dir: str, error: OSError) -> str:
    """The line for a folder the run cannot write (a read-only or full disk, a folder of another user's)."""
    where = error.filename or output_dir
    return f"--output_dir {output_dir}: cannot write {where} ({error.strerror}): choose a folder you can write to."


def _share_problem(accelerator: Accelerator | None, problem: str | None) -> None:
    """The main process's answer on every process: a `UsageError` everywhere, or nowhere (None: one process)."""
    several = accelerator is not None and accelerator.num_processes > 1
    if several:
        from accelerate.utils import broadcast_object_list

        problem = broadcast_object_list([problem])[0]
    if problem is not None:
        raise UsageError(problem, shared=several)
