"""The model card describes the model its config makes: how positions enter it, in the words, formula, tags and
pictures that the position registry carries for that scheme (`position_modes.PositionCard`: every encoding of
`POSITION_ENCODINGS`, and each mode of `POSITION_MODES` that describes itself, as `"none"`), never another scheme's."""

from __future__ import annotations

import pytest
from conftest import tiny_config

import sinusoidal_encoder as se
from sinusoidal_encoder.position_modes import POSITION_MODES
from sinusoidal_encoder.positions import POSITION_ENCODINGS, position_card
from sinusoidal_encoder_training.publishing.model_card import render_model_card

# (name, the config fields that choose it, its card) for every registered scheme
SCHEMES = [(name, {"position_encoding": name}, encoding.card) for name, encoding in POSITION_ENCODINGS.items()]
SCHEMES += [(name, {"position_mode": name}, mode.card) for name, mode in POSITION_MODES.items() if mode.card]


def render(tmp_path, config) -> str:
    """The card of a masked-LM model of `config`, its whitespace folded (the template wraps lines)."""
    text = render_model_card(
        se.SinusoidalEncoderForMaskedLM(config),
        str(tmp_path),
        pipeline_tag="fill-mask",
        training_data="Some text.",
        training_procedure="A few steps.",
        metrics={"loss": 1.0},
    )
    return " ".join(text.split())


def test_every_scheme_has_its_own_tags():
    assert {"sinusoidal", "rotary", "alibi", "none"} <= {name for name, _, _ in SCHEMES}
    tags = [tag for _, _, card in SCHEMES for tag in card.tags]
    assert all(card.tags for _, _, card in SCHEMES) and len(set(tags)) == len(tags)


@pytest.mark.parametrize(("name", "fields", "card"), SCHEMES, ids=[name for name, _, _ in SCHEMES])
def test_the_card_of_every_registered_scheme_describes_that_scheme(tmp_path, name, fields, card):
    config = tiny_config(**fields)
    described = position_card(config)
    assert described.summary == card.summary and "{" not in described.formula  # its own card, filled in
    text = render(tmp_path, config)
    assert f"A Transformer encoder with {card.summary}" in text
    assert " ".join(described.formula.split()) in text
    for part in (card.note, card.length, card.extrapolation):
        assert " ".join(part.split()) in text
    assert all(f"- {tag} " in text for tag in card.tags)  # in the metadata's list of tags
    for other, _, other_card in SCHEMES:
        if other != name:
            assert other_card.summary not in text, other
            assert not any(f"- {tag} " in text for tag in other_card.tags), other


@pytest.mark.parametrize(
    ("fields", "formula"),
    [
        ({}, "PE(pos, 2i) = sin(pos / 10000^(2i/d))"),
        (
            {"position_encoding": "rotary", "position_encoding_base": 500.0, "partial_rotary_factor": 0.5},
            "(2i, 2i+1) by pos / 500^(2i/4), in 4 of a head's 8 dimensions",
        ),
        ({"position_encoding": "tupe"}, "(PE_i U_Q)(PE_j U_K)ᵀ/√(2·8)"),
        ({"position_encoding": "scaled_sinusoidal", "position_encoding_base": 500.0}, "LayerNorm(E[x]·√d + α·PE)"),
    ],
)
def test_the_formula_carries_the_configs_values(tmp_path, fields, formula):
    assert formula in render(tmp_path, tiny_config(**fields))


@pytest.mark.parametrize("mode", ["consecutive", "ordered_subset"])
@pytest.mark.parametrize("encoding", list(POSITION_ENCODINGS))
def test_a_mode_without_its_own_card_is_described_by_its_encoding(mode, encoding):
    assert POSITION_MODES[mode].card is None
    config = tiny_config(position_mode=mode, position_encoding=encoding)
    assert position_card(config).summary == POSITION_ENCODINGS[encoding].card.summary


@pytest.mark.parametrize(("name", "fields", "card"), SCHEMES, ids=[name for name, _, _ in SCHEMES])
def test_pictures_of_the_encoding_where_its_card_says_they_apply(tmp_path, name, fields, card):
    pytest.importorskip("matplotlib")
    from sinusoidal_encoder_training.publishing.model_card import draw_pictures

    written = draw_pictures(str(tmp_path), tiny_config(**fields))
    assert ("encoding_heatmap.png" in written) == card.pictures == (tmp_path / "encoding_heatmap.png").exists()
    adds_encoding = name in POSITION_ENCODINGS and POSITION_ENCODINGS[name].embeddings
    assert card.pictures == adds_encoding  # the pictures of PE where PE is added to the hidden states


def test_drawing_the_pictures_leaves_the_callers_backend_and_figures_alone(tmp_path):
    """`export` draws the card's pictures inside the user's process (a notebook, say): its pyplot backend and open
    figures are as they were after (pyplot's `matplotlib.use("Agg")` switched them before)."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from sinusoidal_encoder_training.publishing.model_card import draw_pictures

    before = plt.get_backend()
    plt.switch_backend("svg")  # the user's backend: any other than Agg
    figure = plt.figure()
    try:
        (tmp_path / "metrics.jsonl").write_text('{"step": 1, "train_loss": 3.0}\n')
        written = draw_pictures(str(tmp_path), tiny_config())
        assert set(written) == {"encoding_heatmap.png", "encoding_dot_products.png", "loss_curves.png"}
        assert (plt.get_backend(), plt.get_fignums()) == ("svg", [figure.number])
    finally:
        plt.close(figure)
        plt.switch_backend(before)
