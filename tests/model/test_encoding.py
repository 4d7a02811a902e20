"""The sinusoidal encoding against a float64 evaluation of the paper's formula, and the properties it derives."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import random_ids, tiny_config

import sinusoidal_encoder as se
from sinusoidal_encoder import sinusoidal_position_encoding


def paper_formula(positions: np.ndarray, dim: int, base: float) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(pos / base^(2i/d)), in float64."""
    pos = positions.astype(np.float64)[:, None]
    two_i = np.arange(0, dim, 2, dtype=np.float64)
    angle = pos / np.power(base, two_i / dim)
    table = np.empty((len(positions), dim), dtype=np.float64)
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle)
    return table


def frequencies(dim: int, base: float) -> np.ndarray:
    return 1.0 / np.power(base, np.arange(0, dim, 2, dtype=np.float64) / dim)


@pytest.mark.parametrize(
    ("dim", "base"), [(2, 10000.0), (32, 10000.0), (512, 10000.0), (30, 10000.0), (64, 100.0), (128, 1e6)]
)
def test_exact_against_float64_formula_up_to_65535(dim, base):
    positions = np.arange(65536)
    expected = paper_formula(positions, dim, base)
    got = sinusoidal_position_encoding(torch.arange(65536), dim, base)
    assert got.dtype == torch.float32 and got.shape == (65536, dim)
    assert np.abs(got.double().numpy() - expected).max() < 1e-6


