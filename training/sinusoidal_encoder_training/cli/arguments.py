"""What run configurations are built from, and the command lines made of them: each setting is a field of a frozen
dataclass (`FlagConfig`), with its default and help text (`field(default=..., metadata={"help": ...})`), checked in
`__post_init__`; `ConfigParser` turns the fields into flags with argparse alone (`parse_config`); a `CommandEntry`
makes a configuration a command. Here too: the checks several settings share (a model or dataset name, a positive
count, config overrides). The configurations themselves are in `configs`. Importing this module imports no heavy
library."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import inspect
import json
import math
import os
import sys
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, NoReturn, TypeVar

from sinusoidal_encoder_training.cli.command_line import UsageError, first_process_of_machine, leave_it_to_the_first

if TYPE_CHECKING:
    from transformers import PretrainedConfig

ConfigT = TypeVar("ConfigT", bound="FlagConfig")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlagConfig:
    """A run configuration: one field per setting (the command line has a flag of the same name), each with its
    default and help. Frozen: a variant is made with `dataclasses.replace`, which checks it again. Values derived
    from the settings are properties. A class's `_argument_group_name` titles the `--help` section of the fields it
    declares."""

    def __post_init__(self) -> None:
        """Subclasses check their fields here (calling this first), raising `UsageError`s that name the flag. Here:
        every number is finite (`--learning_rate nan` reached the optimizer's traceback, `--weight_decay inf` a
        model of NaNs saved as if trained)."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            for number in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(number, float) and not math.isfinite(number):
                    raise UsageError(f"--{field.name} must be a finite number, got {number}.")
        check_reads_kept(self)

    def read_paths(self) -> dict[str, str]:
        """The local files and folders this run reads, each by what names it (`"--train_file data/train.txt"`):
        every field whose metadata has `"reads"` (True, or "data" for a folder of data files) and whose value is a
        path here (an unset flag, a preset or a Hub id is not)."""
        reads = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.metadata.get("reads") and isinstance(value, str) and os.path.exists(value):
                reads[f"{flag_name(field)} {value}"] = value
        return reads

    def cleared_paths(self) -> list[Cleared]:
        """What this run will empty or replace before or while it writes: for every switch set whose metadata has
        `"clears": NAME`, the folder of the field NAME (which the switch empties). Commands that replace files
        without such a switch say so by overriding this."""
        return [
            Cleared(
                f"--{field.name} would empty", getattr(self, field.metadata["clears"]), f"--{field.metadata['clears']}"
            )
            for field in dataclasses.fields(self)
            if field.metadata.get("clears") and getattr(self, field.name)
        ]


class CommandEntry(NamedTuple):
    """A command, declared beside its configuration (`COMMAND = CommandEntry(...)` in a module of `configs`, which
    `commands.COMMANDS` gathers): its name (the console script `sinusoidal-encoder-NAME`), the module of
    `sinusoidal_encoder_training` whose `run(config)` does its work, its configuration class, what it does in a few
    words, the extras of pyproject.toml it needs beyond the base install (a run without the first one ends in one
    line naming it), and whether it runs as several processes under `accelerate launch`, each doing its share
    (`launched`: training, evaluation); a command that does not is refused under a launch of several, in one line
    (its processes would each do the whole work and write the same files)."""

    name: str
    module: str
    config: type[FlagConfig]
    summary: str
    extras: tuple[str, ...] = ()
    launched: bool = False


@dataclasses.dataclass(frozen=True)
class Cleared:
    """A path a run empties or replaces, what makes it do so (`"--overwrite_output_dir would empty"`), and the flag
    that names the path (`"--output_dir"`)."""

    why: str
    path: str
    flag: str


def flag_name(field: dataclasses.Field) -> str:
    """How the command line names a field: `--name`, or the metavar (or the upper-case name) of a positional one."""
    if field.metadata.get("positional"):
        return field.metadata.get("metavar", field.name.upper())
    return f"--{field.name}"


