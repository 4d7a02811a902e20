"""How positions enter the model (`position_encoding`): the paper's encoding added to the embeddings, rotary positions
on queries and keys, ALiBi's bias on the scores. Shift invariance of the attention-side encodings, the rotation
being the encoding's own 2×2 block rotation, parity with transformers' rotary helper and with the ALiBi paper's
slopes, every attention path (padded, packed per sequence, packed as a padded batch), the checks of the fields, the
refusal of flash attention for a bias, and the round trip through a saved folder."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import assert_rows_match_alone, padded_batch, random_ids, tiny_config
from transformers import AutoModel, AutoModelForMaskedLM

from sinusoidal_encoder import fast_paths
from sinusoidal_encoder import modeling_sinusoidal_encoder as modeling
from sinusoidal_encoder.positions import (
    POSITION_ENCODINGS,
    alibi_bias,
    alibi_slopes,
    rotary_cos_sin,
    rotate_queries_and_keys,
    sinusoidal_position_encoding,
)

IN_ATTENTION = ["rotary", "alibi"]


def model_with(encoding: str, attn_implementation: str = "sdpa", **overrides):
    config = tiny_config(position_encoding=encoding, **overrides)
    return AutoModel.from_config(config, attn_implementation=attn_implementation).eval()


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("encoding", IN_ATTENTION)
@pytest.mark.parametrize("k", [1, 37, 1000])
def test_attention_side_encodings_depend_on_offsets_alone(encoding, attn_implementation, k):
    """With rotary or ALiBi and nothing added to the embeddings, shifting every position by the same k leaves the
    outputs unchanged, while spreading the positions apart changes them (order and distance are encoded); the
    paper's added encoding changes with the shift (the control). Weights drawn wide, so that attention is sharp."""
    ids = random_ids(2, 12)
    positions = torch.arange(12).unsqueeze(0)
    model = model_with(encoding, attn_implementation, initializer_range=0.3)
    with torch.no_grad():
        at_zero = model(ids, position_ids=positions).last_hidden_state
        shifted = model(ids, position_ids=positions + k).last_hidden_state
        spread = model(ids, position_ids=3 * positions).last_hidden_state
    torch.testing.assert_close(shifted, at_zero, atol=2e-5, rtol=1e-5)
    assert (spread - at_zero).abs().max() > 1e-2
    control = model_with("sinusoidal", attn_implementation, initializer_range=0.3)
    with torch.no_grad():
        moved = control(ids, position_ids=positions + k).last_hidden_state - control(ids).last_hidden_state
    assert moved.abs().max() > 1e-2


@pytest.mark.parametrize("encoding", IN_ATTENTION)
def test_nothing_is_added_to_the_embeddings(encoding):
    model = model_with(encoding)
    ids = random_ids(1, 9)
    with torch.no_grad():
        embedded = model.embeddings(input_ids=ids)
    torch.testing.assert_close(embedded, model.embeddings.word_embeddings(ids) * math.sqrt(32))


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_rotary_rotates_each_pair_by_the_encodings_block_rotation(factor):
    """The rotation rotary applies at position p is the 2×2 block rotation R(p) that takes the sinusoidal encoding
    of the rotated size r from position 0 to p (tests/model/test_encoding.py's R(k)), pair by pair, the same
    frequencies; the dimensions past r and the values are untouched."""
    config = tiny_config(position_encoding="rotary", partial_rotary_factor=factor)
    num_heads, head_dim = 4, 8
    r = int(head_dim * factor)
    positions = torch.tensor([[0, 1, 5, 300, 4099]])
    cos, sin = rotary_cos_sin(config, positions).rotary  # (1, T, r/2)
    qkv = torch.randn(1, 5, 3 * num_heads * head_dim, dtype=torch.float64)
    rotated = rotate_queries_and_keys(qkv, cos.double(), sin.double(), num_heads).view(1, 5, 3, num_heads, head_dim)
    heads = qkv.view(1, 5, 3, num_heads, head_dim)
    for t, p in enumerate(positions[0].tolist()):
        encoding = sinusoidal_position_encoding(torch.tensor(p), r, dtype=torch.float64)  # PE(p) = R(p) PE(0)
        rotation = torch.zeros(r, r, dtype=torch.float64)
        for i in range(r // 2):
            s, c = encoding[2 * i], encoding[2 * i + 1]  # sin(p ω_i), cos(p ω_i)
            rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]])
        origin = sinusoidal_position_encoding(torch.tensor(0), r, dtype=torch.float64)
        torch.testing.assert_close(rotation @ origin, encoding)  # R(p) is the encoding's own rotation
        for which in (0, 1):  # queries and keys
            expected = heads[0, t, which, :, :r] @ rotation.T.float().double()
            torch.testing.assert_close(rotated[0, t, which, :, :r], expected, atol=1e-6, rtol=1e-6)
            assert torch.equal(rotated[0, t, which, :, r:], heads[0, t, which, :, r:])
        assert torch.equal(rotated[0, t, 2], heads[0, t, 2])


