"""The configuration of `sinusoidal-encoder-publish` (`PublishConfig`), and the check of a Hub model id that every
command taking one makes (`check_hub_model_id`)."""

from __future__ import annotations

import dataclasses
import re

from sinusoidal_encoder_training.cli.arguments import CommandEntry, FlagConfig
from sinusoidal_encoder_training.cli.command_line import UsageError

# a model repository on the Hub: a namespace (a user or an organisation) and a name, of ASCII letters, digits, '-',
# '_' and '.' (with huggingface_hub's `validate_repo_id` for the rest of its rules)
HUB_MODEL_ID = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
HUB_MODEL_ID_FORM = (
    "'namespace/name', your user or organisation and the model's name, e.g. 'you/my-encoder' (ASCII letters, "
    "digits, '-', '_' and '.'; no '--' or '..'; no part starting or ending with '-' or '.'; at most 96 characters)"
)


def check_hub_model_id(repo_id: str, flag: str = "--hub_model_id") -> str:
    """`repo_id`, if it has the form of a Hub model repository ('namespace/name'); else a `UsageError` naming it
    (after `flag`) and the form expected. What every command that takes a Hub id checks before any work."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
        valid = HUB_MODEL_ID.fullmatch(repo_id) is not None
    except HFValidationError:
        valid = False
    if not valid:
        raise UsageError(f"{flag} {repo_id!r} is not a Hub model id: expected {HUB_MODEL_ID_FORM}.")
    return repo_id


@dataclasses.dataclass(frozen=True, kw_only=True)
class PublishConfig(FlagConfig):
    """Publish an exported model folder (from pretraining or fine-tuning) to the Hugging Face Hub.

        python training/publish.py outputs/small-builtin --hub_model_id user/sinusoidal-small [--private]
        python training/publish.py outputs/small-builtin --hub_model_id user/sinusoidal-small --dry_run

    Uploads the folder (weights, config, code, tokenizer, README.md model card, pictures, metrics, an ONNX export) in
    one commit with huggingface_hub, never its resumable `checkpoints/` or tracker logs. A card written without a Hub
    id loads the local folder by its name in its code; the uploaded card names the Hub id instead, so that it runs as
    written. The folder itself is never changed. Before anything else the Hub id's form is checked ('namespace/name'),
    then the weights: every safetensors file must be readable, and its tensors those of the model of config.json, in
    their shapes. `--dry_run` checks the same, lists every file and its size and prints the card as it would be
    published, without contacting the Hub. Log in first (`hf auth login`) or set HF_TOKEN: the token is checked
    before anything is uploaded.
    """

    folder: str = dataclasses.field(
        metadata={
            "help": "The exported folder (the --output_dir of pretrain.py or finetune.py).",
            "positional": True,
            "reads": True,
        }
    )
    hub_model_id: str = dataclasses.field(metadata={"help": "The Hub repository, e.g. 'user/my-encoder'."})
    private: bool = dataclasses.field(default=False, metadata={"help": "Create the repository as private."})
    commit_message: str | None = dataclasses.field(
        default=None, metadata={"help": "The commit message of the upload."}
    )
    dry_run: bool = dataclasses.field(
        default=False, metadata={"help": "List the files and show the card as published; upload nothing."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_hub_model_id(self.hub_model_id)


COMMAND = CommandEntry("publish", "publishing.hub", PublishConfig, "upload a model folder to the Hugging Face Hub")