def check_reads_kept(config: FlagConfig) -> None:
    """The rule that nothing a run reads is deleted or changed by that run: a `UsageError`, before any work, when a
    path the run empties or replaces (`cleared_paths`) is, or holds, a path it reads (`read_paths`: the model or
    tokenizer it starts from, a data file, the checkpoint it resumes), or when the folder it writes (a field whose
    metadata has `"writes": True`) lies inside a folder it reads (a local dataset folder would load the run's files
    as data next time, a model folder would be published with another model in it), or a file it writes (`"writes":
    "file"`) inside a folder it reads as data (`"reads": "data"`; a model folder may hold a results file). Paths are
    compared as the system resolves them (links followed), so another spelling of the same folder is caught too."""
    reads = config.read_paths()
    data = {
        f"{flag_name(field)} {getattr(config, field.name)}": getattr(config, field.name)
        for field in dataclasses.fields(config)
        if field.metadata.get("reads") == "data" and getattr(config, field.name) in reads.values()
    }
    for field in dataclasses.fields(config):
        kind = field.metadata.get("writes")
        written = getattr(config, field.name) if kind else None
        for what, path in (reads if kind is True else data).items() if written else ():
            read = os.path.realpath(path)
            if os.path.isdir(path) and os.path.realpath(written).startswith(read.rstrip(os.sep) + os.sep):
                which, place = ("it", "a file") if kind == "file" else ("its files", "a folder")
                raise UsageError(
                    f"{flag_name(field)} {written} is inside {what}, read by this run: {which} would become part "
                    f"of what it reads. Nothing was changed; give {flag_name(field)} {place} outside it."
                )
    for cleared in config.cleared_paths():
        target = os.path.realpath(cleared.path)
        for what, path in reads.items():
            read = os.path.realpath(path)
            if read != target and not read.startswith(target.rstrip(os.sep) + os.sep):
                continue
            relation = "is" if read == target else "holds"
            resume = ", or drop the switch to resume" if "--resume_from_checkpoint" in what else ""
            raise UsageError(
                f"{cleared.why} {cleared.flag} {cleared.path}, which {relation} {what}, read by this run: nothing "
                f"was changed; choose another {cleared.flag}{resume}, or move what it reads elsewhere first."
            )


def check_positive(config: FlagConfig, *names: str) -> None:
    """A `ValueError` naming the first flag of `names` that is set to zero or less (None: unset, allowed)."""
    for name in names:
        value = getattr(config, name)
        if value is not None and not isinstance(value, str) and value <= 0:  # a word (`epoch`): one of its choices
            raise UsageError(f"--{name} must be a positive integer, got {value}.")


SEEDS = 2**32  # numpy's seeds, which accelerate's and datasets' seeding go through: 0 … 2**32 - 1


def check_seeds(config: FlagConfig, *names: str) -> None:
    """A `UsageError` naming the first flag of `names` holding a seed (or a list of seeds) outside 0 … 2**32 - 1."""
    for name in names:
        value = getattr(config, name)
        for seed in value if isinstance(value, (list, tuple)) else [value]:
            if not 0 <= seed < SEEDS:
                raise UsageError(f"--{name} must be an integer from 0 to {SEEDS - 1}, got {seed}.")


def check_model_source(name: str, value: str | None, presets: tuple[str, ...] = (), repo_type: str = "model") -> None:
    """A `UsageError` naming `name` (the flag, as `--model_name_or_path`) when `value`, a folder, a file or a Hub
    id ('owner/name'), cannot be one. A path that looks local (absolute, './', '~', a trailing slash, more than one
    '/', or whose first part is a folder here, as in 'outputs/my-model') and does not exist is a missing folder, not
    a Hub id. Anything else is resolved as a Hub id of `repo_type` (a model, a dataset) before any work
    (`hub_source_problem`); the line that refuses it names the presets, where there are, and the nearest local
    folder."""
    if value is None or value in presets or os.path.exists(os.path.expanduser(value)):
        return
    parts = value.split("/")
    local = (
        value.startswith(("/", ".", "~"))
        or value.endswith("/")
        or len(parts) > 2
        or os.sep in value.replace("/", "")
        or (len(parts) == 2 and os.path.isdir(parts[0]))
    )
    if local:
        raise UsageError(f"{name} {value!r}: no such file or folder.")
    problem = hub_source_problem(value, repo_type)
    if problem is not None:
        choices = f"a preset ({', '.join(presets)}), " if presets else ""
        raise UsageError(f"{name} {value!r} is not {choices}a local folder or file, {problem}{nearest_folder(value)}")


