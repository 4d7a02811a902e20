"""Render `model_card.md` (a Jinja template at the top of the repository) into an exported folder's README.md with
huggingface_hub's `ModelCard`, with YAML metadata the Hub reads (licence, library, pipeline tag, datasets,
model-index with the evaluation results)."""

from __future__ import annotations

import math
import os
import re
from typing import Any

import transformers
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.resources import resource_path
from sinusoidal_encoder_training.tasks.registry import TASKS

TEMPLATE = resource_path("model_card.md")


def model_reference(output_dir: str, hub_model_id: str | None) -> str:
    """What the card's code loads and its model-index names: the Hub id when there is one, else the folder's name
    (never a path of the machine that wrote it; the card then says that the name is a local folder,
    `local_folder_note`). `sinusoidal-encoder-publish` swaps in the Hub id when it uploads (`use_hub_id`)."""
    return hub_model_id or os.path.basename(os.path.normpath(os.path.abspath(output_dir)))


def local_folder_note(name: str) -> str:
    """The card's note, after its code, when that code loads the local folder `name` rather than a Hub id."""
    return (
        f"`{name}` in this code is the local folder the model was exported to: run the code from the folder that "
        f"holds it, or write its path. `sinusoidal-encoder-publish` puts the Hub id in its place when it uploads "
        "the model."
    )


# what a task without a pipeline in transformers 5 runs on, and how its outputs read: (inputs, prediction), written
# after the loading of `model` and `tokenizer` (`pipeline_example`)
PREDICTIONS = {
    "question-answering": (
        'question, context = "What does the function return?", "The function returns the positions it found."\n'
        'inputs = tokenizer(question, context, return_tensors="pt")\n',
        "in_context = torch.tensor([part == 1 for part in inputs.sequence_ids(0)])  # the answer lies in the context\n"
        "start = outputs.start_logits[0].masked_fill(~in_context, -1e9).softmax(-1)\n"
        "end = outputs.end_logits[0].masked_fill(~in_context, -1e9).softmax(-1)\n"
        "spans = (start[:, None] * end[None, :]).triu()  # (first, last) token, first <= last\n"
        "first, last = divmod(int(spans.argmax()), spans.shape[1])\n"
        'answer = tokenizer.decode(inputs["input_ids"][0, first : last + 1])\n'
        'print({"answer": answer, "score": float(spans.max())})\n',
    ),
    "multiple-choice": (
        'prompt, choices = "The function returns", ["the positions it found.", "a cat on a mat."]\n'
        'inputs = tokenizer([prompt] * len(choices), choices, padding=True, return_tensors="pt")\n'
        "inputs = {name: tensor[None] for name, tensor in inputs.items()}  # (1, choices, length)\n",
        "probabilities = outputs.logits[0].softmax(-1)  # one per choice\n"
        'print({"choice": choices[int(probabilities.argmax())], "score": float(probabilities.max())})\n',
    ),
}


def pipeline_example(pipeline_tag: str, reference: str, text: str | None) -> str:
    """The card's example of use, with its heading, that runs with the package installed or without it
    (`trust_remote_code=True`): a pipeline on `text`; for a task without a pipeline in transformers 5 (`text` None),
    the model run on an example and its outputs read (`PREDICTIONS`: question answering, multiple choice); none for
    an Auto class of the model package's own (span classification), whose loading the card's blocks show."""
    if text is None:
        auto_class = TASKS[pipeline_tag].auto_class
        if not hasattr(transformers, auto_class):  # the card's loading blocks show the class from the folder's code
            return ""
        inputs, prediction = PREDICTIONS[pipeline_tag]
        return (
            f"A prediction, with or without the package (transformers 5 has no {pipeline_tag} pipeline):\n\n"
            f"```python\nimport torch\nfrom transformers import {auto_class}, AutoTokenizer\n\n"
            f'tokenizer = AutoTokenizer.from_pretrained("{reference}", trust_remote_code=True)\n'
            f'model = {auto_class}.from_pretrained("{reference}", trust_remote_code=True)\n'
            f"{inputs}with torch.no_grad():\n    outputs = model(**inputs)\n{prediction}```"
        )
    name = {"fill-mask": "fill", "token-classification": "tag"}.get(pipeline_tag, "classify")
    return (
        "Or in a pipeline, with or without the package:\n\n"
        "```python\nfrom transformers import pipeline\n\n"
        f'{name} = pipeline("{pipeline_tag}", model="{reference}", trust_remote_code=True)\n'
        f'print({name}("{text}"))\n```'
    )


