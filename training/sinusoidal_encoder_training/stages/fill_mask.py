"""Fill-mask predictions from a pretrained folder, loaded with AutoModelForMaskedLM, for the texts a `FillMaskConfig`
(`configs`) names; the command line is `run` (`main`).
"""

from __future__ import annotations

from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

import sinusoidal_encoder  # registers the model with the Auto classes
from sinusoidal_encoder_training.cli.arguments import parse_config
from sinusoidal_encoder_training.cli.command_line import (
    UsageError,
    check_local_files,
    check_tokenizer_token,
    front,
    loading,
)
from sinusoidal_encoder_training.configs import MODEL_INPUT_NAMES, FillMaskConfig
from sinusoidal_encoder_training.publishing.onnx_export import folder_architecture, head_problem, load_trained
from sinusoidal_encoder_training.tasks.registry import EXPORTED, task_of_architecture

EXAMPLES = (
    "Return a new [MASK] containing the items of the sequence.",
    "Raise a [MASK] if the file does not exist.",
    "This function is deprecated and will be [MASK] in a future version.",
    "The default value of the argument is [MASK].",
)


def instead(architecture: str | None) -> str:
    """What to use instead of fill-mask predictions from a folder without a trained masked-LM head."""
    own = task_of_architecture(architecture)
    if own in EXPORTED and own not in ("fill-mask", "feature-extraction"):
        return (
            f"give fill_mask the pretraining folder it was fine-tuned from; this model's own head runs in "
            f"pipeline('{own}') or exports with export_onnx --task {own}."
        )
    return (
        "give fill_mask the folder of a pretraining run; this folder's encoder runs in pipeline('feature-extraction') "
        "or exports with export_onnx --task feature-extraction."
    )


def mask_problem(text: str, mask_token: str) -> str | None:
    """Why fill_mask cannot answer `text`, or None: it needs exactly one mask token (written as the tokenizer
    writes it)."""
    count = text.count(mask_token)
    if count == 1:
        return None
    if count == 0:
        other = " (the mask token is case-sensitive)" if mask_token.lower() in text.lower() else ""
        return f"{text!r} has no {mask_token}{other}: put {mask_token} where the word to predict goes."
    return f"{text!r} has {count} {mask_token} tokens: give one per text (pass several texts for several masks)."


def run(config: FillMaskConfig) -> None:
    """The command: the predictions for each text (`sinusoidal-encoder-fill-mask`, `training/fill_mask.py` in a
    checkout, once `console.py` has parsed the flags)."""
    architecture = folder_architecture(config.model)  # config.json alone: before any weight is loaded
    problem = head_problem(config.model, architecture, "fill-mask", instead(architecture))
    if problem is not None:
        raise UsageError(problem)
    check_local_files("MODEL", config.model)  # the weights are the config's, before any is read
    with loading("MODEL", config.model, "tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(config.model)
    check_tokenizer_token(
        tokenizer,
        "mask_token",
        f"the tokenizer of MODEL {config.model!r}",
        "fill-mask predicts the token at it",
        "save the tokenizer the model was trained with into the folder",
    )
    for text in config.texts:
        problem = mask_problem(text, tokenizer.mask_token)
        if problem is not None:
            raise UsageError(problem)
    if config.top_k > len(tokenizer):
        raise UsageError(f"--top_k {config.top_k} is more than the {len(tokenizer):,} tokens of the vocabulary.")
    with loading("MODEL", config.model):
        model = load_trained(AutoModelForMaskedLM, config.model, instead(architecture))
    print(f"loaded {type(model).__name__} ({model.num_parameters():,} parameters) from {config.model}")
    if model.config.model_type == sinusoidal_encoder.SinusoidalEncoderConfig.model_type:
        tokenizer.model_input_names = list(
            MODEL_INPUT_NAMES
        )  # a folder saved with a BERT tokenizer: no token_type_ids
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer)
    for text in config.texts or [t.replace("[MASK]", tokenizer.mask_token) for t in EXAMPLES]:
        predictions = fill(text, top_k=config.top_k)
        shown = ", ".join(f"{p['token_str'].strip()!r} {p['score']:.2f}" for p in predictions)
        print(f"{text}\n    -> {shown}")


def main(argv: list[str] | None = None) -> None:
    """`python -m sinusoidal_encoder_training.stages.fill_mask`: the command of `argv` (`sys.argv[1:]` by default)."""
    run(parse_config(FillMaskConfig, argv))


if __name__ == "__main__":
    with front():
        main()
