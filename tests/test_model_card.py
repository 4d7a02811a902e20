"""The model card describes the model its config makes: how positions enter it (the paper's encoding added to the
embeddings, rotary, ALiBi, or none), with that encoding's formula, tag and pictures, never the paper's encoding for
another (`model_card.POSITION_CARDS`, one entry per registered way)."""

from __future__ import annotations

import pytest
from conftest import tiny_config

import sinusoidal_encoder as se
from sinusoidal_encoder.positions import POSITION_ENCODINGS
from sinusoidal_encoder_training.model_card import POSITION_CARDS, render_model_card

PAPER = "the fixed sinusoidal position encoding of *Attention Is All You Need*"


def test_every_way_positions_enter_the_model_has_its_description():
    assert set(POSITION_CARDS) == set(POSITION_ENCODINGS) | {"none"}
    assert len({card["tag"] for card in POSITION_CARDS.values()}) == len(POSITION_CARDS)


@pytest.mark.parametrize(
    ("fields", "name", "formula"),
    [
        ({}, "sinusoidal", "PE(pos, 2i) = sin(pos / 10000^(2i/d))"),
        (
            {"position_encoding": "rotary", "position_encoding_base": 500.0},
            "rotary",
            "(2i, 2i+1) by pos / 500^(2i/8), in 8 of a head's 8 dimensions",
        ),
        ({"position_encoding": "alibi"}, "alibi", "− m_h·|i − j|"),
        ({"position_mode": "none"}, "none", "(no position encoding)"),
    ],
)
def test_the_card_describes_the_positions_of_its_config(tmp_path, fields, name, formula):
    model = se.SinusoidalEncoderForMaskedLM(tiny_config(**fields))
    text = render_model_card(
        model,
        str(tmp_path),
        pipeline_tag="fill-mask",
        training_data="Some text.",
        training_procedure="A few steps.",
        metrics={"loss": 1.0},
    )
    card = POSITION_CARDS[name]
    assert f"A Transformer encoder with {card['summary']}" in " ".join(text.split())
    assert formula in text and f"- {card['tag']}" in text and card["extrapolation"] in " ".join(text.split())
    others = [other["tag"] for key, other in POSITION_CARDS.items() if key != name]
    assert not any(f"- {tag}\n" in text for tag in others)
    assert (PAPER in " ".join(text.split())) == (name == "sinusoidal")


@pytest.mark.parametrize(("fields", "drawn"), [({}, True), ({"position_encoding": "rotary"}, False)])
def test_pictures_of_the_encoding_only_for_a_model_that_adds_it(tmp_path, fields, drawn):
    pytest.importorskip("matplotlib")
    from sinusoidal_encoder_training.model_card import draw_pictures

    written = draw_pictures(str(tmp_path), tiny_config(**fields))
    assert ("encoding_heatmap.png" in written) == drawn == (tmp_path / "encoding_heatmap.png").exists()