def use_hub_id(card_text: str, hub_model_id: str) -> str:
    """The card with what it names the model by (its local folder, written when the model had no Hub id, or an
    earlier Hub id) replaced by `hub_model_id`: its code then loads the Hub repository, and its title and
    model-index name it. A card without a model name is returned as it is."""
    card = ModelCard(card_text)
    local = card.data.model_name
    if not local or local == hub_model_id:
        return card_text
    card.data.model_name = hub_model_id  # the model-index
    text = card.text.replace(f"\n\n{local_folder_note(local)}", "").replace(local_folder_note(local), "")
    for before in ('from_pretrained("{}"', 'model="{}"', "\n# {}\n"):
        text = text.replace(before.format(local), before.format(hub_model_id))
    if os.path.isabs(local):  # a card written before cards named the folder: its title is the folder's name
        text = text.replace(f"\n# {os.path.basename(local)}\n", f"\n# {hub_model_id}\n", 1)
    card.text = text
    return str(card)


def render_model_card(
    model,
    output_dir: str,
    *,
    pipeline_tag: str,
    training_data: str,
    training_procedure: str,
    metrics: dict[str, float],
    dataset_id: str | None = None,
    dataset_name: str | None = None,
    dataset_split: str | None = "validation",
    model_id: str | None = None,
    base_model: str | None = None,
    intended_uses: str | None = None,
    usage_example: str = "",
    extra_tags: tuple[str, ...] = (),
    pictures: dict[str, str] | None = None,
    evaluation_note: str | None = None,
    extra_sections: dict[str, str] | None = None,
    baselines: dict[str, float] | None = None,
    language: list[str] | None = None,
    data_note: str | None = None,
) -> str:
    """Write `output_dir/README.md` and return its text. `metrics` maps metric names (e.g. "loss", "perplexity") to
    values measured on the evaluation split (`dataset_split` of the data; None: a share held out of its training
    split, which the model-index names no split for); they go to the card's text and, when
    finite, to its model-index (a NaN is no result to index). `pictures` maps PNG
    files of the folder to their titles; the card shows them. `evaluation_note` (markdown) follows the metrics: what
    they mean and what they show. `extra_sections` maps titles to markdown: sections of your own (another
    measurement, a comparison), after the evaluation. `baselines` maps names to scores of reference methods on the
    same split: the card lists them after the metrics, and keeps them out of the model-index (they are not this
    model's results). `language` is the card's `language:` (ISO codes of the training data; None leaves it out).
    `data_note` says what the training data covers, in the limits (by default: the data named under Training
    data)."""
    config = model.config
    position = describe_positions(config)
    task = TASKS[pipeline_tag]
    auto_class, task_summary, task_name = task.auto_class, task.card_summary, task.card_title
    local = model_id is None  # the code loads the folder by its name: say so
    model_id = model_reference(output_dir, model_id)
    if local:
        usage_example = f"{usage_example}\n\n{local_folder_note(model_id)}".lstrip("\n")
    evaluated_on = dataset_name or dataset_id or "built-in Python documentation corpus"
    eval_results = [
        EvalResult(
            task_type=pipeline_tag,
            task_name=task_name,
            dataset_type=dataset_id or re.sub(r"[^a-z0-9]+", "-", evaluated_on.lower()).strip("-"),
            dataset_name=evaluated_on,
            dataset_split=dataset_split,
            metric_type=name,
            metric_name=name,
            metric_value=round(float(value), 4),
        )
        for name, value in metrics.items()
        if math.isfinite(value)  # an undefined score (NaN: a correlation of constant values) is no result to index
    ]
    card_data = ModelCardData(
        language=language or None,
        license="apache-2.0",
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        tags=["sinusoidal-encoder", *position.tags, "encoder", *extra_tags],
        datasets=[dataset_id] if dataset_id else None,
        base_model=base_model,
        model_name=model_id,
        eval_results=eval_results or None,
    )
    evaluation = "\n".join(f"- {name}: {value:.4f}" for name, value in metrics.items()) or "Not evaluated."
    if baselines:
        evaluation += "\n\nBaselines on the same split (reference methods, not this model):\n\n" + "\n".join(
            f"- {name}: {value:.4f}" for name, value in baselines.items()
        )
    if evaluation_note:
        evaluation += "\n\n" + evaluation_note
    num_parameters = model.num_parameters()
    values: dict[str, Any] = {
        "model_id": model_id,
        "model_name": model_id,
        "task_summary": task_summary,
        "auto_class": auto_class,
        "own_auto_class": not hasattr(transformers, auto_class),  # the model package's own: not in transformers
        "position_summary": position.summary,
        "position_formula": position.formula,
        "position_note": position.note,
        "position_length_note": position.length,
        "position_extrapolation": position.extrapolation,
        "num_layers": config.num_hidden_layers,
        "norm_style": "pre-LN, with a final LayerNorm" if config.norm_first else "post-LN, as in the paper",
        "num_parameters": f"{num_parameters / 1e6:.1f}M",
        "hidden_size": config.hidden_size,
        "num_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": config.hidden_act,
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.max_position_embeddings,
        "long_input_window": getattr(config, "long_input_attention_window", None),
        "randomized_positions": getattr(config, "position_mode", "consecutive") == "ordered_subset",
        "stratified_positions": getattr(config, "position_mode", "consecutive") == "stratified",
        "position_range": getattr(config, "position_range", None),
        "evenly_spaced": getattr(config, "position_inference", "draw") == "evenly_spaced",
        "intended_uses": intended_uses
        or "A masked-language model: fill in masked tokens, or fine-tune it for classification, tagging or "
        "extractive question answering, or use its hidden states as features.",
        "size_note": f"This is a small model ({num_parameters / 1e6:.1f}M parameters) trained on little data: "
        "a starting point for experiments and fine-tuning, not a general-purpose language model.",
        "usage_example": usage_example,
        "data_note": data_note
        or "It learned from the data named under Training data; expect weaker results on other domains and languages.",
        "training_data": training_data,
        "training_procedure": training_procedure,
        "evaluation": evaluation,
        "pictures": pictures or {},
        "extra_sections": extra_sections or {},
    }
    card = ModelCard.from_template(card_data, template_path=TEMPLATE, **values)
    card.save(os.path.join(output_dir, "README.md"))
    return str(card)


def describe_positions(config):
    """How the card describes the positions of `config`: the `PositionCard` of its scheme in the model's position
    registry (`sinusoidal_encoder.positions.position_card`), the formula filled in with the config's values. Imported
    when a card is written: publishing reads this module without loading the model."""
    from sinusoidal_encoder.positions import position_card

    return position_card(config)


def draw_pictures(output_dir: str, config) -> dict[str, str]:
    """The PNGs of `sinusoidal_encoder_training.publishing.plots` for an exported folder, or none (with a note) without
    matplotlib. The pictures of the encoding PE are drawn where the card of the model's positions says they apply
    (`PositionCard.pictures`)."""
    try:
        from sinusoidal_encoder_training.publishing.plots import write_plots
        from sinusoidal_encoder_training.tasks.registry import loss_unit

        return write_plots(
            output_dir,
            config.hidden_size,
            config.position_encoding_base,
            loss_unit(config.to_dict()),
            encoding=describe_positions(config).pictures,
        )
    except UsageError as error:  # matplotlib missing: `require_extra` names the extra
        print(f"no pictures in {output_dir}: {error}")
        return {}
