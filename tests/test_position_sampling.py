"""`position_sampling="ordered_subset"`: the randomized encoding of Ruoss et al. (2023), in training and inference."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_rows_match_alone, padded_batch, random_ids, tiny_config
from transformers import AutoModel

SPAN = 200


def subset_model(**overrides):
    values = dict(position_sampling="ordered_subset", position_sampling_range=SPAN)
    values.update(overrides)
    return AutoModel.from_config(tiny_config(**values))


@pytest.mark.parametrize("training", [False, True])
def test_positions_are_an_ordered_subset_of_the_range(training):
    model = subset_model().train(training)
    ids, mask = padded_batch()
    positions = model._ordered_subset_positions(4, 12, mask, ids.device)  # (B, T)
    for row, real in zip(positions, mask.bool(), strict=True):
        drawn = row[real]
        assert drawn.min() >= 0 and drawn.max() < SPAN
        assert (drawn.diff() > 0).all()  # distinct and increasing
        assert (row[~real] == 0).all()


def test_training_draws_cover_the_range_with_varying_gaps():
    model = subset_model().train()
    torch.manual_seed(0)
    positions = torch.cat([model._ordered_subset_positions(64, 8, None, torch.device("cpu")) for _ in range(20)])
    assert positions.min() == 0 and positions.max() == SPAN - 1  # every part of the range is visited
    gaps = positions.diff(dim=-1)
    assert gaps.min() >= 1 and gaps.max() > 50 and len(gaps.unique()) > 50  # not a shifted block of consecutive ones
    # each of the 8 positions of a row is a uniform 8-subset's order statistic: mean (k+1)·(L+1)/9 - 1
    expected = torch.arange(1, 9) * (SPAN + 1) / 9 - 1
    torch.testing.assert_close(positions.float().mean(0), expected, atol=4.0, rtol=0)


@pytest.mark.parametrize("sampling", ["ordered_subset", "stratified"])
def test_training_uses_the_global_rng_and_matches_explicit_positions(sampling):
    """Seeded like dropout (so accelerate's checkpoints restore it), and the same as passing the drawn positions."""
    model = subset_model(position_sampling=sampling).train()
    ids, mask = padded_batch()
    torch.manual_seed(3)
    first = model(ids, attention_mask=mask).last_hidden_state
    torch.manual_seed(3)
    again = model(ids, attention_mask=mask).last_hidden_state
    torch.manual_seed(3)
    drawn, _ = model.build_position_ids(None, 4, 12, mask, ids.device)  # (B, T)
    explicit = model(ids, attention_mask=mask, position_ids=drawn).last_hidden_state
    real = mask.bool()
    assert torch.equal(first[real], again[real])
    assert torch.equal(first[real], explicit[real])
    other = model(ids, attention_mask=mask).last_hidden_state  # a new draw
    assert not torch.allclose(other[real], first[real])


def test_evaluation_draw_is_fixed_per_length_and_batch_independent():
    model = subset_model().eval()
    ids, mask = padded_batch()
    batched = assert_rows_match_alone(model, ids, mask)
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state, batched)  # the same at every call
        positions = model._ordered_subset_positions(4, 12, mask, ids.device)
        assert torch.equal(positions[1], positions[3])  # same length, same positions
        assert not torch.equal(positions[0, :7], positions[1, :7])  # another length, another draw
        reseeded = subset_model(position_sampling_seed=1).eval()
        assert not torch.equal(reseeded._ordered_subset_positions(4, 12, mask, ids.device), positions)


