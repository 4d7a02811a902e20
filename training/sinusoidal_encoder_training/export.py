"""The Hub-ready folder a run ends in: weights of the plain model class, the published config, code, tokenizer,
sentence-transformers files, the model card and its pictures, then the optional upload."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from accelerate import Accelerator
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from .arguments import TrainingConfig
from .data import DataConfig
from .hub import push_folder_to_hub
from .model_card import draw_pictures, model_reference, pipeline_example, render_model_card


def save_tokenizer(tokenizer, folder: str) -> None:
    """`save_pretrained`, then name the class `PreTrainedTokenizerFast`: transformers 5 writes its own class name
    (`TokenizersBackend`), which transformers 4.x does not know; the alias loads on both. A tokenizer without a
    length cap is written without `model_max_length` (rather than as the number 10**30), which loads as no cap."""
    tokenizer.save_pretrained(folder)
    path = os.path.join(folder, "tokenizer_config.json")
    with open(path) as handle:
        config = json.load(handle)
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    if config.get("model_max_length", 0) >= VERY_LARGE_INTEGER:
        del config["model_max_length"]
    with open(path, "w") as handle:
        json.dump(config, handle, indent=2)


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
        with open(os.path.join(folder, name), "w") as handle:
            json.dump(content, handle, indent=2)


def describe_data(config: DataConfig) -> str:
    """The training data of a run as the model card states it (Hub dataset or local files)."""
    source = f"`{config.dataset_name or config.train_file}`"
    return source + (f" (configuration `{config.dataset_config_name}`)" if config.dataset_config_name else "")


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
    process the model card and its pictures, then the optional upload.

    `card` holds the run's own sections of `render_model_card` (training data and procedure, metrics, ...); every
    card also gets the pictures, the dataset and Hub ids of `config` (a stage's configuration: training and data
    settings), and a `pipeline_tag` example on `example`."""
    accelerator.wait_for_everyone()
    # torch.compile's wrapper off (its keys carry an `_orig_mod.` prefix), DDP's and FSDP's kept: on every process,
    # FSDP gathers the full state on the main one
    state_dict = accelerator.get_state_dict(getattr(model, "_orig_mod", model))
    if accelerator.is_main_process:
        fresh = auto_class.from_config(published_config(accelerator.unwrap_model(model).config))
        fresh.load_state_dict(state_dict)
        fresh.save_pretrained(config.output_dir)
        save_tokenizer(tokenizer, config.output_dir)
        write_sentence_transformers_files(config.output_dir, fresh.config)
        render_model_card(
            fresh,
            config.output_dir,
            pictures=draw_pictures(config.output_dir, fresh.config),
            pipeline_tag=pipeline_tag,
            dataset_id=config.dataset_name,
            model_id=config.hub_model_id,
            usage_example=pipeline_example(
                pipeline_tag, model_reference(config.output_dir, config.hub_model_id), example
            ),
            **card,
        )
        accelerator.print(f"saved the model to {config.output_dir}")
        if config.push_to_hub:
            push_folder_to_hub(config.output_dir, config.hub_model_id, private=config.hub_private_repo)
            accelerator.print(f"uploaded {config.output_dir} to the Hub as {config.hub_model_id}")
    accelerator.wait_for_everyone()
