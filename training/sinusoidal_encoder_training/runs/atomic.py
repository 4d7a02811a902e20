"""Nothing half-written is ever picked up. What a command writes goes first under a temporary name in the folder
where it ends, `.incomplete-PID-NAME` (PID: the writing process), and is renamed into place once whole (`staged`,
`temporary_path`); a rename within a folder is atomic, so a reader sees the old file or the new one, never a part.

A command killed at any moment (SIGKILL included) leaves at most such temporaries. Whose process is gone, they are
leftovers (`leftovers`): the next run of a command on the folder removes them and says so (`clean_leftovers`), and
`publish` refuses a folder that holds any temporary, a live writer's included (`hub.check_folder`)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Callable, Iterator

MARK = ".incomplete-"
_WRITER = re.compile(re.escape(MARK) + r"(\d+)-")


def temporary_path(path: str) -> str:
    """Where `path` is written before it is renamed into place: beside it, `.incomplete-PID-NAME`."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f"{MARK}{os.getpid()}-{name}")


def is_temporary(name: str) -> bool:
    return name.startswith(MARK)


def _writer_alive(name: str) -> bool:
    """Whether the process that writes the temporary `name` still runs (a name without a process id, from an older
    version, has none)."""
    match = _WRITER.match(name)
    if match is None:
        return False
    pid = int(match.group(1))
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def temporaries(folder: str, include_live: bool = True, recursive: bool = True) -> list[str]:
    """The temporaries under `folder` (paths, a temporary folder once, not its contents), in its subfolders too
    unless not `recursive`: all of them, or with `include_live=False` only those whose writer is gone."""
    found = []
    for root, folders, files in os.walk(folder):
        for name in sorted(files) + sorted(folders):
            if is_temporary(name) and (include_live or not _writer_alive(name)):
                found.append(os.path.join(root, name))
        folders[:] = [name for name in folders if recursive and not is_temporary(name)]
    return sorted(found)


def leftovers(folder: str, recursive: bool = True) -> list[str]:
    """What killed commands left under `folder`: temporaries whose writer is gone. A temporary without a process id
    (a checkpoint being saved: `checkpoints.save_checkpoint`) counts as one, so only the run that holds the folder's
    lock looks into its subfolders."""
    return temporaries(folder, include_live=False, recursive=recursive)


def clean_leftovers(folder: str, report: Callable[[str], None] | None = print, recursive: bool = True) -> list[str]:
    """Remove what killed commands left under `folder` (see `leftovers`), saying so to `report` in one line;
    returns what was removed."""
    if not os.path.isdir(folder):
        return []
    removed = leftovers(folder, recursive)
    for path in removed:
        remove(path)
    if removed and report is not None:
        shown = ", ".join(os.path.relpath(path, folder) for path in removed[:3])
        more = f" and {len(removed) - 3} more" if len(removed) > 3 else ""
        report(f"removed what a killed run left half-written in {folder}: {shown}{more}")
    return removed


def remove(path: str) -> None:
    """Remove the file or folder `path` (a link itself, not what it points to), if there."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


@contextlib.contextmanager
def staged(folder: str, replaces: tuple[str, ...] = ()) -> Iterator[str]:
    """A new temporary folder inside `folder` (created) to write into. When the block ends without an error, each
    entry written there replaces the entry of that name in `folder`, and each name of `replaces` not written is
    removed (a stale companion file, as an earlier export's weights); on an error nothing is moved, the temporary is
    removed, and `folder` is as it was. (A kill leaves the temporary, for `clean_leftovers`.)"""
    os.makedirs(folder, exist_ok=True)
    temporary = temporary_path(os.path.join(folder, "staged"))
    remove(temporary)
    os.makedirs(temporary)
    try:
        yield temporary
    except BaseException:
        remove(temporary)
        raise
    written = os.listdir(temporary)
    for name in written:
        target = os.path.join(folder, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        os.replace(os.path.join(temporary, name), target)
    for name in replaces:
        if name not in written:
            remove(os.path.join(folder, name))
    os.rmdir(temporary)