def hub_source_problem(repo_id: str, repo_type: str = "model") -> str | None:
    """Why `repo_id` cannot be loaded from the Hub, or None: not a valid id; offline (HF_HUB_OFFLINE) and not in
    the local cache (for a dataset, nor in datasets' cache of prepared datasets); online, a repository the Hub does
    not have (or this user cannot see), or a Hub that cannot be reached."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return "nor a Hub id ('owner/name' of letters, digits, '-', '_' and '.')."
    cached = os.path.join(constants.HF_HUB_CACHE, f"{repo_type}s--{repo_id.replace('/', '--')}", "snapshots")
    if os.path.isdir(cached) and os.listdir(cached):
        return None
    prepared = os.environ.get("HF_DATASETS_CACHE") or os.path.join(constants.HF_HOME, "datasets")
    if repo_type == "dataset":  # prepared by datasets before: it loads offline from its own cache
        if os.path.isdir(os.path.join(prepared, repo_id.replace("/", "___"))):
            return None
    if constants.HF_HUB_OFFLINE:
        caches = constants.HF_HUB_CACHE + (f" or {prepared}" if repo_type == "dataset" else "")
        return (
            f"and the Hub is off (HF_HUB_OFFLINE=1) with no copy of {repo_id} in the cache ({caches}): give a local "
            "folder, or load it once with the Hub on."
        )
    try:
        exists = HfApi().repo_exists(repo_id, repo_type=repo_type)
    except Exception as error:  # no network, a proxy, a Hub outage: requests' and huggingface_hub's errors alike
        return (
            f"and the Hub cannot be reached to look for {repo_id} ({type(error).__name__}): check the network, or "
            "give a local folder."
        )
    if not exists:
        return (
            f"and the Hub has no {repo_type} {repo_id} (a private or gated one needs `hf auth login` first): check "
            "the name."
        )
    return None


def nearest_folder(value: str) -> str:
    """' Did you mean ...?' naming the local folder whose name is closest to `value`'s last part, or ''."""
    import difflib

    parent = os.path.dirname(os.path.expanduser(value)) or "."
    try:
        folders = [entry.name for entry in os.scandir(parent) if entry.is_dir() and not entry.name.startswith(".")]
    except OSError:
        return ""
    close = difflib.get_close_matches(os.path.basename(value.rstrip("/")), folders, n=1, cutoff=0.6)
    return f" Did you mean {os.path.join(parent, close[0]) if parent != '.' else close[0]!r}?" if close else ""


def apply_overrides(config: PretrainedConfig, overrides: str | None) -> None:
    """'a=1,b=x' (the value of `--config_overrides`) onto a model config, each value parsed as the type of the field
    it replaces, then the config's own `check()` where it has one (a sinusoidal-encoder config)."""
    if not overrides:
        return
    for item in overrides.split(","):
        if "=" not in item:
            raise UsageError(f"--config_overrides: {item!r} is not of the form field=value.")
        key, value = (part.strip() for part in item.split("=", 1))
        if not hasattr(config, key):
            raise UsageError(f"--config_overrides: the config has no field {key!r}.")
        old = getattr(config, key)
        if isinstance(old, str):  # text stays text (`position_mode=none` is the mode "none")
            new = value
        elif value.lower() in ("null", "none"):  # unset an optional field; config.check() rejects it elsewhere
            new = None
        elif isinstance(old, bool):
            if value.lower() not in ("true", "false", "1", "0"):
                raise UsageError(f"--config_overrides: {key} must be true or false, got {value!r}.")
            new = value.lower() in ("true", "1")
        elif isinstance(old, (int, float)):
            try:
                new = type(old)(value)
            except ValueError:
                raise UsageError(f"--config_overrides: {key} must be a number, got {value!r}.") from None
        elif old is None:  # an optional field (long_input_attention_window): a number, or the text itself
            try:
                new = json.loads(value)
            except json.JSONDecodeError:
                new = value
        else:
            raise UsageError(f"--config_overrides: the field {key!r} ({type(old).__name__}) cannot be set from text.")
        setattr(config, key, new)
    try:
        if hasattr(config, "check"):
            config.check()
    except ValueError as error:  # the model config's own check, which names the field
        raise UsageError(f"--config_overrides: {error}") from error


