"""`python -m sinusoidal_encoder_training COMMAND [FLAGS]`: any command of `commands.COMMANDS`, as its console script
`sinusoidal-encoder-COMMAND` runs it (also `accelerate launch -m sinusoidal_encoder_training COMMAND ...`). Without a
command, or with `--help`, the list of commands."""

from __future__ import annotations

import sys

from sinusoidal_encoder_training.cli.commands import COMMANDS, SCRIPT_PREFIX

PROGRAM = "python -m sinusoidal_encoder_training"


def usage() -> str:
    """The list of commands, each with what it does."""
    width = max(len(name) for name in COMMANDS)
    lines = [f"usage: {PROGRAM} COMMAND [FLAGS]  ({PROGRAM} COMMAND --help for its flags)", "", "commands:"]
    lines += [f"  {name:<{width}}  {entry.summary}" for name, entry in COMMANDS.items()]
    lines += ["", f"Installed, each command is also a console script: {SCRIPT_PREFIX}COMMAND."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    name, flags = argv[0], argv[1:]
    if name.replace("_", "-") not in COMMANDS:
        sys.stderr.write(f"{usage()}\n{PROGRAM}: error: no command {name!r}: choose one of {', '.join(COMMANDS)}\n")
        sys.exit(2)
    from sinusoidal_encoder_training.cli.console import command

    sys.argv[0] = f"{PROGRAM} {name}"  # argparse's `prog`: the usage line and the one-line errors name the command
    command(name)(flags)


if __name__ == "__main__":
    main()
