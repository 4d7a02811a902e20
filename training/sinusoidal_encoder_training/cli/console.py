"""The commands as callables: `console.pretrain`, `console.fill_mask`, ... (a name of `commands.COMMANDS`, `-` as
`_`), each a `Command`, which the console scripts (`sinusoidal-encoder-pretrain`, ...), `python -m
sinusoidal_encoder_training pretrain` and the `training/*.py` scripts of a checkout call. A command parses its flags
with its run configuration (`configs`, which imports no heavy library, so that `--help` and a bad flag answer at
once), then imports its stage's module and runs it; a module of an extra that is not installed ends in one line
naming the extra (the extras each command needs: its entry of the table)."""

from __future__ import annotations

import dataclasses
import importlib
import os

from sinusoidal_encoder_training.cli.arguments import FlagConfig, parse_config
from sinusoidal_encoder_training.cli.command_line import UsageError, front
from sinusoidal_encoder_training.cli.commands import COMMANDS, SCRIPT_PREFIX, flags_elsewhere


@dataclasses.dataclass(frozen=True)
class Command:
    """A console script (`console.py`): calling it parses the flags (`argv`, `sys.argv[1:]` by default) into
    `config_class` (`--help`, and a bad value's one line, come before any library that does the work is imported),
    then imports `sinusoidal_encoder_training.MODULE` and calls its `run(config)`, behind the front. A command that
    is not `launched` (its entry) stops first, in one line, under a launch of several processes."""

    name: str
    module: str
    config_class: type[FlagConfig]
    launched: bool = False

    def __call__(self, argv: list[str] | None = None) -> None:
        with front():
            processes = int(os.environ.get("WORLD_SIZE") or 1)  # what accelerate launch and torchrun set
            if processes > 1 and not self.launched:
                raise UsageError(
                    f"{self.name} runs as one process, and this launch started {processes}: run it without "
                    f"accelerate launch ({SCRIPT_PREFIX}{self.name} ..., or its script in training/).",
                    shared=True,
                )
            config = parse_config(self.config_class, argv, elsewhere=flags_elsewhere(self.config_class))
            importlib.import_module(f"sinusoidal_encoder_training.{self.module}").run(config)


def command(name: str) -> Command:
    """The command `name` of `commands.COMMANDS` (`fill-mask`, or `fill_mask`)."""
    entry = COMMANDS[name.replace("_", "-")]
    return Command(entry.name, entry.module, entry.config, entry.launched)


def __getattr__(name: str) -> Command:
    """`console.fill_mask` and `from sinusoidal_encoder_training.cli.console import fill_mask`: the command of that
    name (what the console scripts' entry points name)."""
    if name.replace("_", "-") not in COMMANDS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return command(name)


def __dir__() -> list[str]:
    return sorted([*globals(), *(name.replace("-", "_") for name in COMMANDS)])
