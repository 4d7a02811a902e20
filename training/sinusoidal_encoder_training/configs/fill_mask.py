"""The configuration of `sinusoidal-encoder-fill-mask` (`FillMaskConfig`)."""

from __future__ import annotations

import dataclasses

from sinusoidal_encoder_training.cli.arguments import CommandEntry, FlagConfig, check_model_source, check_positive


@dataclasses.dataclass(frozen=True, kw_only=True)
class FillMaskConfig(FlagConfig):
    """Load a pretrained folder with AutoModelForMaskedLM and print fill-mask predictions.

        python training/fill_mask.py outputs/small-builtin
        python training/fill_mask.py outputs/small-builtin "Return a [MASK] of the items." --top_k 3

    The folder must hold a trained masked-LM head: that of a pretraining run. Any other (a fine-tuned classifier, a
    bare encoder) is refused in one line before any work, as is a folder whose masked-LM head transformers would
    initialise at random: its predictions would be noise. Each text holds the tokenizer's mask token once.
    """

    model: str = dataclasses.field(
        metadata={
            "help": "A model folder or Hub id with a masked-LM head and a tokenizer.",
            "positional": True,
            "reads": True,
        }
    )
    texts: list[str] = dataclasses.field(
        default_factory=list,
        metadata={
            "help": "Texts with the tokenizer's mask token (default: a few examples).",
            "positional": True,
            "nargs": "*",
        },
    )
    top_k: int = dataclasses.field(default=5, metadata={"help": "Predictions to show per text."})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "top_k")
        check_model_source("MODEL", self.model)


COMMAND = CommandEntry("fill-mask", "stages.fill_mask", FillMaskConfig, "show a masked-LM model's predictions")
