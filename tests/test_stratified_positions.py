"""`position_sampling="stratified"`: each token's position drawn from its own cell of the range, in training and
inference; the middles of the cells with `position_sampling_inference="evenly_spaced"`. (Its use of the global RNG
in training is tested with the ordered subset's, in test_position_sampling.py.)"""

from __future__ import annotations

import pytest
import torch
from conftest import assert_rows_match_alone, padded_batch, random_ids, tiny_config
from transformers import AutoModel

SPAN = 200


def stratified_model(**overrides):
    values = dict(position_sampling="stratified", position_sampling_range=SPAN)
    values.update(overrides)
    return AutoModel.from_config(tiny_config(**values))


def cells_of(positions: torch.Tensor, n: int) -> torch.Tensor:
    """The index of the cell [⌊k·L/n⌋, ⌊(k+1)·L/n⌋) that holds each position."""
    edges = torch.arange(n + 1) * SPAN // n  # (n + 1,)
    return torch.searchsorted(edges, positions, right=True) - 1


@pytest.mark.parametrize(("training", "inference"), [(True, "draw"), (False, "draw"), (False, "evenly_spaced")])
def test_the_kth_token_gets_a_position_in_the_kth_cell(training, inference):
    model = stratified_model(position_sampling_inference=inference).train(training)
    ids, mask = padded_batch()
    positions = model._stratified_positions(4, 12, mask, ids.device)  # (B, T)
    for row, real in zip(positions, mask.bool(), strict=True):
        n = int(real.sum())
        assert torch.equal(cells_of(row[real], n), torch.arange(n))  # sorted, distinct, one per cell
        assert (row[~real] == 0).all()


def test_evenly_spaced_inference_takes_the_middle_of_each_cell():
    model = stratified_model(position_sampling_inference="evenly_spaced").eval()
    ids, mask = padded_batch()
    positions = model._stratified_positions(4, 12, mask, ids.device)
    for row, real in zip(positions, mask.bool(), strict=True):
        n = int(real.sum())
        starts = [k * SPAN // n for k in range(n)]
        ends = [(k + 1) * SPAN // n for k in range(n)]
        assert row[real].tolist() == [(start + end) // 2 for start, end in zip(starts, ends, strict=True)]
    assert model._stratified_positions(1, 3, None, ids.device).tolist() == [[33, 99, 166]]  # cells of 66, 67, 67
    full = model._stratified_positions(1, SPAN, None, ids.device)  # n = L: cells of one position each
    assert torch.equal(full[0], torch.arange(SPAN))
    model.train()  # training draws, whatever the inference setting
    torch.manual_seed(0)
    drawn = torch.cat([model._stratified_positions(64, 4, None, ids.device) for _ in range(20)])  # (1280, 4)
    assert len(drawn[:, 0].unique()) == SPAN // 4  # every position of the first cell is drawn
    torch.testing.assert_close(drawn.float().mean(0), torch.tensor([24.5, 74.5, 124.5, 174.5]), atol=2.0, rtol=0)


@pytest.mark.parametrize("inference", ["draw", "evenly_spaced"])
def test_evaluation_positions_are_fixed_per_length_and_batch_independent(inference):
    model = stratified_model(position_sampling_inference=inference).eval()
    ids, mask = padded_batch()
    batched = assert_rows_match_alone(model, ids, mask)
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state, batched)  # the same at every call
    positions = model._stratified_positions(4, 12, mask, ids.device)
    assert torch.equal(positions[1], positions[3])  # same length, same positions
    left = torch.cat([torch.zeros(1, 5, dtype=torch.long), torch.ones(1, 7, dtype=torch.long)], dim=1)  # left-padded
    assert torch.equal(model._stratified_positions(1, 12, left, ids.device)[0, 5:], positions[1, :7])
    reseeded = stratified_model(position_sampling_seed=1, position_sampling_inference=inference).eval()
    changed = not torch.equal(reseeded._stratified_positions(4, 12, mask, ids.device), positions)
    assert changed == (inference == "draw")  # the middles do not depend on the seed


def test_saved_and_loaded_with_the_config(tmp_path):
    model = stratified_model(position_sampling_inference="evenly_spaced").eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert (loaded.config.position_sampling, loaded.config.position_sampling_range) == ("stratified", SPAN)
    assert loaded.config.position_sampling_inference == "evenly_spaced"
    ids, mask = padded_batch()
    with torch.no_grad():
        assert torch.equal(loaded(ids, attention_mask=mask)[0], model(ids, attention_mask=mask)[0])


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="random_position_offset"):
        tiny_config(position_sampling="stratified", random_position_offset=8)
    with pytest.raises(ValueError, match="position_sampling_range"):
        stratified_model(position_sampling_range=10).eval()(random_ids(1, 11))
