"""The command-line front: the table of commands (`commands`, which imports nothing, so that setup.py can read it),
the commands as callables (`console`: flags parsed first, then the stage imported), the command line of a
configuration (`arguments`: argparse from the dataclass fields, the checks several settings share) and what every
command line does around its work (`command_line`: one-line errors, Ctrl-C, missing extras)."""
