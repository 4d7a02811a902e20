"""Publish an exported model folder to the Hugging Face Hub: the command `sinusoidal-encoder-publish` (its flags and
what it does: `configs.publishing.PublishConfig`), and the checks and the upload it is made of."""

from __future__ import annotations

import json
import os

from sinusoidal_encoder_training.cli.arguments import parse_config
from sinusoidal_encoder_training.cli.command_line import UsageError, front, weights_misfit
from sinusoidal_encoder_training.configs.publishing import PublishConfig

REQUIRED = ("config.json", "README.md")
CARD = "README.md"
# resumable checkpoints, trackers' logs, pickles and version-control or cache folders stay local
IGNORED = ("checkpoints/*", "runs/*", "*.pt", "*.pkl", ".git/*", ".cache/*", "*/.ipynb_checkpoints/*")
# where the errors of talking to the Hub come from: huggingface_hub and the HTTP clients it has used
HUB_ERROR_MODULES = ("huggingface_hub", "httpx", "httpx2", "httpcore", "requests", "urllib3")
RETRY = "log in with `hf auth login` (or set HF_TOKEN) and check the network"
AGAIN = "export the model again"


def files_to_upload(folder: str) -> list[str]:
    """The folder's files that an upload sends, as sorted paths relative to the folder."""
    from huggingface_hub.utils import filter_repo_objects

    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            found.append(os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/"))
    return sorted(filter_repo_objects(found, ignore_patterns=list(IGNORED)))


def published_card(folder: str, repo_id: str) -> str:
    """The folder's model card as uploaded: its local folder reference (written when the model had no Hub id)
    replaced by `repo_id`."""
    from sinusoidal_encoder_training.publishing.model_card import use_hub_id

    with open(os.path.join(folder, CARD)) as handle:
        return use_hub_id(handle.read(), repo_id)


def check_hub_access(repo_id: str, api=None, flag: str | None = None) -> str:
    """Before any work: the Hub is reachable, a token is there, and it may write to `repo_id`'s namespace. Returns
    the token's user name; raises `UsageError` naming what to do otherwise (after `flag`, the flag that asked for
    the upload, when there is one). `api` is an `HfApi` (injectable)."""
    try:
        return _check_hub_access(repo_id, api)
    except UsageError as error:
        if flag is None:
            raise
        raise UsageError(f"{flag}: {error}") from error.__cause__


def _check_hub_access(repo_id: str, api=None) -> str:
    from huggingface_hub import HfApi, constants

    if constants.is_offline_mode():
        raise UsageError(f"uploading to {repo_id!r} needs the Hub, but HF_HUB_OFFLINE is set: unset it.")
    api = api if api is not None else HfApi()
    try:
        user = api.whoami()
    except Exception as error:  # no token, a revoked token or no network: each says what it is
        if not _hub_error(error):
            raise
        raise UsageError(f"cannot upload to {repo_id!r}: {error_line(error)} ({RETRY}).") from error
    name = user.get("name", "")
    allowed = {name, *(org.get("name") for org in user.get("orgs", []))}
    namespace = repo_id.split("/")[0] if "/" in repo_id else name
    if namespace not in allowed:
        raise UsageError(
            f"--hub_model_id {repo_id!r}: the token of {name!r} cannot write to {namespace!r} (its user and "
            f"organisations: {', '.join(sorted(a for a in allowed if a))}); use one of them."
        )
    role = user.get("auth", {}).get("accessToken", {}).get("role")
    if role == "read":
        raise UsageError(f"cannot upload to {repo_id!r}: the token of {name!r} is read-only; use a write token.")
    return name


def _hub_error(error: Exception) -> bool:
    """Whether `error` comes from talking to the Hub (no token, HTTP, network), not from a bug."""
    return isinstance(error, OSError) or type(error).__module__.split(".")[0] in HUB_ERROR_MODULES


def error_line(error: Exception) -> str:
    """The error's type and the first line of its message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def push_folder_to_hub(folder: str, repo_id: str, private: bool = False, api=None, commit_message: str | None = None):
    """Upload a finished model folder to the Hub in one commit (`files_to_upload`, with `published_card` as its
    README.md), leaving the folder as it is. `api` is an `HfApi` (injectable for tests)."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = api if api is not None else HfApi()
    operations = [
        CommitOperationAdd(
            path_in_repo=name,
            path_or_fileobj=published_card(folder, repo_id).encode() if name == CARD else os.path.join(folder, name),
        )
        for name in files_to_upload(folder)
    ]
    api.create_repo(repo_id=repo_id, private=private, exist_ok=True)
    return api.create_commit(
        repo_id=repo_id, operations=operations, commit_message=commit_message or "Upload sinusoidal encoder"
    )


def describe_upload(folder: str, repo_id: str) -> str:
    """What an upload of `folder` to `repo_id` sends: each file and its size, the total, then the card as published."""
    names = files_to_upload(folder)
    sizes = {name: os.path.getsize(os.path.join(folder, name)) for name in names}
    card = published_card(folder, repo_id)
    sizes[CARD] = len(card.encode())
    lines = [f"would upload {len(names)} files ({_size(sum(sizes.values()))}) to https://huggingface.co/{repo_id}:"]
    lines += [f"  {_size(sizes[name]):>10}  {name}" for name in names]
    lines += ["", f"{CARD} as it would be published:", "", card]
    return "\n".join(lines)


def _size(count: int) -> str:
    for unit in ("B", "KB", "MB"):
        if count < 1000 or unit == "MB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def check_folder(folder: str) -> None:
    """Refuse what is not an exported sinusoidal-encoder folder, naming what is missing."""
    if not os.path.isdir(folder):
        raise UsageError(f"{folder!r} is not a folder.")
    missing = [name for name in REQUIRED if not os.path.exists(os.path.join(folder, name))]
    if not any(name.endswith(".safetensors") for name in os.listdir(folder)):
        missing.append("model.safetensors")
    if missing:
        raise UsageError(f"{folder!r} is not an exported model folder: it has no {', '.join(missing)}.")
    check_finished(folder)
    with open(os.path.join(folder, "config.json")) as handle:
        model_type = json.load(handle).get("model_type")
    if model_type != "sinusoidal_encoder":
        raise UsageError(f"{folder!r} holds a {model_type!r} model, not a sinusoidal_encoder one.")


def check_finished(folder: str) -> None:
    """Refuse a folder that a run is writing now (its run lock is held: the line names the process) or that holds
    half-written files (`atomic.temporaries` among what the upload would send: a run killed while saving, or one
    saving now)."""
    from sinusoidal_encoder_training.runs.atomic import is_temporary
    from sinusoidal_encoder_training.runs.run_folder import lock_holder

    holder = lock_holder(folder)
    if holder is not None:
        raise UsageError(f"{folder!r} is being written by a run ({holder}): publish it once that run has ended.")
    partial = [name for name in files_to_upload(folder) if any(map(is_temporary, name.split("/")))]
    if partial:
        more = f" and {len(partial) - 1} more" if len(partial) > 1 else ""
        raise UsageError(
            f"{folder!r} holds half-written files ({partial[0]}{more}) left by a run that was killed while saving: "
            "run that command again on the folder (it removes them and saves again), or delete them."
        )


def check_weights(folder: str) -> None:
    """Refuse weights that would not load, in one line: every safetensors file of the upload must be readable (not
    empty, not truncated: the line names the file), and the model's weights (model.safetensors, or its shards) the
    ones the model of config.json has, in its shapes (the line names the folder and how many do not fit,
    `command_line.weights_misfit`, the check of every command that loads a folder). Reads the files' headers and
    builds the model on the meta device: no weights are read."""
    from safetensors import SafetensorError, safe_open

    for name in (name for name in files_to_upload(folder) if name.endswith(".safetensors")):
        path = os.path.join(folder, name)
        if os.path.getsize(path) == 0:
            raise UsageError(f"{path!r} is empty (0 bytes), not a safetensors file of weights: {AGAIN}.")
        try:
            with safe_open(path, framework="pt"):
                pass
        except (SafetensorError, OSError) as error:
            raise UsageError(
                f"{path!r} cannot be read as safetensors, truncated or damaged ({error_line(error)}): {AGAIN}."
            ) from error
    _meta_model(folder)  # config.json names a class of sinusoidal_encoder
    misfit = weights_misfit(folder)
    if misfit is not None:
        raise UsageError(f"{folder!r}: {misfit}")


def _meta_model(folder: str):
    """The model of the folder's config.json (its `architectures`), built on the meta device: its tensors' names and
    shapes, without memory or initialisation."""
    import torch

    import sinusoidal_encoder
    from sinusoidal_encoder import SinusoidalEncoderConfig

    path = os.path.join(folder, "config.json")
    try:
        config = SinusoidalEncoderConfig.from_pretrained(folder)
    except (ValueError, TypeError, OSError) as error:
        raise UsageError(f"{path!r} is not a usable sinusoidal_encoder config ({error_line(error)}).") from error
    names = config.architectures or []
    model_class = getattr(sinusoidal_encoder, names[0], None) if len(names) == 1 else None
    if not isinstance(model_class, type) or not issubclass(
        model_class, sinusoidal_encoder.SinusoidalEncoderPreTrainedModel
    ):
        raise UsageError(f"{path!r} names no model class of sinusoidal_encoder in `architectures` (it has {names}).")
    with torch.device("meta"):
        return model_class(config)


def run(config: PublishConfig, api=None) -> str | None:
    """Publish `config.folder` as `config.hub_model_id` (whose form its configuration checked), after checking the
    folder and its weights. `api` is an `HfApi` (injectable for tests). Returns the commit's URL (None for a dry
    run)."""
    check_folder(config.folder)
    check_weights(config.folder)
    if config.dry_run:
        print(describe_upload(config.folder, config.hub_model_id))
        return None
    check_hub_access(config.hub_model_id, api)
    try:
        result = push_folder_to_hub(
            config.folder,
            config.hub_model_id,
            private=config.private,
            api=api,
            commit_message=config.commit_message,
        )
    except Exception as error:
        if not _hub_error(error):
            raise
        raise UsageError(f"the upload to {config.hub_model_id!r} failed: {error_line(error)} ({RETRY}).") from error
    print(f"uploaded {config.folder} to https://huggingface.co/{config.hub_model_id}")
    return str(result)


def main(argv: list[str] | None = None, api=None) -> str | None:
    """The command line (`sinusoidal-encoder-publish`, `python -m sinusoidal_encoder_training.publishing.hub`, or
    `training/publish.py` in a checkout): `run` on the configuration of `argv`."""
    return run(parse_config(PublishConfig, argv), api)


if __name__ == "__main__":
    with front():
        main()