def test_layout_is_interleaved_sin_cos():
    dim = 16
    pe = sinusoidal_position_encoding(torch.arange(50), dim).double()
    omega = torch.from_numpy(frequencies(dim, 10000.0))
    angle = torch.arange(50, dtype=torch.float64)[:, None] * omega
    torch.testing.assert_close(pe[:, 0::2], angle.sin(), atol=1e-7, rtol=0)
    torch.testing.assert_close(pe[:, 1::2], angle.cos(), atol=1e-7, rtol=0)
    # position 0 is (sin 0, cos 0, sin 0, cos 0, ...) = (0, 1, 0, 1, ...); column 0 has wavelength 2π
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0] * (dim // 2), dtype=torch.float64))
    assert pe[1, 0] == pytest.approx(math.sin(1.0), abs=1e-7)


def test_shape_follows_position_ids():
    position_ids = torch.arange(24).view(2, 3, 4)
    pe = sinusoidal_position_encoding(position_ids, 8)
    assert pe.shape == (2, 3, 4, 8)
    assert torch.equal(pe[1, 2, 3], sinusoidal_position_encoding(torch.tensor([23]), 8)[0])


def test_bounded_in_minus_one_one():
    pe = sinusoidal_position_encoding(torch.arange(100_000), 64)
    assert pe.min() >= -1.0 and pe.max() <= 1.0
    assert pe.min() < -0.99 and pe.max() > 0.99  # the bounds are reached, not just respected


@pytest.mark.parametrize("dim", [8, 32, 128])
def test_unique_vector_per_position(dim):
    pe = sinusoidal_position_encoding(torch.arange(4096), dim).double()
    distances = torch.cdist(pe, pe)
    distances.fill_diagonal_(float("inf"))
    assert distances.min() > 1e-3


@pytest.mark.parametrize("k", [1, 7, 100, 3000])
@pytest.mark.parametrize("dim", [16, 64])
def test_shift_is_a_fixed_block_diagonal_rotation(dim, k):
    omega = frequencies(dim, 10000.0)
    rotation = np.zeros((dim, dim))
    for i, w in enumerate(omega):
        c, s = math.cos(k * w), math.sin(k * w)
        rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    assert np.allclose(rotation @ rotation.T, np.eye(dim))  # a rotation: orthogonal ...
    assert np.isclose(np.linalg.det(rotation), 1.0)  # ... and proper
    positions = torch.arange(0, 20000, 37)
    pe = sinusoidal_position_encoding(positions, dim).double().numpy()
    shifted = sinusoidal_position_encoding(positions + k, dim).double().numpy()
    # the same matrix R(k) maps PE(p) to PE(p + k) for every p
    assert np.abs(pe @ rotation.T - shifted).max() < 2e-6


@pytest.mark.parametrize("k", [0, 1, 5, 50, 999])
def test_dot_product_depends_only_on_offset(k):
    dim = 64
    positions = torch.arange(0, 30000, 13)
    pe = sinusoidal_position_encoding(positions, dim).double()
    shifted = sinusoidal_position_encoding(positions + k, dim).double()
    dots = (pe * shifted).sum(-1)
    expected = np.cos(k * frequencies(dim, 10000.0)).sum()  # Σ_i cos(k ω_i), whatever p
    assert torch.allclose(dots, torch.full_like(dots, expected), atol=1e-5)


def test_value_at_a_position_does_not_depend_on_sequence_length():
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    short = model.embeddings(inputs_embeds=torch.zeros(1, 10, 32))
    long = model.embeddings(inputs_embeds=torch.zeros(1, 300, 32))
    assert torch.equal(short[0], long[0, :10])
    assert torch.equal(
        sinusoidal_position_encoding(torch.arange(10), 32), sinusoidal_position_encoding(torch.arange(300), 32)[:10]
    )


def expected_embeddings(model, input_ids):
    word = model.get_input_embeddings()(input_ids)
    pe = sinusoidal_position_encoding(torch.arange(input_ids.shape[1]), model.config.hidden_size)
    return word * math.sqrt(model.config.hidden_size) + pe


def test_embeddings_are_scaled_tokens_plus_encoding(tmp_path):
    model = se.SinusoidalEncoderForMaskedLM(tiny_config()).eval()
    ids = random_ids(2, 40)
    assert torch.equal(model.model.embeddings(input_ids=ids), expected_embeddings(model, ids))
    # inputs_embeds are the looked-up embeddings: scaled the same way
    looked_up = model.get_input_embeddings()(ids)
    assert torch.equal(model.model.embeddings(inputs_embeds=looked_up), expected_embeddings(model, ids))
    # and not when scale_embeddings=False
    plain = se.SinusoidalEncoderModel(tiny_config(scale_embeddings=False)).eval()
    assert torch.equal(
        plain.embeddings(input_ids=ids),
        plain.get_input_embeddings()(ids) + sinusoidal_position_encoding(torch.arange(40), 32),
    )


@pytest.mark.parametrize(
    "auto_class_name", ["AutoModel", "AutoModelForMaskedLM", "AutoModelForSequenceClassification"]
)
def test_encoding_survives_from_pretrained_on_meta_device(tmp_path, auto_class_name):
    import transformers

    auto_class = getattr(transformers, auto_class_name)
    model = auto_class.from_config(tiny_config())
    model.save_pretrained(tmp_path)
    loaded = auto_class.from_pretrained(tmp_path).eval()
    base = loaded.base_model
    ids = random_ids(3, 50)
    assert torch.equal(base.embeddings(input_ids=ids), expected_embeddings(base, ids))
    # re-running weight initialisation does not touch the encoding or the loaded weights either
    before = {k: v.clone() for k, v in loaded.state_dict().items()}
    loaded.initialize_weights()
    assert all(torch.equal(before[k], v) for k, v in loaded.state_dict().items())
    assert torch.equal(base.embeddings(input_ids=ids), expected_embeddings(base, ids))


def test_bf16_model_gets_correctly_rounded_encoding(tmp_path):
    dim = 32
    exact = torch.from_numpy(paper_formula(np.array([5000]), dim, 10000.0))[0]  # float64
    expected = exact.to(torch.bfloat16)

    def encoding_at_5000(model):
        zeros = torch.zeros(1, 1, dim, dtype=torch.bfloat16)
        return model.embeddings(inputs_embeds=zeros, position_ids=torch.tensor([[5000]]))[0, 0]

    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    cast = model.to(torch.bfloat16)
    assert torch.equal(encoding_at_5000(cast), expected)
    cast.save_pretrained(tmp_path)
    loaded = se.SinusoidalEncoderModel.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert loaded.dtype == torch.bfloat16
    assert torch.equal(encoding_at_5000(loaded), expected)
    # the float32 error of the cast is below bf16 resolution: rounding came from the exact value
    assert (encoding_at_5000(loaded).double() - exact).abs().max() <= 2**-8


@pytest.mark.parametrize("norm_first", [False, True])
def test_runs_four_times_past_max_position_embeddings(norm_first):
    config = tiny_config(max_position_embeddings=64, norm_first=norm_first)
    model = se.SinusoidalEncoderForMaskedLM(config).eval()
    ids = random_ids(2, 4 * 64)
    with torch.no_grad():
        out = model(ids, attention_mask=torch.ones_like(ids))
    assert out.logits.shape == (2, 256, config.vocab_size)
    assert torch.isfinite(out.logits).all()
    # the encoding keeps going: positions past the training length are the formula's values
    got = model.model.embeddings(inputs_embeds=torch.zeros(1, 256, 32))[0, 200:]
    assert np.abs(got.double().numpy() - paper_formula(np.arange(200, 256), 32, 10000.0)).max() < 1e-6


def test_encoding_rejects_bad_arguments():
    with pytest.raises(ValueError, match="dim"):
        sinusoidal_position_encoding(torch.arange(3), 7)
    with pytest.raises(ValueError, match="base"):
        sinusoidal_position_encoding(torch.arange(3), 8, base=0.0)
