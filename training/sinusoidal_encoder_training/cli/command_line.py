"""The front of every command line. An anticipated error, a `UsageError` (a bad flag value, a file or folder that is
not there, data or a model that cannot be used), ends the command with one line that names the problem, in
argparse's form (`pretrain.py: error: ...`), and exit status 2: no traceback. Any other exception keeps its
traceback. `SINUSOIDAL_ENCODER_DEBUG=1` in the environment shows the traceback of anticipated errors too. Ctrl-C
ends with one line as well (status 130): during training, where the newest checkpoint is and the command that
resumes (`Interrupted`, raised by the training loop); SIGTERM during training the same, with status 143
(`Terminated`). A module of an extra that is not installed (`datasets`
without the `training` extra) is an anticipated error too: one line naming the extra and the pip command that adds
it (`require_extra`, `missing_extra`; the console scripts catch it when the stage's module is imported,
`console.Command`)."""

from __future__ import annotations

import contextlib
import errno
import importlib
import importlib.metadata
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Iterator
from types import ModuleType
from typing import NoReturn
from urllib.parse import unquote, urlparse

DEBUG_VARIABLE = "SINUSOIDAL_ENCODER_DEBUG"
DISTRIBUTION = "sinusoidal-encoder"

# The extra of pyproject.toml's [project.optional-dependencies] that installs each top-level module a command may
# import beyond the base install (torch, transformers, safetensors and what they bring: huggingface_hub, tokenizers,
# tqdm, jinja2, numpy). `integrations` holds `onnx`'s modules too; `all` holds every extra.
# tests/repository/test_packaging.py checks this against pyproject.toml.
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
    that code calling the library directly catches it as before. `shared`: raised alike by every process of a
    machine under `accelerate launch` (a finding each makes the same, or one process's passed to the others): the
    command line shows it once, from the machine's first process (`first_process_of_machine`)."""

    def __init__(self, message: str, *, shared: bool = False):
        super().__init__(message)
        self.shared = shared


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


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """transformers' load report and progress bars off while a model loads: the command says itself what loaded
    (and judges it: `output_loading_info`)."""
    from transformers.utils import logging as transformers_logging

    verbosity, bar = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bar:
            transformers_logging.enable_progress_bar()


def initialised_weights(info: dict) -> list[str]:
    """The weights transformers initialised at random when it loaded a model (missing from the folder, or of another
    shape), from its loading info (`from_pretrained(..., output_loading_info=True)`), sorted."""
    mismatched = [key if isinstance(key, str) else key[0] for key in info.get("mismatched_keys", ())]
    return sorted({*info.get("missing_keys", ()), *mismatched})


def check_local_files(
    flag: str, path: str | os.PathLike | None, what: str = "model", replaced_head: bool = False
) -> None:
    """Before any work: a `UsageError` naming `flag` when the local folder `path` has damaged or missing files
    (`local_damage`), or, for a model, weights that are not those of the model its config.json describes
    (`weights_misfit`; with `replaced_head`, those of the task head the user asked to replace are not judged).
    Hub ids are not looked at here."""
    if path is None or not os.path.exists(os.fspath(path)):
        return
    damage = local_damage(os.fspath(path), what)
    if damage is None and what == "model" and os.path.isdir(os.fspath(path)):
        damage = weights_misfit(os.fspath(path), replaced_head)
    if damage is not None:
        raise UsageError(f"{flag} {os.fspath(path)!r}: {damage}")


def check_tokenizer_fits(tokenizer: str, tokenizer_size: int, model: str, vocab_size: int, instead: str) -> None:
    """Before any work: a `UsageError` when the tokenizer (`tokenizer`: its flag and source, as the line names it)
    has more tokens than the model (`model`, the same) has token embeddings: an id past `vocab_size` has no
    embedding, an IndexError in the first step (or a wrong embedding where the device does not check). `instead`
    says what to give instead."""
    if tokenizer_size > vocab_size:
        raise UsageError(
            f"{tokenizer} has {tokenizer_size:,} tokens, more than the {vocab_size:,} token embeddings of {model} "
            f"(its vocab_size): {instead}"
        )


def check_tokenizer_token(
    tokenizer, token: str, label: str, needed: str, instead: str = "pass --tokenizer_name a tokenizer that has one"
) -> None:
    """Before any work: a `UsageError` when the tokenizer (`label`: its flag and source, as the line names it) has
    no `token` (`"mask_token"`, `"pad_token"`), which the run needs (`needed`: what for); `instead` says what to
    give instead."""
    if getattr(tokenizer, token, None) is None:
        raise UsageError(
            f"{label} has no {token.removesuffix('_token')} token (tokenizer.{token} is None): {needed}; {instead} "
            "(the shipped tokenizer_config/, or one trained with train_tokenizer.py)."
        )


def weight_files(folder: str) -> list[str]:
    """The safetensors files transformers loads a model folder's weights from: the shards that
    model.safetensors.index.json names, else model.safetensors; none when the folder has neither."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as handle:
            shards = sorted(set(json.load(handle).get("weight_map", {}).values()))
        return [os.path.join(folder, name) for name in shards]
    single = os.path.join(folder, "model.safetensors")
    return [single] if os.path.isfile(single) else []


def saved_shapes(files: list[str]) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor of the safetensors `files`, from their headers (no tensor data is read)."""
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        with safe_open(file, framework="pt") as handle:
            shapes.update({key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()})
    return shapes


def weights_misfit(folder: str, replaced_head: bool = False) -> str | None:
    """What is wrong with the weights of the sinusoidal-encoder folder `folder`, or None: how many of the tensors
    of its safetensors files are missing, unexpected or of another shape for the model class its config.json names
    (`architectures`; the bare encoder when it names none), with one or two names of each. Tied weights (the
    masked-LM decoder, tied to the embeddings) and buffers are never missing; the keys the class ignores on loading
    are never unexpected. With `replaced_head`, only the encoder's weights are judged. Reads the headers and builds
    the model on the meta device: no weights are read. None for a folder of another model type, or whose class or
    files transformers would not load from (their own errors say why)."""
    model = _meta_model_of(folder)
    files = weight_files(folder)
    if model is None or not files:
        return None
    try:
        found = saved_shapes(files)
    except Exception:  # safetensors' own error type: `local_damage` names the damaged file
        return None
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    found = _with_prefix_of(model, found, expected)
    if replaced_head:
        encoder = f"{model.base_model_prefix}."
        if any(key.startswith(encoder) for key in expected):
            found = {key: shape for key, shape in found.items() if key.startswith(encoder)}
            expected = {key: shape for key, shape in expected.items() if key.startswith(encoder)}
    exempt = {name for name, _ in model.named_buffers()}
    ignored = [re.compile(p) for p in getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ()]
    missing = sorted(set(expected) - set(found) - exempt - _tied(model, found))
    unexpected = sorted(k for k in set(found) - set(expected) - exempt if not any(p.search(k) for p in ignored))
    reshaped = sorted(k for k in set(found) & set(expected) if found[k] != expected[k])
    count = len(missing) + len(unexpected) + len(reshaped)
    if not count:
        return None
    parts = [f"{len(missing)} missing ({_names(missing)})"] if missing else []
    parts += [f"{len(unexpected)} unexpected ({_names(unexpected)})"] if unexpected else []
    if reshaped:
        first = reshaped[0]
        parts.append(
            f"{len(reshaped)} of another shape ({first!r} is {list(found[first])}, config.json makes it "
            f"{list(expected[first])}{', ...' if len(reshaped) > 1 else ''})"
        )
    return (
        f"{count} of its weights do not fit the {type(model).__name__} of its config.json: {'; '.join(parts)}. "
        "The weights are not this model's: save or download the folder again, or fix config.json."
    )


def _names(keys: list[str]) -> str:
    return ", ".join(map(repr, keys[:2])) + (", ..." if len(keys) > 2 else "")


def _meta_model_of(folder: str):
    """The model class that config.json's `architectures` names (the bare encoder when it names none), built from
    the folder's config on the meta device; None when the folder is not a sinusoidal encoder's, or names a class
    of another package."""
    config = os.path.join(folder, "config.json")
    if not os.path.isfile(config):
        return None
    try:
        with open(config, encoding="utf-8") as handle:
            fields = json.load(handle)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(fields, dict) or fields.get("model_type") != "sinusoidal_encoder":
        return None
    import torch

    import sinusoidal_encoder

    names = fields.get("architectures") or ["SinusoidalEncoderModel"]
    model_class = getattr(sinusoidal_encoder, names[0], None)
    if not isinstance(model_class, type) or not issubclass(
        model_class, sinusoidal_encoder.SinusoidalEncoderPreTrainedModel
    ):
        return None
    try:
        model_config = sinusoidal_encoder.SinusoidalEncoderConfig.from_pretrained(folder)
        with torch.device("meta"):
            return model_class(model_config)
    except Exception:  # a config the model refuses: loading it says why
        return None


def _with_prefix_of(model, found: dict, expected: dict) -> dict:
    """The saved names as the model's: transformers adds or strips the encoder's prefix (`model.`) when a folder
    saved from the bare encoder is loaded into a task model, or the other way round."""
    prefix = f"{model.base_model_prefix}."
    ours, theirs = any(k.startswith(prefix) for k in expected), any(k.startswith(prefix) for k in found)
    if ours and not theirs:
        return {prefix + key: shape for key, shape in found.items()}
    if theirs and not ours:
        return {key.removeprefix(prefix): shape for key, shape in found.items() if key.startswith(prefix)}
    return found


def _tied(model, found: dict) -> set[str]:
    """The names of the model's weights tied to a saved one (one tensor under several names, saved under one)."""
    aliases: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        aliases.setdefault(id(tensor), []).append(name)
    tied = {name for names in aliases.values() if any(n in found for n in names) for name in names}
    declared = getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or {}
    if isinstance(declared, dict) and getattr(model.config, "tie_word_embeddings", True):
        tied |= {target for target, source in declared.items() if source in found}
    return tied


def local_damage(path: str, what: str) -> str | None:
    """What is wrong with the local model or tokenizer folder `path`, as far as its files show, or None. A config.json
    that is there is read for a tokenizer too (transformers reads it to find the tokenizer's class)."""
    folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
    config = os.path.join(folder, "config.json")
    sentence_transformers = os.path.isfile(os.path.join(folder, "modules.json"))  # its modules in folders of their own
    if what != "tokenizer" and os.path.isdir(path) and not os.path.isfile(config) and not sentence_transformers:
        return (
            "the folder has no config.json: it is not a model folder; name a folder that save_pretrained wrote "
            "(a run's --output_dir), or a Hub id."
        )
    if os.path.isfile(config):
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


def first_process_of_machine() -> bool:
    """Whether this process is the first of its machine under `accelerate launch` (or torchrun), or runs alone: the
    one that shows the errors every process of the machine raises alike (`UsageError.shared`, bad flags)."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


SHARED_ERROR_WAIT_S = 10.0  # the most another process waits for the launcher to end it (`leave_it_to_the_first`)


def leave_it_to_the_first() -> NoReturn:
    """End a process other than the first of its machine on an error that every process meets alike, without a
    line: the first process shows it. It first waits (`SHARED_ERROR_WAIT_S` at most) for the launcher to end it once
    the first process has failed: one that left at once had torchrun end the first process before it wrote its line
    when the two raced, and the user saw torchrun's report alone."""
    try:
        time.sleep(SHARED_ERROR_WAIT_S)
    except KeyboardInterrupt:  # the launcher's SIGTERM, where a handler makes it one
        pass
    raise SystemExit(2)


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
        if error.shared and not first_process_of_machine():
            leave_it_to_the_first()
        _fail(f"error: {error}", 2)
    except ModuleNotFoundError as error:  # a module of an extra, imported by the command as it runs
        usage = missing_extra(error)
        if usage is None or debugging():
            raise
        _fail(f"error: {usage}", 2)
    except KeyboardInterrupt as interruption:
        if debugging():
            raise
        _fail(str(interruption) or INTERRUPTED, getattr(interruption, "status", 130))
    except MemoryError:
        if debugging():
            raise
        _fail(f"error: {OUT_OF_MEMORY}", 2)
    except RuntimeError as error:  # the system's out-of-memory killer ended a data worker: torch says so
        if "DataLoader worker" not in str(error) or "killed by signal" not in str(error) or debugging():
            raise
        _fail(f"error: {WORKER_KILLED.format(str(error).splitlines()[0].rstrip('. '))}", 2)
    except OSError as error:  # the machine's faults: a full or read-only disk, a folder of another user's
        line = environment_fault(error)
        if line is None or debugging():
            raise
        _fail(f"error: {line}", 2)


INTERRUPTED = (
    "interrupted (Ctrl-C or a signal) before the work was done; nothing half-written is kept, and the same command "
    "run again starts over."
)
OUT_OF_MEMORY = (
    "this machine ran out of memory (MemoryError); nothing half-written is kept: use smaller batches or fewer data "
    "workers, or a machine with more memory, and run the command again."
)
WORKER_KILLED = (
    "{} (the system ends a process this way when memory runs out while batches are built): pass a smaller "
    "--dataloader_num_workers or --per_device_train_batch_size, and run the command again."
)
# what the system says when a file cannot be written for the machine's reasons, not the program's
ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
CACHE_VARIABLES = "HF_HOME, HF_DATASETS_CACHE"


def environment_fault(error: OSError) -> str | None:
    """The one line for an error of the machine rather than the program (`ENVIRONMENT_ERRNOS`: a full disk or quota,
    a read-only file system, no permission), naming the file and what to do; None for any other `OSError`. A file
    under Hugging Face's caches names the variables that move them."""
    text = str(error)
    if error.errno not in ENVIRONMENT_ERRNOS and "No space left on device" not in text:
        return None
    where = error.filename or "a file"
    reason = error.strerror or text
    if error.errno in (errno.EACCES, errno.EPERM):  # reading or writing: this user may not
        return (
            f"cannot access {where} ({reason}): give this user access to it, or choose another path, then run the "
            "command again."
        )
    cache = "/huggingface/" in f"{where}/" or any(
        os.environ.get(name) and str(where).startswith(os.environ[name]) for name in CACHE_VARIABLES.split(", ")
    )
    remedy = (
        f"point {CACHE_VARIABLES} at a folder with room that you can write to"
        if cache
        else "free space on that disk, or choose a folder you can write to"
    )
    return f"cannot write {where} ({reason}): {remedy}, then run the command again."