def test_evenly_spaced_inference_positions():
    """`position_sampling_inference="evenly_spaced"`: ⌊k·L/n⌋ for the k-th of n real tokens, in evaluation only."""
    model = subset_model(position_sampling_inference="evenly_spaced").eval()
    ids, mask = padded_batch()
    positions = model._ordered_subset_positions(4, 12, mask, ids.device)  # (B, T)
    for row, real in zip(positions, mask.bool(), strict=True):
        n = int(real.sum())
        assert row[real].tolist() == [k * SPAN // n for k in range(n)]
        assert (row[~real] == 0).all()
    full = model._ordered_subset_positions(1, SPAN, None, ids.device)  # n = L: every position once
    assert torch.equal(full[0], torch.arange(SPAN))
    assert_rows_match_alone(model, ids, mask)
    with torch.no_grad():
        drawn = subset_model().eval()
        drawn.load_state_dict(model.state_dict())
        assert not torch.allclose(drawn(ids)[0], model(ids)[0])  # not the paper's draw
    model.train()  # training draws, whatever the inference setting
    drawn.train()
    torch.manual_seed(0)
    trained = model._ordered_subset_positions(4, 12, mask, ids.device)
    torch.manual_seed(0)
    assert torch.equal(trained, drawn._ordered_subset_positions(4, 12, mask, ids.device))


def test_explicit_position_ids_override_the_sampling():
    model = subset_model().eval()
    plain = AutoModel.from_config(tiny_config()).eval()
    plain.load_state_dict(model.state_dict())
    ids = random_ids(2, 9)
    with torch.no_grad():
        positions = torch.arange(9).unsqueeze(0)
        assert torch.equal(model(ids, position_ids=positions)[0], plain(ids)[0])
        assert not torch.allclose(model(ids)[0], plain(ids)[0])


def test_input_longer_than_the_range_is_refused():
    model = subset_model(position_sampling_range=10).eval()
    with pytest.raises(ValueError, match="position_sampling_range"):
        model(random_ids(1, 11))


def test_saved_and_loaded_with_the_config(tmp_path):
    model = subset_model(position_sampling_seed=5, position_sampling_inference="evenly_spaced").eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert (loaded.config.position_sampling, loaded.config.position_sampling_range) == ("ordered_subset", SPAN)
    assert loaded.config.position_sampling_seed == 5
    assert loaded.config.position_sampling_inference == "evenly_spaced"
    ids, mask = padded_batch()
    with torch.no_grad():
        assert torch.equal(loaded(ids, attention_mask=mask)[0], model(ids, attention_mask=mask)[0])


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"position_sampling": "random"}, "position_sampling"),
        ({"position_sampling_range": 0}, "position_sampling_range"),
        ({"position_sampling_range": 2.5}, "position_sampling_range"),
        ({"position_sampling_seed": -1}, "position_sampling_seed"),
        ({"position_sampling_inference": "grid"}, "position_sampling_inference"),
        ({"position_sampling": "ordered_subset", "random_position_offset": 8}, "random_position_offset"),
    ],
)
def test_bad_sampling_settings_are_refused(overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(**overrides)


@pytest.mark.parametrize(
    ("sampling", "inference"),
    [
        ("consecutive", "draw"),
        ("ordered_subset", "draw"),
        ("ordered_subset", "evenly_spaced"),
        ("stratified", "draw"),
        ("stratified", "evenly_spaced"),
    ],
)
def test_model_card_says_which_positions_the_model_uses(tmp_path, sampling, inference):
    from sinusoidal_encoder_training.model_card import render_model_card

    config = tiny_config(
        position_sampling=sampling, position_sampling_range=SPAN, position_sampling_inference=inference
    )
    model = AutoModel.from_config(config)
    card = render_model_card(
        model,
        str(tmp_path),
        pipeline_tag="feature-extraction",
        training_data="x",
        training_procedure="y",
        metrics={},
    )
    assert "benchmarks/algorithmic" in card
    assert ("randomized encoding of Ruoss et al." in card) == (sampling != "consecutive")
    assert ('`position_sampling="ordered_subset"`' in card) == (sampling == "ordered_subset")
    assert ("stratified positions" in card) == (sampling == "stratified")
    assert ("Leave `position_ids` to the model" in card) == (sampling != "consecutive")
    if sampling != "consecutive":
        assert f"0…{SPAN - 1}" in card and f"at most {SPAN} tokens" in card
        assert "  , so" not in card and "\n, so" not in card  # the sentence goes on after either sampling
    assert (f"⌊k·{SPAN}/n⌋" in card) == (sampling == "ordered_subset" and inference == "evenly_spaced")
    assert ("the middle of that cell" in card) == (sampling == "stratified" and inference == "evenly_spaced")
