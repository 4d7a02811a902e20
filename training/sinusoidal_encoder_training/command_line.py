"""The front of every command line. An anticipated error, a `UsageError` (a bad flag value, a file or folder that is
not there, data or a model that cannot be used), ends the command with one line that names the problem, in
argparse's form (`pretrain.py: error: ...`), and exit status 2: no traceback. Any other exception keeps its
traceback. `SINUSOIDAL_ENCODER_DEBUG=1` in the environment shows the traceback of anticipated errors too. Ctrl-C
ends with one line as well (status 130): during training, where the newest checkpoint is and the command that
resumes (`Interrupted`, raised by the training loop); SIGTERM during training the same, with status 143
(`Terminated`). A module of an extra that is not installed (`datasets`
without the `training` extra) is an anticipated error too: one line naming the extra and the pip command that adds
it (`require_extra`, `missing_extra`; the console scripts catch it when the stage's module is imported,
`Command`)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.metadata
import json
import os
import shlex
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import NoReturn
from urllib.parse import unquote, urlparse

DEBUG_VARIABLE = "SINUSOIDAL_ENCODER_DEBUG"
DISTRIBUTION = "sinusoidal-encoder"

# The extra of pyproject.toml's [project.optional-dependencies] that installs each top-level module a command may
# import beyond the base install (torch, transformers, safetensors and what they bring: huggingface_hub, tokenizers,
# tqdm, jinja2, numpy). `integrations` holds `onnx`'s modules too; `all` holds every extra.
# tests/test_packaging.py checks this against pyproject.toml.
EXTRA_OF_MODULE = {
    "accelerate": "training",
    "datasets": "training",
    "tensorboard": "training",
    "tokenizers": "training",
    "tqdm": "training",
    "jinja2": "training",
    "matplotlib": "plots",
    "mpl_toolkits": "plots",
    "pylab": "plots",
    "sklearn": "baselines",
    "onnx": "onnx",
    "onnxscript": "onnx",
    "onnxruntime": "onnx",
    "peft": "integrations",
    "sentence_transformers": "integrations",
}


class UsageError(ValueError):
    """A problem with what the user passed, whose message names the flag or path and what to do. A `ValueError`, so
    that code calling the library directly catches it as before."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during training, carrying the line that says where the newest checkpoint is and how to resume."""

    status = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C


class Terminated(Interrupted):
    """SIGTERM during training (what Slurm, Kubernetes and `docker stop` send): handled as Ctrl-C, status 143."""

    status = 143  # 128 + SIGTERM


@contextlib.contextmanager
def loading(flag: str, path: str | os.PathLike | None, what: str = "model") -> Iterator[None]:
    """Loading `what` (a model, config or tokenizer) from `path`, the value of `flag`: when `path` is a local
    folder or file and transformers, tokenizers, safetensors or json fail on it (a truncated config.json, a 0-byte
    weights file, a folder without a tokenizer), one `UsageError` line naming the flag, the path and the damaged
    file (`local_damage`) instead of their tracebacks. Errors from anything else keep theirs."""
    try:
        yield
    except UsageError:
        raise
    except Exception as error:  # transformers', json's, tokenizers' and safetensors' own error types
        if path is None or not os.path.exists(os.fspath(path)):
            raise
        found = local_damage(os.fspath(path), what)
        if found is None:  # no damaged file to name: transformers' own account, for the errors it raises on a folder
            if not isinstance(error, (OSError, ValueError)):
                raise
            found = " ".join(str(error).split())[:300]
        raise UsageError(f"{flag} {os.fspath(path)!r}: {found}") from error


def check_local_files(flag: str, path: str | os.PathLike | None, what: str = "model") -> None:
    """Before any work: a `UsageError` naming `flag` when the local folder `path` has damaged or missing files
    (`local_damage`). Hub ids are not looked at here."""
    if path is not None and os.path.exists(os.fspath(path)):
        damage = local_damage(os.fspath(path), what)
        if damage is not None:
            raise UsageError(f"{flag} {os.fspath(path)!r}: {damage}")


def local_damage(path: str, what: str) -> str | None:
    """What is wrong with the local model or tokenizer folder `path`, as far as its files show, or None."""
    folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
    config = os.path.join(folder, "config.json")
    if what != "tokenizer" and os.path.isfile(config):
        try:
            with open(config, encoding="utf-8") as handle:
                json.load(handle)
        except (ValueError, UnicodeDecodeError) as error:
            return f"config.json is not valid JSON ({error}): it is damaged; save or download the folder again."
    if what == "tokenizer":
        names = set(os.listdir(folder))
        slow = {"vocab.txt", "vocab.json", "merges.txt", "spiece.model", "tokenizer.model", "sentencepiece.bpe.model"}
        if "tokenizer.json" not in names and not names & slow:
            return (
                "the folder has no tokenizer (no tokenizer.json): save the tokenizer into it "
                "(tokenizer.save_pretrained), or pass the tokenizer's folder with --tokenizer_name."
            )
        return None
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            file = os.path.join(folder, name)
            if os.path.getsize(file) == 0:
                return f"{name} is empty (0 bytes): the weights are missing; save or download the folder again."
            try:
                from safetensors import safe_open

                with safe_open(file, framework="pt"):
                    pass
            except Exception as error:  # safetensors' own error type for a damaged header
                return f"{name} cannot be read ({error}): the weights are damaged; save or download the folder again."
    return None