def test_rotary_matches_transformers_rotary_helper():
    """Parity with transformers' own rotary code (Llama's `LlamaRotaryEmbedding` and `apply_rotary_pos_emb`): the
    same frequencies and angles; transformers pairs dimension i with i + r/2 ("rotate_half") where the encoding
    pairs 2i with 2i+1, so the heads are compared with their dimensions reordered, and its rotation turns the other
    way (the encoding's R(p) is its rotation by -p)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    num_heads, head_dim = 4, 16
    config = tiny_config(position_encoding="rotary", hidden_size=num_heads * head_dim, num_attention_heads=num_heads)
    positions = torch.arange(0, 2000, 7).unsqueeze(0)  # (1, T)
    cos, sin = rotary_cos_sin(config, positions).rotary  # (1, T, hs/2)
    llama = LlamaConfig(hidden_size=num_heads * head_dim, num_attention_heads=num_heads, rope_theta=10000.0)
    reference_cos, reference_sin = LlamaRotaryEmbedding(llama)(torch.zeros(1, dtype=torch.float32), positions)
    torch.testing.assert_close(reference_cos, torch.cat((cos, cos), dim=-1), atol=2e-4, rtol=0)  # float32 angles
    torch.testing.assert_close(reference_sin, torch.cat((sin, sin), dim=-1), atol=2e-4, rtol=0)

    tokens = positions.shape[1]
    qkv = torch.randn(1, tokens, 3 * num_heads * head_dim, dtype=torch.float64)
    ours = rotate_queries_and_keys(qkv, cos.double(), sin.double(), num_heads).view(1, tokens, 3, num_heads, head_dim)
    half_layout = torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))  # 2i -> i, 2i+1 -> i+r/2
    heads = qkv.view(1, tokens, 3, num_heads, head_dim)[..., half_layout].transpose(1, 3)  # (1, nh, 3, T, hs)
    full_cos, full_sin = torch.cat((cos, cos), dim=-1).double(), torch.cat((sin, sin), dim=-1).double()
    query, key = apply_rotary_pos_emb(heads[:, :, 0], heads[:, :, 1], full_cos, -full_sin)  # (1, nh, T, hs)
    torch.testing.assert_close(ours[:, :, 0][..., half_layout], query.transpose(1, 2))
    torch.testing.assert_close(ours[:, :, 1][..., half_layout], key.transpose(1, 2))


def paper_slopes(n: int) -> list[float]:
    """`get_slopes` of the ALiBi paper's code (ofirpress/attention_with_linear_biases), as published."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (
        get_slopes_power_of_2(closest_power_of_2)
        + paper_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    )


@pytest.mark.parametrize("num_heads", [1, 2, 4, 8, 12, 16, 6])
def test_alibi_slopes_are_the_papers(num_heads):
    assert alibi_slopes(num_heads).tolist() == pytest.approx(paper_slopes(num_heads), rel=1e-15)
    if num_heads == 8:
        assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]  # 1/2, 1/4, ..., 1/256


def test_alibi_bias_is_minus_slope_times_distance():
    config = tiny_config(position_encoding="alibi")
    positions = torch.tensor([[0, 1, 2, 7], [3, 5, 5, 9]])
    bias = alibi_bias(config, positions).bias  # (B, nh, T, T)
    slopes = paper_slopes(4)
    for b, h, i, j in [(0, 0, 0, 3), (1, 3, 1, 3), (1, 2, 1, 2), (0, 1, 2, 2)]:
        expected = -slopes[h] * abs(positions[b, i] - positions[b, j]).item()
        assert bias[b, h, i, j].item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("per_sequence", [True, False])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("encoding", IN_ATTENTION)
def test_every_attention_path_gives_each_row_its_own_result(encoding, attn_implementation, per_sequence, monkeypatch):
    """A padded batch, on the packed path (rotary: one call per sequence on the CPU, or one padded call as on GPUs)
    or on the padded layout (ALiBi's bias), gives each row the hidden states of the row run alone; the returned
    attentions path (eager, padded) agrees as well."""
    monkeypatch.setattr(fast_paths, "attends_per_sequence", lambda device: per_sequence)
    model = model_with(encoding, attn_implementation)
    ids, mask = padded_batch()
    batched = assert_rows_match_alone(model, ids, mask)
    with torch.no_grad():
        with_attentions = model(ids, attention_mask=mask, output_attentions=True)
    real = mask.bool()
    torch.testing.assert_close(with_attentions.last_hidden_state[real], batched[real], atol=1e-5, rtol=1e-5)
    assert len(with_attentions.attentions) == 2


