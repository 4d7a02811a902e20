"""Load a pretrained folder with AutoModelForMaskedLM and print fill-mask predictions (the command line
`sinusoidal-encoder-fill-mask`, or `training/fill_mask.py` in a checkout).

python training/fill_mask.py outputs/small-builtin
python training/fill_mask.py outputs/small-builtin "Return a [MASK] of the items." --top_k 3

The folder must hold a trained masked-LM head: that of a pretraining run. Any other (a fine-tuned classifier, a
bare encoder) is refused in one line before any work, as is a folder whose masked-LM head transformers would
initialise at random: its predictions would be noise.
"""

from __future__ import annotations

import argparse

from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

import sinusoidal_encoder  # noqa: F401  (registers the model with the Auto classes)
from sinusoidal_encoder_training.arguments import check_model_source
from sinusoidal_encoder_training.command_line import UsageError, command, loading
from sinusoidal_encoder_training.onnx_export import (
    folder_architecture,
    head_problem,
    load_trained,
    task_of_architecture,
)

EXAMPLES = (
    "Return a new [MASK] containing the items of the sequence.",
    "Raise a [MASK] if the file does not exist.",
    "This function is deprecated and will be [MASK] in a future version.",
    "The default value of the argument is [MASK].",
)


def instead(architecture: str | None) -> str:
    """What to use instead of fill-mask predictions from a folder without a trained masked-LM head."""
    own = task_of_architecture(architecture)
    if own in ("text-classification", "token-classification"):
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="A model folder or Hub id with a masked-LM head and a tokenizer.")
    parser.add_argument("texts", nargs="*", help="Texts with the tokenizer's mask token (default: a few examples).")
    parser.add_argument("--top_k", type=int, default=5, help="Predictions to show per text.")
    args = parser.parse_args(argv)
    check_model_source("MODEL", args.model)
    architecture = folder_architecture(args.model)  # config.json alone: before any weight is loaded
    problem = head_problem(args.model, architecture, "fill-mask", instead(architecture))
    if problem is not None:
        raise UsageError(problem)
    with loading("MODEL", args.model, "tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(args.model)
    for text in args.texts:
        problem = mask_problem(text, tokenizer.mask_token)
        if problem is not None:
            raise UsageError(problem)
    with loading("MODEL", args.model):
        model = load_trained(AutoModelForMaskedLM, args.model, instead(architecture))
    print(f"loaded {type(model).__name__} ({model.num_parameters():,} parameters) from {args.model}")
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer)
    for text in args.texts or [t.replace("[MASK]", tokenizer.mask_token) for t in EXAMPLES]:
        predictions = fill(text, top_k=args.top_k)
        shown = ", ".join(f"{p['token_str'].strip()!r} {p['score']:.2f}" for p in predictions)
        print(f"{text}\n    -> {shown}")


cli = command(main)  # the console script: main behind the command-line front (`command_line.py`)

if __name__ == "__main__":
    cli()