def install_command(extra: str) -> str:
    """The pip command that adds `extra` to this installation, from where pip installed it (the direct_url.json of
    its metadata): the wheel file or the folder (`-e` if editable), else the index; `.` in the repository when the
    package is not installed."""
    found = list(importlib.metadata.distributions(name=DISTRIBUTION))
    if not found:
        return f"pip install -e '.[{extra}]' (in the repository)"
    origin = next((json.loads(text) for d in found if (text := d.read_text("direct_url.json"))), {})
    url = origin.get("url", "")
    if url.startswith("file://") and "vcs_info" not in origin:
        editable = "-e " if origin.get("dir_info", {}).get("editable") else ""
        return f"pip install {editable}{shlex.quote(unquote(urlparse(url).path) + f'[{extra}]')}"
    if url:
        vcs = origin.get("vcs_info", {}).get("vcs")
        return f"pip install {shlex.quote(f'{DISTRIBUTION}[{extra}] @ ' + (f'{vcs}+' if vcs else '') + url)}"
    return f"pip install {shlex.quote(f'{DISTRIBUTION}[{extra}]')}"


def missing_extra(
    error: ModuleNotFoundError, what: str = "this command", extra: str | None = None
) -> UsageError | None:
    """The one-line error for `error` when the missing module belongs to an extra (`EXTRA_OF_MODULE`, or `extra`):
    what needs which extra, and the pip command that adds it; None for any other missing module."""
    extra = extra or EXTRA_OF_MODULE.get((error.name or "").partition(".")[0])
    if extra is None:
        return None
    return UsageError(f"{what} needs the '{extra}' extra ({error}); add it with: {install_command(extra)}")


def require_extra(module: str, extra: str | None = None, what: str = "this command") -> ModuleType:
    """`module` imported, or a `UsageError` saying that `what` (a flag, a feature) needs `extra` (by default the extra
    of the module's top-level package in `EXTRA_OF_MODULE`) and how to add it. For example
    `require_extra("sklearn.linear_model", what="--baselines")`."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        usage = missing_extra(error, what, extra or EXTRA_OF_MODULE.get(module.partition(".")[0]))
        if usage is None:
            raise
        raise usage from error


def debugging() -> bool:
    """Whether SINUSOIDAL_ENCODER_DEBUG asks for the tracebacks of anticipated errors."""
    return os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")


def _fail(message: str, status: int) -> NoReturn:
    print(f"{os.path.basename(sys.argv[0])}: {message}", file=sys.stderr)
    raise SystemExit(status) from None


@contextlib.contextmanager
def front() -> Iterator[None]:
    """The command-line front around a command's work: an anticipated error (a `UsageError`, a module of an extra
    that is not installed, Ctrl-C or SIGTERM during training) ends the program with one line and its status; any
    other exception keeps its traceback."""
    try:
        yield
    except UsageError as error:
        if debugging():
            raise
        _fail(f"error: {error}", 2)
    except ModuleNotFoundError as error:  # a module of an extra, imported by the command as it runs
        usage = missing_extra(error)
        if usage is None or debugging():
            raise
        _fail(f"error: {usage}", 2)
    except KeyboardInterrupt as interruption:
        if debugging():
            raise
        _fail(f"{interruption or 'interrupted.'}", getattr(interruption, "status", 130))


@dataclasses.dataclass(frozen=True)
class Command:
    """A console script (`console.py`): calling it parses the flags (`argv`, `sys.argv[1:]` by default) into
    `config_class` (`--help`, and a bad value's one line, come before any library that does the work is imported),
    then imports `sinusoidal_encoder_training.MODULE` and calls its `run(config)`, behind the front. A stage without
    a configuration class parses its own flags: its `main(argv)` is called."""

    module: str
    config_class: type | None = None

    def __call__(self, argv: list[str] | None = None) -> None:
        from sinusoidal_encoder_training.arguments import parse_config

        with front():
            config = None if self.config_class is None else parse_config(self.config_class, argv)
            stage = importlib.import_module(f"sinusoidal_encoder_training.{self.module}")
            stage.main(argv) if config is None else stage.run(config)
