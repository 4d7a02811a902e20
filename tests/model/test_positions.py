"""The position modes of `position_modes.py`: the ordered subset (the randomized encoding of Ruoss et al., 2023) and
the stratified draw in training and inference (with `position_inference="evenly_spaced"`: the middles of the cells),
the training offset, no positions, and the checks of each mode's parameters."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_rows_match_alone, padded_batch, random_ids, tiny_config
from transformers import AutoModel

import sinusoidal_encoder as se
from sinusoidal_encoder.position_modes import select_positions

SPAN = 200


def draw(model, batch_size: int, seq_len: int, attention_mask=None) -> torch.Tensor:
    """The positions `(B, T)` the model's position mode gives a batch passed without `position_ids`."""
    cpu = torch.device("cpu")
    return select_positions(model.config, None, batch_size, seq_len, attention_mask, cpu, model.training).ids


def subset_model(**overrides):
    values = dict(position_mode="ordered_subset", position_range=SPAN)
    values.update(overrides)
    return AutoModel.from_config(tiny_config(**values))


@pytest.mark.parametrize("training", [False, True])
def test_positions_are_an_ordered_subset_of_the_range(training):
    model = subset_model().train(training)
    _, mask = padded_batch()
    positions = draw(model, 4, 12, mask)  # (B, T)
    for row, real in zip(positions, mask.bool(), strict=True):
        drawn = row[real]
        assert drawn.min() >= 0 and drawn.max() < SPAN
        assert (drawn.diff() > 0).all()  # distinct and increasing
        assert (row[~real] == 0).all()


def test_training_draws_cover_the_range_with_varying_gaps():
    model = subset_model().train()
    torch.manual_seed(0)
    positions = torch.cat([draw(model, 64, 8) for _ in range(20)])
    assert positions.min() == 0 and positions.max() == SPAN - 1  # every part of the range is visited
    gaps = positions.diff(dim=-1)
    assert gaps.min() >= 1 and gaps.max() > 50 and len(gaps.unique()) > 50  # not a shifted block of consecutive ones
    # each of the 8 positions of a row is a uniform 8-subset's order statistic: mean (k+1)·(L+1)/9 - 1
    expected = torch.arange(1, 9) * (SPAN + 1) / 9 - 1
    torch.testing.assert_close(positions.float().mean(0), expected, atol=4.0, rtol=0)


@pytest.mark.parametrize("sampling", ["ordered_subset", "stratified"])
def test_training_uses_the_global_rng_and_matches_explicit_positions(sampling):
    """Seeded like dropout (so accelerate's checkpoints restore it), and the same as passing the drawn positions."""
    model = subset_model(position_mode=sampling).train()
    ids, mask = padded_batch()
    torch.manual_seed(3)
    first = model(ids, attention_mask=mask).last_hidden_state
    torch.manual_seed(3)
    again = model(ids, attention_mask=mask).last_hidden_state
    torch.manual_seed(3)
    drawn = draw(model, 4, 12, mask)  # (B, T)
    explicit = model(ids, attention_mask=mask, position_ids=drawn).last_hidden_state
    real = mask.bool()
    assert torch.equal(first[real], again[real])
    assert torch.equal(first[real], explicit[real])
    other = model(ids, attention_mask=mask).last_hidden_state  # a new draw
    assert not torch.allclose(other[real], first[real])