@pytest.mark.parametrize("encoding", IN_ATTENTION)
def test_long_inputs_and_the_window_work_with_attention_side_encodings(encoding):
    model = model_with(encoding, long_input_attention_window=8)
    ids = random_ids(2, 100)  # past max_position_embeddings (64): the window applies
    with torch.no_grad():
        windowed = model(ids).last_hidden_state
    assert torch.isfinite(windowed).all()


def test_a_bias_on_the_scores_is_refused_with_flash_attention():
    model = model_with("alibi")
    model.config._attn_implementation = "flash_attention_2"  # the check, without a flash kernel on the CPU
    with pytest.raises(ValueError, match="flash attention cannot take"):
        model(random_ids(1, 5))


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"position_encoding": "learned"}, "position_encoding"),
        ({"position_encoding": "alibi", "position_encoding_base": 500.0}, "position_encoding_base"),
        ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),  # a parameter of rotary only
        ({"position_encoding": "rotary", "partial_rotary_factor": 0.0}, "partial_rotary_factor"),
        ({"position_encoding": "rotary", "partial_rotary_factor": 1.5}, "partial_rotary_factor"),
        ({"position_encoding": "rotary", "position_mode": "none"}, "position_encoding"),
        ({"position_encoding_base": -1.0}, "position_encoding_base"),
        ({"position_encoding": "tupe", "partial_rotary_factor": 0.5}, "partial_rotary_factor"),
        ({"position_encoding": "scaled_sinusoidal", "position_mode": "none"}, "position_encoding"),
        ({"position_encoding": "sinusoidal_every_layer", "position_mode": "none"}, "position_encoding"),
        ({"position_encoding": "tupe", "position_mode": "none"}, "position_encoding"),
        ({"position_encoding": "tupe", "position_encoding_base": 0.0}, "position_encoding_base"),
    ],
)
def test_encodings_and_their_parameters_are_checked_together(overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(**overrides)


@pytest.mark.parametrize("encoding", list(POSITION_ENCODINGS))
def test_a_saved_folder_loads_with_its_encoding_and_gives_the_same_outputs(encoding, tmp_path):
    config = tiny_config(
        position_encoding=encoding, **({"partial_rotary_factor": 0.5} if encoding == "rotary" else {})
    )
    model = AutoModelForMaskedLM.from_config(config).eval()
    model.save_pretrained(tmp_path)
    ids, mask = padded_batch()
    for loaded in (
        AutoModelForMaskedLM.from_pretrained(tmp_path).eval(),
        AutoModelForMaskedLM.from_pretrained(tmp_path, trust_remote_code=True).eval(),
    ):
        assert loaded.config.position_encoding == encoding
        with torch.no_grad():
            torch.testing.assert_close(
                loaded(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits, atol=0, rtol=0
            )


def test_positions_of_every_mode_reach_the_attention_side_encodings():
    """Which positions (`position_mode`) and how they enter (`position_encoding`) combine: stratified positions
    drawn in training reach the rotation, so two draws differ; in evaluation they are fixed."""
    model = model_with("rotary", position_mode="stratified", position_range=256).train()
    ids = random_ids(2, 10)
    torch.manual_seed(0)
    first = model(ids).last_hidden_state
    second = model(ids).last_hidden_state
    assert (first - second).abs().max() > 1e-4
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(ids).last_hidden_state, model(ids).last_hidden_state)


@pytest.mark.slow
@pytest.mark.parametrize("encoding", IN_ATTENTION)
def test_attention_side_encodings_export_to_onnx_and_run_at_any_length(encoding, tmp_path):
    """The rotation and the bias are computed inside the graph from the positions, as the encoding is: onnxruntime
    equals PyTorch at lengths 8 and 300 (past the 16 positions of the config), padded rows included."""
    pytest.importorskip("onnxscript", reason="ONNX export needs onnxscript (the `integrations` extra)")
    pytest.importorskip("onnxruntime", reason="the ONNX check needs onnxruntime (the `integrations` extra)")
    from sinusoidal_encoder_training.publishing.onnx_export import check_onnx, export_onnx

    model = modeling.SinusoidalEncoderModel(tiny_config(position_encoding=encoding, max_position_embeddings=16)).eval()
    path = export_onnx(model, str(tmp_path / "model.onnx"), "last_hidden_state")
    assert check_onnx(model, path, "last_hidden_state", lengths=(8, 300)) <= 1e-4
