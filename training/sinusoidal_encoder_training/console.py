"""The commands as callables: `console.pretrain`, `console.fill_mask`, ... (a name of `commands.COMMANDS`, `-` as
`_`), each a `command_line.Command`, which the console scripts (`sinusoidal-encoder-pretrain`, ...), `python -m
sinusoidal_encoder_training pretrain` and the `training/*.py` scripts of a checkout call. A command parses its flags
with its run configuration (`configs`, which imports no heavy library, so that `--help` and a bad flag answer at
once), then imports its stage's module and runs it; a module of an extra that is not installed ends in one line
naming the extra (the extras each command needs: its entry of the table)."""

from __future__ import annotations

from sinusoidal_encoder_training import configs
from sinusoidal_encoder_training.command_line import Command
from sinusoidal_encoder_training.commands import COMMANDS


def command(name: str) -> Command:
    """The command `name` of `commands.COMMANDS` (`fill-mask`, or `fill_mask`)."""
    entry = COMMANDS[name.replace("_", "-")]
    return Command(entry.module, None if entry.config is None else getattr(configs, entry.config))


def __getattr__(name: str) -> Command:
    """`console.fill_mask` and `from sinusoidal_encoder_training.console import fill_mask`: the command of that
    name (what the console scripts' entry points name)."""
    if name.replace("_", "-") not in COMMANDS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return command(name)


def __dir__() -> list[str]:
    return sorted([*globals(), *(name.replace("-", "_") for name in COMMANDS)])