def test_evenly_spaced_inference_positions():
    """`position_inference="evenly_spaced"`: ⌊k·L/n⌋ for the k-th of n real tokens, in evaluation only."""
    model = subset_model(position_inference="evenly_spaced").eval()
    ids, mask = padded_batch()
    positions = draw(model, 4, 12, mask)  # (B, T)
    for row, real in zip(positions, mask.bool(), strict=True):
        n = int(real.sum())
        assert row[real].tolist() == [k * SPAN // n for k in range(n)]
        assert (row[~real] == 0).all()
    full = draw(model, 1, SPAN, None)  # n = L: every position once
    assert torch.equal(full[0], torch.arange(SPAN))
    assert_rows_match_alone(model, ids, mask)
    with torch.no_grad():
        drawn = subset_model().eval()
        drawn.load_state_dict(model.state_dict())
        assert not torch.allclose(drawn(ids)[0], model(ids)[0])  # not the paper's draw
    model.train()  # training draws, whatever the inference setting
    drawn.train()
    torch.manual_seed(0)
    trained = draw(model, 4, 12, mask)
    torch.manual_seed(0)
    assert torch.equal(trained, draw(drawn, 4, 12, mask))


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
    model = subset_model(position_range=10).eval()
    with pytest.raises(ValueError, match="position_range"):
        model(random_ids(1, 11))


def test_saved_and_loaded_with_the_config(tmp_path):
    model = subset_model(position_seed=5, position_inference="evenly_spaced").eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert (loaded.config.position_mode, loaded.config.position_range) == ("ordered_subset", SPAN)
    assert loaded.config.position_seed == 5
    assert loaded.config.position_inference == "evenly_spaced"
    ids, mask = padded_batch()
    with torch.no_grad():
        assert torch.equal(loaded(ids, attention_mask=mask)[0], model(ids, attention_mask=mask)[0])


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"position_mode": "random"}, "position_mode"),
        ({"position_range": 0}, "position_range"),
        ({"position_range": 2.5}, "position_range"),
        ({"position_seed": -1}, "position_seed"),
        ({"position_inference": "grid"}, "position_inference"),
        ({"position_mode": "random_offset"}, "max_position_offset"),  # the mode needs its parameter
        ({"position_mode": "random_offset", "max_position_offset": -1}, "max_position_offset"),
        ({"position_mode": "random_offset", "max_position_offset": 2.5}, "max_position_offset"),
        ({"position_mode": "random_offset", "max_position_offset": True}, "max_position_offset"),
        ({"max_position_offset": 8}, "max_position_offset"),  # a parameter of another mode
        ({"position_mode": "stratified", "max_position_offset": 8}, "max_position_offset"),
        ({"position_mode": "random_offset", "max_position_offset": 8, "position_range": 64}, "position_range"),
        ({"position_mode": "none", "position_inference": "evenly_spaced"}, "position_inference"),
    ],
)
def test_bad_position_settings_are_refused(overrides, field):
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
    from sinusoidal_encoder_training.publishing.model_card import render_model_card

    drawn = {"position_range": SPAN, "position_inference": inference} if sampling != "consecutive" else {}
    model = AutoModel.from_config(tiny_config(position_mode=sampling, **drawn))
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
    assert ('`position_mode="ordered_subset"`' in card) == (sampling == "ordered_subset")
    assert ("stratified positions" in card) == (sampling == "stratified")
    assert ("Leave `position_ids` to the model" in card) == (sampling != "consecutive")
    if sampling != "consecutive":
        assert f"0…{SPAN - 1}" in card and f"at most {SPAN} tokens" in card
        assert "  , so" not in card and "\n, so" not in card  # the sentence goes on after either sampling
    assert (f"⌊k·{SPAN}/n⌋" in card) == (sampling == "ordered_subset" and inference == "evenly_spaced")
    assert ("the middle of that cell" in card) == (sampling == "stratified" and inference == "evenly_spaced")


def stratified_model(**overrides):
    values = dict(position_mode="stratified", position_range=SPAN)
    values.update(overrides)
    return AutoModel.from_config(tiny_config(**values))


def cells_of(positions: torch.Tensor, n: int) -> torch.Tensor:
    """The index of the cell [⌊k·L/n⌋, ⌊(k+1)·L/n⌋) that holds each position."""
    edges = torch.arange(n + 1) * SPAN // n  # (n + 1,)
    return torch.searchsorted(edges, positions, right=True) - 1


@pytest.mark.parametrize(("training", "inference"), [(True, "draw"), (False, "draw"), (False, "evenly_spaced")])
def test_the_kth_token_gets_a_position_in_the_kth_cell(training, inference):
    model = stratified_model(position_inference=inference).train(training)
    _, mask = padded_batch()
    positions = draw(model, 4, 12, mask)  # (B, T)
    for row, real in zip(positions, mask.bool(), strict=True):
        n = int(real.sum())
        assert torch.equal(cells_of(row[real], n), torch.arange(n))  # sorted, distinct, one per cell
        assert (row[~real] == 0).all()


