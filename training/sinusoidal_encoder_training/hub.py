"""Publish an exported model folder (from pretraining or fine-tuning) to the Hugging Face Hub.

    python training/publish.py outputs/small-builtin --hub_model_id user/sinusoidal-small [--private]

Uploads the folder (weights, config, code, tokenizer, README.md model card, pictures, metrics) with huggingface_hub,
never its resumable `checkpoints/`. A card written without a Hub id loads the local folder in its code; that reference
is replaced by the Hub id first (in the folder's README.md too), so the published card runs as written.
Log in first (`hf auth login`) or set HF_TOKEN.
"""

from __future__ import annotations

import argparse
import json
import os

from sinusoidal_encoder_training.command_line import UsageError, command

REQUIRED = ("config.json", "README.md")


def push_folder_to_hub(folder: str, repo_id: str, private: bool = False, api=None, commit_message: str | None = None):
    """Upload a finished model folder to the Hub with huggingface_hub, leaving out resumable checkpoints and logs of
    trackers. `api` is an `HfApi` (injectable for tests)."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    api.create_repo(repo_id=repo_id, private=private, exist_ok=True)
    return api.upload_folder(
        repo_id=repo_id,
        folder_path=folder,
        commit_message=commit_message or "Upload sinusoidal encoder",
        ignore_patterns=["checkpoints/*", "checkpoints/**", "runs/*", "runs/**", "*.pt", "*.pkl"],
    )


def check_folder(folder: str) -> None:
    """Refuse what is not an exported sinusoidal-encoder folder, naming what is missing."""
    if not os.path.isdir(folder):
        raise UsageError(f"{folder!r} is not a folder.")
    missing = [name for name in REQUIRED if not os.path.exists(os.path.join(folder, name))]
    if not any(name.endswith(".safetensors") for name in os.listdir(folder)):
        missing.append("model.safetensors")
    if missing:
        raise UsageError(f"{folder!r} is not an exported model folder: it has no {', '.join(missing)}.")
    with open(os.path.join(folder, "config.json")) as handle:
        model_type = json.load(handle).get("model_type")
    if model_type != "sinusoidal_encoder":
        raise UsageError(f"{folder!r} holds a {model_type!r} model, not a sinusoidal_encoder one.")


def main(argv: list[str] | None = None, api=None) -> str:
    """The command line: `sinusoidal-encoder-publish`, `python -m sinusoidal_encoder_training.hub`, or
    `training/publish.py` in a checkout. `api` is an `HfApi` (injectable for tests)."""
    from .model_card import use_hub_id

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="The exported folder (the --output_dir of pretrain.py or finetune.py).")
    parser.add_argument("--hub_model_id", required=True, help="The Hub repository, e.g. 'user/my-encoder'.")
    parser.add_argument("--private", action="store_true", help="Create the repository as private.")
    parser.add_argument("--commit_message", default=None, help="The commit message of the upload.")
    args = parser.parse_args(argv)
    check_folder(args.folder)
    card = os.path.join(args.folder, "README.md")
    with open(card) as handle:
        text = handle.read()
    published = use_hub_id(text, args.hub_model_id)
    if published != text:  # the card's code loaded the local folder: it now loads the Hub repository
        with open(card, "w") as handle:
            handle.write(published)
    result = push_folder_to_hub(
        args.folder, args.hub_model_id, private=args.private, api=api, commit_message=args.commit_message
    )
    print(f"uploaded {args.folder} to https://huggingface.co/{args.hub_model_id}")
    return result


cli = command(main)  # the console script: main behind the command-line front (`command_line.py`)

if __name__ == "__main__":
    cli()