def redefault(config_class: type, name: str, default: Any) -> Any:
    """The field `name` of `config_class` with another default and the same help: how a job changes a shared
    default (`learning_rate: float = redefault(TrainingConfig, "learning_rate", 1e-4)`)."""
    return dataclasses.field(default=default, metadata=config_class.__dataclass_fields__[name].metadata)


def number_or_word(words: tuple[str, ...]) -> Callable[[str], int | str]:
    """argparse's type of a flag that takes an integer or one of `words` (`--eval_steps 500`, `--eval_steps epoch`)."""

    def convert(value: str) -> int | str:
        if value in words:
            return value
        try:
            return int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid value: {value!r} (an integer, or {' or '.join(map(repr, words))})"
            ) from None

    return convert


def _flag_options(field: dataclasses.Field, hint: Any) -> dict[str, Any]:
    """argparse's options for the flag of one field, from its type hint: `X | None` as X (default None), a `Literal`
    as its choices, `int | Literal[...]` as an integer or one of the words, `list[X]` as values of X (`nargs` "+"), a
    boolean as a bare switch (all default to False), the field's default, or `required` without one; argparse's
    `nargs`, `choices` and `metavar` where the field's metadata gives them. The help text is taken literally (a `%`
    needs no escaping)."""
    options: dict[str, Any] = {"help": field.metadata.get("help", "").replace("%", "%%")}
    arguments = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(arguments) == 1:
        hint = arguments[0]  # an optional value: its type, None by default
    origin = typing.get_origin(hint)
    if hint is bool:
        if field.default is not False:
            raise TypeError(f"{field.name}: a boolean setting is a switch, so its default must be False.")
        return {**options, "action": "store_true"}
    if arguments and arguments[0] is int and [typing.get_origin(a) for a in arguments[1:]] == [Literal]:
        options["type"] = number_or_word(typing.get_args(arguments[1]))  # `int | Literal["epoch"]`
    elif origin is Literal:
        choices = typing.get_args(hint)
        options.update(choices=choices, type=type(choices[0]))
    elif origin is list:
        options.update(type=typing.get_args(hint)[0], nargs=field.metadata.get("nargs", "+"))
    elif hint in (str, int, float):
        options["type"] = hint
    else:
        raise TypeError(f"{field.name}: a setting of type {hint} has no flag (str, int, float, bool, Literal, list).")
    if field.default is not dataclasses.MISSING:
        options["default"] = field.default
    elif field.default_factory is not dataclasses.MISSING:
        options["default"] = field.default_factory()
    elif not field.metadata.get("positional"):
        options["required"] = True
    for key in ("nargs", "choices", "metavar"):  # argparse's own options, given in the metadata
        if key in field.metadata:
            options[key] = field.metadata[key]
    return options


