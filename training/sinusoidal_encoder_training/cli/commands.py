"""The table of the package's commands, gathered from the configurations: a module of `configs` that declares
`COMMAND = CommandEntry(...)` (after its configuration class) makes a command. Everything a command is besides its
configuration and its stage follows from its entry: its console script `sinusoidal-encoder-NAME` (setup.py declares
one per entry), `python -m sinusoidal_encoder_training NAME` (and `accelerate launch -m sinusoidal_encoder_training
NAME`), the callable that both run (`console.NAME`, with `-` as `_`), the list `python -m sinusoidal_encoder_training`
prints, and the packaging tests. A new command is two modules: its configuration (`configs/NAME.py`, the class and its
entry) and its stage (`run(config)`).

Gathering the table imports the configurations alone, which import nothing beyond the standard library: setup.py
reads it without the package's dependencies, and `--help` answers before torch is imported.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

from sinusoidal_encoder_training import configs
from sinusoidal_encoder_training.cli.arguments import CommandEntry

SCRIPT_PREFIX = "sinusoidal-encoder-"


def gather_commands() -> dict[str, CommandEntry]:
    """The entries the modules of `configs` declare (`COMMAND`), by name, in alphabetical order."""
    entries = []
    for module_info in pkgutil.iter_modules(configs.__path__):
        module = importlib.import_module(f"{configs.__name__}.{module_info.name}")
        entry = getattr(module, "COMMAND", None)
        if entry is not None:
            if not isinstance(entry, CommandEntry):
                raise TypeError(f"{module.__name__}.COMMAND is not a CommandEntry: {entry!r}")
            entries.append(entry)
    names = [entry.name for entry in entries]
    if len(set(names)) != len(names):
        raise ValueError(f"two configurations declare the same command: {sorted(names)}")
    return {entry.name: entry for entry in sorted(entries, key=lambda entry: entry.name)}


COMMANDS = gather_commands()


def flags_elsewhere(config_class: type) -> dict[str, set[str]]:
    """The flags (field names) of every command but the one of `config_class`, by command: what its command line
    names an unknown flag by (`arguments.parse_config(elsewhere=...)`)."""
    return {
        name: {field.name for field in dataclasses.fields(entry.config) if not field.metadata.get("positional")}
        for name, entry in COMMANDS.items()
        if entry.config is not config_class
    }


def console_scripts() -> list[str]:
    """The console scripts of the table, as setup.py's `entry_points` declares them."""
    return [
        f"{SCRIPT_PREFIX}{name} = sinusoidal_encoder_training.cli.console:{name.replace('-', '_')}"
        for name in COMMANDS
    ]
