"""The Hub-ready folder a run ends in: weights of the plain model class, the published config, code, tokenizer,
sentence-transformers files, the model card and its pictures, then the optional upload."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from accelerate import Accelerator
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

import sinusoidal_encoder
from sinusoidal_encoder_training.cli.command_line import UsageError, debugging
from sinusoidal_encoder_training.configs import MODEL_INPUT_NAMES, DataConfig, TrainingConfig
from sinusoidal_encoder_training.publishing.hub import error_line, push_folder_to_hub
from sinusoidal_encoder_training.publishing.model_card import (
    draw_pictures,
    model_reference,
    pipeline_example,
    render_model_card,
)
from sinusoidal_encoder_training.runs.atomic import staged
from sinusoidal_encoder_training.runs.checkpoints import resolve_checkpoint
from sinusoidal_encoder_training.runs.metrics_log import write_json

BUILTIN_DATA_NOTE = (
    "The training text is English technical documentation (Python's documentation and docstrings); expect weaker "
    "results on other domains and languages."
)


def save_tokenizer(
    tokenizer, folder: str, model_type: str | None = sinusoidal_encoder.SinusoidalEncoderConfig.model_type
) -> None:
    """`save_pretrained`, then name the class `PreTrainedTokenizerFast`: transformers 5 writes its own class name
    (`TokenizersBackend`), which transformers 4.x does not know; the alias loads on both. A tokenizer without a
    length cap is written without `model_max_length` (rather than as the number 10**30), which loads as no cap.
    For this package's model (`model_type`), the tokenizer gives only `MODEL_INPUT_NAMES` when loaded: one made
    for BERT (`--tokenizer_name`) would give the folder's users `token_type_ids`, which the model refuses."""
    tokenizer.save_pretrained(folder)
    path = os.path.join(folder, "tokenizer_config.json")
    with open(path) as handle:
        config = json.load(handle)
    if model_type == sinusoidal_encoder.SinusoidalEncoderConfig.model_type:
        config["model_input_names"] = list(MODEL_INPUT_NAMES)
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    if config.get("model_max_length", 0) >= VERY_LARGE_INTEGER:
        del config["model_max_length"]
    write_json(path, config)


def write_sentence_transformers_files(folder: str, config) -> None:
    """The files with which `SentenceTransformer(folder)` loads an exported folder as transformer + mean pooling,
    in the long-standing format every sentence-transformers release reads. Sentences are truncated at the length
    the model was trained at (`config.max_position_embeddings`): the model runs longer, but embeddings past that
    length are unmeasured, and sentence-transformers users expect a cap."""
    hidden_size, max_seq_length = config.hidden_size, config.max_position_embeddings
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    pooling = {
        "word_embedding_dimension": hidden_size,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    }
    files = {
        "modules.json": modules,
        "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False},
        os.path.join("1_Pooling", "config.json"): pooling,
    }
    os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
    for name, content in files.items():
        write_json(os.path.join(folder, name), content)


def describe_data(config: DataConfig, validation_split: str | None) -> str:
    """The training data of a run as the model card states it: a Hub dataset by its id, local files or folders by
    their names (never a path of the machine that trained), and what it was validated on (`validation_split`, the
    split of the data: None for a share of the training split held out)."""

    def held_out(whole: str) -> str:  # the share of `whole` (the training data, in words) held out for validation
        if config.streaming:
            return f"the first {config.streaming_validation_examples:,} documents of {whole}, held out"
        return f"{config.validation_split_percentage}% of {whole}, held out with seed {config.seed}"

    if config.dataset_name:
        hub_id = hub_dataset_id(config)
        source = (
            f"[`{hub_id}`](https://huggingface.co/datasets/{hub_id})"
            if hub_id
            else f"a local dataset, `{data_label(config)}`"
        )
        if config.dataset_config_name:
            source += f" (configuration `{config.dataset_config_name}`)"
        if validation_split:
            return f"{source}; validated on its `{validation_split}` split"
        whole = "the training stream" if config.streaming else "the training split"
        return f"{source}; validated on {held_out(whole)}"
    files = f"local files: `{os.path.basename(config.train_file)}` (training"
    if config.validation_file:
        return files + f") and `{os.path.basename(config.validation_file)}` (validation)"
    return files + f"; validated on {held_out('it')})"


def data_label(config: DataConfig) -> str:
    """A short name of a run's data (its Hub id, or the name of its local file or folder), for the model-index."""
    if config.dataset_name:
        local = os.path.exists(config.dataset_name)
        return os.path.basename(os.path.normpath(config.dataset_name)) if local else config.dataset_name
    return os.path.basename(config.train_file)


def hub_dataset_id(config: DataConfig) -> str | None:
    """The Hub dataset a run trained on, for the card's `datasets:` (None for local data and the built-in corpus)."""
    if config.dataset_name and not os.path.exists(config.dataset_name):
        return config.dataset_name
    return None


def card_language(config: DataConfig) -> list[str] | None:
    """The card's `language:`: `--language`, else English for the built-in data (None when unknown)."""
    if config.language:
        return [code.strip() for code in config.language.split(",") if code.strip()]
    return None if config.dataset_name or config.train_file else ["en"]