class ConfigParser(argparse.ArgumentParser):
    """The command line of one run configuration: a flag per field (`--name`, no alias or abbreviation), typed by
    its hint (`_flag_options`), grouped in `--help` by the class that declares the field (its
    `_argument_group_name`), the description above them kept as written. A field whose metadata has
    `"positional": True` is a positional argument. Built with argparse alone: no library is imported to answer
    `--help`."""

    def __init__(
        self,
        config_class: type[FlagConfig],
        description: str | None = None,
        elsewhere: Mapping[str, Collection[str]] | None = None,
    ):
        super().__init__(
            description=description, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
        )
        self.config_class = config_class
        # the flags of the other commands, by command: an unknown flag one of them takes is named as theirs
        self.elsewhere = elsewhere or {}
        hints = typing.get_type_hints(config_class)
        fields = [field for field in dataclasses.fields(config_class) if field.init]
        owners = {  # the class that first declares each field (a redeclared default keeps its section)
            field.name: next(
                k for k in reversed(config_class.__mro__) if field.name in vars(k).get("__annotations__", {})
            )
            for field in fields
        }
        groups: dict[type, argparse._ActionsContainer] = {}  # sections in the order of the bases: its own first
        for owner in (k for k in config_class.__mro__ if k in owners.values()):
            title = vars(owner).get("_argument_group_name")
            groups[owner] = self.add_argument_group(title) if title else self
        for field in fields:
            options = _flag_options(field, hints[field.name])
            name = field.name if field.metadata.get("positional") else f"--{field.name}"
            groups[owners[field.name]].add_argument(name, **options)

    def parse_config(self, argv: list[str] | None = None) -> FlagConfig:
        """The configuration of `argv` (`sys.argv[1:]` by default), built (and so checked) from the flags. Every
        process of a launch parses the same flags: a refusal is `shared` (shown once per machine)."""
        self._argv = sys.argv[1:] if argv is None else list(argv)
        try:
            return self.config_class(**vars(self.parse_args(self._argv)))
        except UsageError as error:
            error.shared = True
            raise

    def error(self, message: str) -> NoReturn:
        """What argparse refuses, in one line and status 2, like every other bad input: its message without the
        usage (`--help` shows that), a flag that does not exist named first (argparse would report a required
        flag as missing when it was only misspelt) with the closest flag there is. Written by the first process of
        a machine alone, as every process of a launch parses the same flags."""
        if not first_process_of_machine():
            leave_it_to_the_first()
        unknown = self.unknown_flags(getattr(self, "_argv", sys.argv[1:]))
        if unknown:
            candidates = [flag for flag in self.flags() if flag != "--help"]
            named = []
            for flag in unknown:
                owners = self.other_commands_with(flag)
                if owners:
                    commands = " and ".join([", ".join(owners[:-1]), owners[-1]] if len(owners) > 1 else owners)
                    named.append(f"{flag} (a flag of {commands}, not of this command)")
                    continue
                guess = difflib.get_close_matches(flag, candidates, n=1)
                named.append(f"{flag} (did you mean {guess[0]}?)" if guess else flag)
            message = "unrecognized arguments: " + ", ".join(named)
        self.exit(2, f"{self.prog}: error: {message}; {self.prog} --help lists the flags.\n")

    def flags(self) -> list[str]:
        return [option for action in self._actions for option in action.option_strings if option.startswith("--")]

    def other_commands_with(self, flag: str) -> list[str]:
        """The other commands that take `flag` (`--group_by_length` given to pretrain: finetune), of `elsewhere`."""
        return [command for command, flags in self.elsewhere.items() if flag.removeprefix("--") in flags]

    def unknown_flags(self, argv: list[str]) -> list[str]:
        """The `--name` words of `argv` that name no flag (no abbreviation is taken: a flag added later would make
        it mean another); what follows a bare `--` is positional."""
        flags, unknown = self.flags(), []
        for word in argv:
            if word == "--":
                break
            name = word.split("=", 1)[0]
            if name.startswith("--") and name not in flags:
                unknown.append(name)
        return unknown


def parse_config(
    config_class: type[ConfigT],
    argv: list[str] | None = None,
    description: str | None = None,
    elsewhere: Mapping[str, Collection[str]] | None = None,
) -> ConfigT:
    """The configuration of a command line (`sys.argv[1:]` by default), checked: a bad value raises the
    `UsageError` of the configuration's `__post_init__`, which names the flag; what argparse itself refuses (an
    unknown flag, a value of the wrong type or outside the choices) stops with one line (`ConfigParser.error`; an
    unknown flag that another command takes, by `elsewhere`, the flags of each: named as theirs). `description`
    heads `--help` (default: the configuration's docstring)."""
    parser = ConfigParser(
        config_class,
        inspect.cleandoc(config_class.__doc__ or "") if description is None else description,
        elsewhere,
    )
    return parser.parse_config(argv)