def test_evenly_spaced_inference_takes_the_middle_of_each_cell():
    model = stratified_model(position_inference="evenly_spaced").eval()
    _, mask = padded_batch()
    positions = draw(model, 4, 12, mask)
    for row, real in zip(positions, mask.bool(), strict=True):
        n = int(real.sum())
        starts = [k * SPAN // n for k in range(n)]
        ends = [(k + 1) * SPAN // n for k in range(n)]
        assert row[real].tolist() == [(start + end) // 2 for start, end in zip(starts, ends, strict=True)]
    assert draw(model, 1, 3, None).tolist() == [[33, 99, 166]]  # cells of 66, 67, 67
    full = draw(model, 1, SPAN, None)  # n = L: cells of one position each
    assert torch.equal(full[0], torch.arange(SPAN))
    model.train()  # training draws, whatever the inference setting
    torch.manual_seed(0)
    drawn = torch.cat([draw(model, 64, 4, None) for _ in range(20)])  # (1280, 4)
    assert len(drawn[:, 0].unique()) == SPAN // 4  # every position of the first cell is drawn
    torch.testing.assert_close(drawn.float().mean(0), torch.tensor([24.5, 74.5, 124.5, 174.5]), atol=2.0, rtol=0)


@pytest.mark.parametrize(
    ("mode", "inference"), [("ordered_subset", "draw"), ("stratified", "draw"), ("stratified", "evenly_spaced")]
)
def test_evaluation_positions_are_fixed_per_length_and_batch_independent(mode, inference):
    """In evaluation the drawing modes give a sequence the same positions at every call, in any batch, whatever its
    padding: one seeded draw per length (`position_seed`), read by rank; the middles of the cells need no seed."""
    model = subset_model(position_mode=mode, position_inference=inference).eval()
    ids, mask = padded_batch()
    batched = assert_rows_match_alone(model, ids, mask)
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state, batched)  # the same at every call
    positions = draw(model, 4, 12, mask)
    assert torch.equal(positions[1], positions[3])  # same length, same positions
    left = torch.cat([torch.zeros(1, 5, dtype=torch.long), torch.ones(1, 7, dtype=torch.long)], dim=1)  # left-padded
    assert torch.equal(draw(model, 1, 12, left)[0, 5:], positions[1, :7])
    reseeded = subset_model(position_mode=mode, position_seed=1, position_inference=inference).eval()
    changed = not torch.equal(draw(reseeded, 4, 12, mask), positions)
    assert changed == (inference == "draw")  # the middles do not depend on the seed


def test_stratified_saved_and_loaded_with_the_config(tmp_path):
    model = stratified_model(position_inference="evenly_spaced").eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert (loaded.config.position_mode, loaded.config.position_range) == ("stratified", SPAN)
    assert loaded.config.position_inference == "evenly_spaced"
    ids, mask = padded_batch()
    with torch.no_grad():
        assert torch.equal(loaded(ids, attention_mask=mask)[0], model(ids, attention_mask=mask)[0])


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="max_position_offset"):
        tiny_config(position_mode="stratified", max_position_offset=8)
    with pytest.raises(ValueError, match="position_range"):
        stratified_model(position_range=10).eval()(random_ids(1, 11))


def test_the_training_offset_shifts_positions_in_training_only():
    """`"random_offset"`: each sequence starts at an offset drawn from 0…K with the global RNG in training, at 0 in
    evaluation; the caller's positions win; the encoding of the table rows is the encoding of the positions."""
    config = tiny_config(position_mode="random_offset", max_position_offset=50)
    model = AutoModel.from_config(config)
    torch.manual_seed(0)
    positions = select_positions(config, None, 4, 7, None, torch.device("cpu"), training=True)
    assert positions.ids.shape == (4, 7) and positions.num_positions == 57
    starts = positions.ids[:, :1]
    assert torch.equal(positions.ids, starts + torch.arange(7)) and 0 <= starts.min() and starts.max() <= 50
    evaluation = select_positions(config, None, 4, 7, None, torch.device("cpu"), training=False)
    assert evaluation.ids.tolist() == [list(range(7))] and evaluation.num_positions == 7
    given = torch.arange(3, 10).unsqueeze(0)
    assert select_positions(config, given, 1, 7, None, torch.device("cpu"), training=True) == (given, None)
    exact = se.sinusoidal_position_encoding(evaluation.ids.expand(4, 7) + 40, config.hidden_size)
    from_table = model.embeddings.encode_positions(evaluation.ids.expand(4, 7) + 40, num_positions=47)
    assert torch.equal(from_table, exact)  # a row of the table is the encoding of its position, bit for bit


def test_no_positions_encodes_none_and_ignores_position_ids():
    """`"none"`, the ablation: the embeddings are the scaled token embeddings alone, so shuffling the tokens of a
    sequence shuffles its outputs (the model is blind to order), and `position_ids` change nothing."""
    model = AutoModel.from_config(tiny_config(position_mode="none")).eval()
    ids = random_ids(2, 9)
    with torch.no_grad():
        embedded = model.embeddings(input_ids=ids)
        torch.testing.assert_close(embedded, model.embeddings.word_embeddings(ids) * model.config.hidden_size**0.5)
        out = model(ids).last_hidden_state
        assert torch.equal(model(ids, position_ids=torch.arange(100, 109)[None]).last_hidden_state, out)
        order = torch.randperm(9)
        torch.testing.assert_close(model(ids[:, order]).last_hidden_state, out[:, order], atol=1e-5, rtol=1e-5)
    _, mask = padded_batch()
    assert_rows_match_alone(model, random_ids(4, 12), mask)


@pytest.mark.parametrize("padded", [False, True])
def test_the_training_offset_matches_explicit_positions(padded):
    """With `position_mode="random_offset"` and `max_position_offset` K, training starts each sequence at a position
    drawn from 0…K with the global RNG: the same outputs as passing those positions explicitly. Evaluation starts at
    0."""
    max_offset = 300
    model = AutoModel.from_config(tiny_config(position_mode="random_offset", max_position_offset=max_offset))
    plain = AutoModel.from_config(tiny_config())
    plain.load_state_dict(model.state_dict())
    ids = random_ids(4, 10)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, 6:] = 0
        mask[3, 2:] = 0
    model.train()
    torch.manual_seed(7)
    shifted = model(ids, attention_mask=mask).last_hidden_state
    torch.manual_seed(7)
    starts = torch.randint(0, max_offset + 1, (4, 1))
    assert len(set(starts.flatten().tolist())) > 1  # sequences get different offsets
    explicit = model(ids, attention_mask=mask, position_ids=torch.arange(10) + starts).last_hidden_state
    real = mask.bool()
    assert torch.equal(shifted[real], explicit[real])
    unshifted = model(ids, attention_mask=mask).last_hidden_state  # new offsets at every call
    assert not torch.allclose(unshifted[real], shifted[real])
    model.eval()
    plain.eval()
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state, plain(ids, attention_mask=mask)[0])