def published_config(config):
    """The config an exported folder carries: the trained one, with `sparse_prediction` (an option that speeds up
    training) at its default, so that users of the folder get logits at every position."""
    published = copy.deepcopy(config)
    if hasattr(published, "sparse_prediction"):
        published.sparse_prediction = False
    return published


def export_model(
    accelerator: Accelerator,
    config: TrainingConfig,
    model,
    auto_class,
    tokenizer,
    *,
    pipeline_tag: str,
    example: str,
    **card: Any,
) -> None:
    """Write the Hub-ready folder: weights of a fresh model of the plain class (under FSDP2 the wrapped class is not
    the one users should load) with the gathered state dict, config with auto_map, code, tokenizer; on the main
    process then the optional steps, each of which may fail without losing the model: the pictures, the model card,
    the upload. A failed upload ends in a `UsageError` naming the saved folder and the command that retries it.

    `card` holds the run's own sections of `render_model_card` (training data and procedure, metrics, ...); every
    card also gets the pictures, the dataset and Hub ids of `config` (a stage's configuration: training and data
    settings), and a `pipeline_tag` example on `example`."""
    if card.get("dataset_name") is None and (config.dataset_name or config.train_file):
        card["dataset_name"] = data_label(config)  # the model-index's name of the evaluation data
    accelerator.wait_for_everyone()
    # torch.compile's wrapper off (its keys carry an `_orig_mod.` prefix), DDP's and FSDP's kept: on every process,
    # FSDP gathers the full state on the main one
    state_dict = accelerator.get_state_dict(getattr(model, "_orig_mod", model))
    failed_upload, failed_save, fresh = None, None, None
    if accelerator.is_main_process:
        fresh = auto_class.from_config(published_config(accelerator.unwrap_model(model).config))
        fresh.load_state_dict(state_dict)

        def write(folder: str) -> None:
            fresh.save_pretrained(folder)
            save_tokenizer(tokenizer, folder, fresh.config.model_type)
            write_sentence_transformers_files(folder, fresh.config)

        try:
            save_atomically(config.output_dir, write)
        except OSError as error:  # a full disk, a folder made read-only meanwhile
            failed_save = save_failure_line(config.output_dir, error)
    if accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        failed_save = broadcast_object_list([failed_save])[0]
    if failed_save is not None:
        raise UsageError(failed_save)
    if accelerator.is_main_process:
        accelerator.print(f"saved the model to {config.output_dir}")
        pictures = optional_step("draw the pictures", draw_pictures, config.output_dir, fresh.config)
        optional_step(
            "write the model card",
            render_model_card,
            fresh,
            config.output_dir,
            pictures=pictures or {},
            pipeline_tag=pipeline_tag,
            dataset_id=hub_dataset_id(config),
            language=card_language(config),
            data_note=None if config.dataset_name or config.train_file else BUILTIN_DATA_NOTE,
            model_id=config.hub_model_id,
            usage_example=pipeline_example(
                pipeline_tag, model_reference(config.output_dir, config.hub_model_id), example
            ),
            **card,
        )
        if config.push_to_hub:
            try:
                push_folder_to_hub(config.output_dir, config.hub_model_id, private=config.hub_private_repo)
                accelerator.print(f"uploaded {config.output_dir} to the Hub as {config.hub_model_id}")
            except Exception as error:
                failed_upload = error
    accelerator.wait_for_everyone()
    if failed_upload is not None:
        raise UsageError(
            f"the model is saved in {config.output_dir}, but the upload to {config.hub_model_id!r} failed "
            f"({error_line(failed_upload)}); "
            f"retry with: sinusoidal-encoder-publish {config.output_dir} --hub_model_id {config.hub_model_id}"
        ) from failed_upload


def save_atomically(output_dir: str, write) -> None:
    """`write(folder)` into a temporary folder inside `output_dir`, then each of its entries moved into place
    (`atomic.staged`): a save that fails (a full disk) leaves no half-written weights, and the folder as it was."""
    with staged(output_dir) as temporary:
        write(temporary)


def save_failure_line(output_dir: str, error: OSError) -> str:
    """What a user is told when the final save fails: nothing half-written, and how to save it again."""
    newest = resolve_checkpoint(output_dir, "latest")
    again = (
        f"the newest checkpoint is {newest}: free space (or fix the folder), then run the same command with "
        "--resume_from_checkpoint latest, which resumes there and saves the model (steps after that checkpoint are "
        "trained again)"
        if newest
        else "no checkpoint was saved (--checkpointing_steps), so the run must be trained again once it can be saved"
    )
    return f"saving the model to {output_dir} failed ({error_line(error)}); nothing was left half-written; {again}."


def optional_step(what: str, function, *args, **kwargs):
    """`function(*args, **kwargs)`, or None with a line saying what could not be done and why: a step after the model
    is saved (pictures, card) must not lose it. `SINUSOIDAL_ENCODER_DEBUG=1` lets the error through."""
    try:
        return function(*args, **kwargs)
    except Exception as error:
        if debugging():
            raise
        print(f"could not {what}: {error_line(error)} (the model is saved)")
        return None
