"""Where the training library finds the two non-code files it reads: the shipped tokenizer (`tokenizer_config/`) and
the model card template (`model_card.md`). A wheel or a non-editable install carries copies under
`sinusoidal_encoder_training/resources/` (put there by setup.py); a checkout, editable install included, reads them
where they live, at the top of the repository."""

from __future__ import annotations

from pathlib import Path

PACKAGED = Path(__file__).resolve().parent / "resources"
CHECKOUT = Path(__file__).resolve().parents[2]  # training/sinusoidal_encoder_training/ -> the repository


def resource_path(name: str) -> str:
    """The path of `name` (`"tokenizer_config"` or `"model_card.md"`) in the installed package or the checkout."""
    for root in (PACKAGED, CHECKOUT):
        if (root / name).exists():
            return str(root / name)
    raise FileNotFoundError(f"{name} is neither in {PACKAGED} (an installed wheel) nor in {CHECKOUT} (a checkout)")


# The folder of the shipped tokenizer, installed or in a checkout: `AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)`
# (public as `sinusoidal_encoder_training.SHIPPED_TOKENIZER`).
SHIPPED_TOKENIZER = resource_path("tokenizer_config")
