"""How positions enter the model (`position_encoding`); which position each token gets (`position_mode`) is
`position_modes.py`'s.

Once the model has the positions of a forward pass (`position_modes.select_positions`), they enter the model the way
`position_encoding` says (`POSITION_ENCODINGS`): the paper's sinusoidal encoding added to the token embeddings
(`sinusoidal_position_encoding`; `"scaled_sinusoidal"` with a learned scale and a LayerNorm, `ScaledEncodingSum`;
`"sinusoidal_every_layer"` again at every layer's input), or, inside every attention layer, a rotation of queries and
keys (`"rotary"`) or a bias on the attention scores (`"alibi"`, and `"tupe"`'s positional term,
`UntiedPositionScores`): `attention_positions` computes what the layers take, once per forward pass, and the
attention applies it in one place. The learned parts of an encoding are modules built from the config
(`encoding_sum`, `learned_positions`). Each encoding, and the mode without positions (`"none"`), carries how a model
card describes it (`PositionCard`, read by `position_card`). Each encoding and each mode is registered with the config
fields it reads (its parameters), which the config checks together (`SinusoidalEncoderConfig.check`).
Adding an encoding means: its function and its entry here, its values in the config's docstring, and tests.

This file is copied as-is into Hub repositories with the model: it imports only the standard library and torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import torch
from torch import nn

from .position_modes import POSITION_MODES, PositionCard, Positions, is_number


def sinusoidal_position_encoding(
    position_ids: torch.Tensor,
    dim: int,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The sinusoidal encoding of "Attention Is All You Need", interleaved exactly as the paper writes it.

    Column 2i holds sin(pos / base^(2i/dim)) and column 2i+1 holds cos(pos / base^(2i/dim)).

    Args:
        position_ids: integer (or float) positions of any shape.
        dim: the encoding size; must be even.
        base: the base of the wavelengths (10000 in the paper).
        dtype: the dtype of the result. Angles, sines and cosines are computed in float64 and cast once at the end,
            so the result is the correctly rounded value in `dtype` (float32 values are within 1e-6 of the exact ones
            for every position below 65536; see the tests).

    Returns:
        A tensor of shape `(*position_ids.shape, dim)` and dtype `dtype`, on the device of `position_ids`.
    """
    if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0 or dim % 2:
        raise ValueError(f"`dim` must be a positive even integer, got {dim!r}.")
    if not base > 0:
        raise ValueError(f"`base` must be positive, got {base!r}.")
    angles = _angles(position_ids, dim, base)  # (*, dim/2), float64
    encoding = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (*, dim/2, 2): [sin, cos] per frequency
    return encoding.flatten(-2).to(device=position_ids.device, dtype=dtype)  # (*, dim)


def _angles(position_ids: torch.Tensor, dim: int, base: float) -> torch.Tensor:
    """pos / base^(2i/dim) for i < dim/2, in float64 `(*, dim/2)` (on the CPU for MPS, which has no float64)."""
    if position_ids.device.type == "mps":
        position_ids = position_ids.cpu()
    exponents = torch.arange(0, dim, 2, dtype=torch.float64, device=position_ids.device) / dim  # (dim/2,) = 2i/d
    inv_freq = torch.pow(float(base), -exponents)  # (dim/2,)
    return position_ids.to(torch.float64).unsqueeze(-1) * inv_freq  # (*, dim/2)


def encode_positions(
    position_ids: torch.Tensor,
    dim: int,
    base: float = 10000.0,
    num_positions: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """PE of `position_ids` `(*position_ids.shape, dim)`, as `sinusoidal_position_encoding`. Positions known to lie in
    0…num_positions-1, more of them than that, are rows of the encoding of 0…num_positions-1, computed once (the
    same values: each row is computed exactly as it would be alone)."""
    if num_positions is not None and position_ids.numel() > num_positions:
        rows = torch.arange(num_positions, device=position_ids.device)  # (P,)
        return sinusoidal_position_encoding(rows, dim, base, dtype)[position_ids]  # (*, dim)
    return sinusoidal_position_encoding(position_ids, dim, base, dtype)


# ----------------------------------------------------------------------------------------------------------------
# how positions enter the model: added to the embeddings, or inside every attention layer


class AttentionPositions(NamedTuple):
    """What a position encoding gives every attention layer, computed once per forward pass. `rotary`: the cosines
    and sines `(B or 1, T, r/2)` of the angles by which queries and keys are rotated (`rotate_queries_and_keys`), or
    None. `bias`: added to the attention scores `(B or 1, nh, T, T)`, or None. `layer_input`: added to the input of
    every layer after the first `(B or 1, T, d)`, float32, or None."""

    rotary: tuple[torch.Tensor, torch.Tensor] | None = None
    bias: torch.Tensor | None = None
    layer_input: torch.Tensor | None = None

    def layer_arguments(self) -> dict[str, Any]:
        """What the layers take as keyword arguments on the padded layout (the bias goes into the mask instead):
        `position_embeddings` (the rotation), `layer_positions` (the input's encoding)."""
        arguments = {"position_embeddings": self.rotary, "layer_positions": self.layer_input}
        return {name: value for name, value in arguments.items() if value is not None}


def rotary_dim(config: Any) -> int:
    """r, the leading dimensions of each head that `"rotary"` rotates: `partial_rotary_factor` of the head size,
    rounded down to an even number (pairs are rotated), at least 2."""
    head_dim = config.hidden_size // config.num_attention_heads
    return max(2, int(head_dim * config.partial_rotary_factor) // 2 * 2)


def rotary_cos_sin(config: Any, position_ids: torch.Tensor) -> AttentionPositions:
    """`"rotary"`: cos and sin of pos / base^(2i/r) for the r/2 rotated pairs of each head (`rotary_dim`), the
    frequencies the sinusoidal encoding of size r has, computed in float64 and given in float32 `(B or 1, T, r/2)`."""
    angles = _angles(position_ids, rotary_dim(config), config.position_encoding_base)  # (B or 1, T, r/2)
    device = position_ids.device
    return AttentionPositions(rotary=(angles.cos().to(device, torch.float32), angles.sin().to(device, torch.float32)))


def rotate_queries_and_keys(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The fused projections `qkv` `(B, T, 3d)` (laid out [Q; K; V], each head a contiguous block) with the first r
    dimensions of every query and key head rotated pair by pair, (x_2i, x_2i+1) by the angle θ_i of its position:
    exactly the rotation that takes the sinusoidal encoding of size r from position 0 to that position,
    [[cos θ, sin θ], [-sin θ, cos θ]] per pair, so that q_p · k_p' depends on p' - p alone. Values pass unrotated.
    `cos`, `sin`: `(B or 1, T, r/2)`."""
    batch_size, seq_len, width = qkv.shape
    head_dim = width // (3 * num_heads)
    half = cos.shape[-1]  # r/2
    heads = qkv.view(batch_size, seq_len, 3, num_heads, head_dim)  # (B, T, 3, nh, hs)
    pairs = heads[:, :, :2, :, : 2 * half].unflatten(-1, (half, 2)).to(cos.dtype)  # (B, T, 2, nh, r/2, 2)
    first, second = pairs.unbind(-1)  # 2 × (B, T, 2, nh, r/2)
    cos, sin = cos[:, :, None, None, :], sin[:, :, None, None, :]  # (B or 1, T, 1, 1, r/2)
    rotated = torch.stack((first * cos + second * sin, second * cos - first * sin), dim=-1)  # (B, T, 2, nh, r/2, 2)
    queries_and_keys = torch.cat((rotated.flatten(-2).to(qkv.dtype), heads[:, :, :2, :, 2 * half :]), dim=-1)
    return torch.cat((queries_and_keys, heads[:, :, 2:]), dim=2).view(batch_size, seq_len, width)  # (B, T, 3d)


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The head slopes of ALiBi (Press et al. 2022, "Train Short, Test Long"): the geometric sequence
    2^(-8/n), 2^(-16/n), ..., 2^(-8) for n heads when n is a power of two; otherwise those of the nearest smaller
    power of two, then every other slope of the next power of two, as the paper's code does. `(nh,)` float64."""

    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    power = 1 << (num_heads.bit_length() - 1)  # the largest power of two not above n
    slopes = geometric(power) + geometric(2 * power)[0::2][: num_heads - power]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(config: Any, position_ids: torch.Tensor) -> AttentionPositions:
    """`"alibi"`: -slope_h · |p_i - p_j| added to the score of query i and key j in head h `(B or 1, nh, T, T)`,
    float32: the paper's linear bias, made symmetric for an encoder that attends both ways. Any positions work
    (those of every `position_mode`); the bias depends on the distance alone."""
    slopes = alibi_slopes(config.num_attention_heads).to(position_ids.device, torch.float32)  # (nh,)
    positions = position_ids.to(torch.float32)  # (B or 1, T): exact integers below 2^24
    distance = (positions[:, :, None] - positions[:, None, :]).abs()  # (B or 1, T, T)
    return AttentionPositions(bias=-slopes[None, :, None, None] * distance[:, None])  # (B or 1, nh, T, T)


def no_attention_positions(config: Any, position_ids: torch.Tensor) -> AttentionPositions:
    """`"sinusoidal"`: the positions are added to the embeddings; attention gets nothing."""
    return AttentionPositions()


def every_layer_encoding(config: Any, position_ids: torch.Tensor) -> AttentionPositions:
    """`"sinusoidal_every_layer"`: PE, which the embeddings add as the paper does, added again to the input of every
    later layer, as the Universal Transformer adds it at every step (Dehghani et al. 2019) `(B or 1, T, d)`."""
    encoding = sinusoidal_position_encoding(position_ids, config.hidden_size, config.position_encoding_base)
    return AttentionPositions(layer_input=encoding)


def untie_first_token(scores: torch.Tensor, row: torch.Tensor, column: torch.Tensor) -> torch.Tensor:
    """A positional term of the scores `(B or 1, nh, T, T)` with the first token, [CLS] (index 0, right padding being
    the convention), untied from positions (TUPE): its row a learned θ₁ per head (`row`, `(nh,)`), its column (other
    tokens attending to it) a learned θ₂ per head (`column`), whatever the positions."""
    first = torch.arange(scores.shape[-1], device=scores.device) == 0  # (T,)
    scores = torch.where(first, column[:, None, None], scores)  # column 0: θ₂
    return torch.where(first[:, None], row[:, None, None], scores)  # row 0: θ₁


class UntiedPositionScores(nn.Module):
    """`"tupe"`: untied positional attention (Ke, He & Liu 2021, "Rethinking Positional Encoding in Language
    Pre-training", TUPE-A) on the paper's encoding. Nothing is added to the input; the scores of head h get a
    positional term of their own, from PE through projections of their own,

        score_h(i, j) = (x_i W_Q)(x_j W_K)ᵀ / √(2·hs) + (PE_i U_Q)(PE_j U_K)ᵀ / √(2·hs)

    (the word term's 1/√(2·hs) is the attention's `scaling`, `attention_scaling`), computed once per forward pass and
    shared by every layer, as TUPE shares it. The first token, [CLS] (index 0, right padding being the convention),
    is untied from positions: its row of the positional term is a learned θ₁ per head and its column (other tokens
    attending to it) a learned θ₂ per head, whatever the positions. U_Q and U_K have no bias, as in the paper's
    formula; θ₁ and θ₂ start at 0."""

    def __init__(self, config: Any):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.hidden_size = config.hidden_size
        self.base = config.position_encoding_base
        self.query = nn.Linear(config.hidden_size, config.hidden_size, bias=False)  # U_Q, every head's
        self.key = nn.Linear(config.hidden_size, config.hidden_size, bias=False)  # U_K
        self.first_token_row = nn.Parameter(torch.zeros(config.num_attention_heads))  # θ₁ (nh,)
        self.first_token_column = nn.Parameter(torch.zeros(config.num_attention_heads))  # θ₂ (nh,)

    def forward(self, position_ids: torch.Tensor) -> AttentionPositions:
        """The positional term of the scores `(B or 1, nh, T, T)` for `position_ids` `(B or 1, T)`, as a bias."""
        batch_size, seq_len = position_ids.shape
        head_dim = self.hidden_size // self.num_heads
        encoding = sinusoidal_position_encoding(position_ids, self.hidden_size, self.base, self.query.weight.dtype)
        query = self.query(encoding).view(batch_size, seq_len, self.num_heads, head_dim).transpose(1, 2)
        key = self.key(encoding).view(batch_size, seq_len, self.num_heads, head_dim).transpose(1, 2)
        scores = query @ key.transpose(-1, -2) * (2 * head_dim) ** -0.5  # (B or 1, nh, T, T)
        return AttentionPositions(bias=untie_first_token(scores, self.first_token_row, self.first_token_column))

    def init_position_weights(self) -> None:
        """θ₁ = θ₂ = 0 (the model's `_init_weights`; U_Q and U_K are initialised as every linear layer)."""
        nn.init.zeros_(self.first_token_row)
        nn.init.zeros_(self.first_token_column)


class RelativePositionScores(nn.Module):
    """`"sinusoidal_relative"`: the paper's encoding of the offset between two tokens, one learned weighting of it
    per head, as a bias on the scores (the global positional bias of Transformer-XL, Dai et al. 2019, term (d), whose
    relative encoding is this sinusoid). Nothing is added to the input:

        score_h(i, j) = q_i·k_j / √hs + w_h·PE(p_j − p_i)

    computed once per forward pass and shared by every layer. It depends on the offset p_j − p_i alone, so that it
    is the same at every position, past the training length too. It is computed without the encoding of any
    offset, through the rotation the paper derives, PE(p_j − p_i) = R(−p_i)·PE(p_j): w_h·PE(p_j − p_i) =
    PE(p_i)ᵀ M_h PE(p_j), with M_h block-diagonal, one block [[b, −a], [a, b]] per frequency (a, b: w_h's weights of
    that frequency's sine and cosine), which commutes with the rotations. w starts as a linear layer's weights
    (normal, `initializer_range`). The first token ([CLS]) stays tied to its position, unlike TUPE's: a classifier
    on it then reads order through attention by offset (untied, the built-in order task learned far slower)."""

    def __init__(self, config: Any):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.base = config.position_encoding_base
        self.initializer_range = config.initializer_range
        self.weight = nn.Parameter(torch.empty(config.num_attention_heads, config.hidden_size))  # w_h (nh, d)
        self.init_position_weights()

    def forward(self, position_ids: torch.Tensor) -> AttentionPositions:
        """The positional term of the scores `(B or 1, nh, T, T)` for `position_ids` `(B or 1, T)`, as a bias."""
        encoding = sinusoidal_position_encoding(position_ids, self.hidden_size, self.base, self.weight.dtype)
        sin, cos = encoding.unflatten(-1, (-1, 2))[:, None].unbind(-1)  # 2 × (B or 1, 1, T, d/2)
        a, b = self.weight.unflatten(-1, (-1, 2))[None, :, None].unbind(-1)  # 2 × (1, nh, 1, d/2)
        rotated = torch.stack((b * sin - a * cos, a * sin + b * cos), dim=-1).flatten(
            -2
        )  # (B or 1, nh, T, d): M_h·PE_j
        return AttentionPositions(bias=encoding[:, None] @ rotated.transpose(-1, -2))  # (B or 1, nh, T, T)

    def init_position_weights(self) -> None:
        """w as a linear layer's weights (the model's `_init_weights`)."""
        nn.init.normal_(self.weight, std=self.initializer_range)


class ScaledEncodingSum(nn.Module):
    """`"scaled_sinusoidal"` (Cramming, Geiping & Goldstein 2023, after FLASH, Hua et al. 2022): the embeddings'
    sum LayerNorm(E[x]·√d + α·PE), the paper's encoding times one learned scalar α, and a LayerNorm on the sum.

    α starts at 1, so that at initialisation the sum the LayerNorm receives is the paper's embedding sum bit for bit
    (`"sinusoidal"`'s h₀); Cramming starts it at 1/√d, beside token embeddings that are not scaled by √d, which gives
    about the same ratio of encoding to token embedding as α = 1 beside E[x]·√d here."""

    def __init__(self, config: Any):
        super().__init__()
        self.position_scale = nn.Parameter(torch.ones(1))  # α
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, tokens: torch.Tensor, encoding: torch.Tensor) -> torch.Tensor:
        """`tokens` E[x]·√d `(B, T, d)`, `encoding` PE `(B or 1, T, d)`: LayerNorm(tokens + α·PE) `(B, T, d)`."""
        return self.norm(tokens + self.position_scale * encoding)

    def init_position_weights(self) -> None:
        """α = 1 (the model's `_init_weights`; the LayerNorm is initialised as every LayerNorm)."""
        nn.init.ones_(self.position_scale)


# ----------------------------------------------------------------------------------------------------------------
# the registry and its checks


@dataclass(frozen=True)
class PositionEncoding:
    """A way positions enter the model: added to the token embeddings (`embeddings`), or what every attention layer
    takes (`attention`, returning `AttentionPositions`), the config fields it reads, and how a model card describes
    it (`card`). Where it has learned parts: `embedding_sum`, the module (built from the config) that adds PE to
    the scaled token embeddings, `sum(tokens, encoding)`, in place of the plain sum; `module`, the module (built once
    by the model) that computes what attention takes from the positions, `module(position_ids)`, in place of
    `attention` (None then). `scaling_factor`: the attention scores q·k are scaled by 1/√(scaling_factor·hs)."""

    attention: Callable[[Any, torch.Tensor], AttentionPositions] | None
    embeddings: bool = False
    parameters: tuple[str, ...] = ()
    card: PositionCard = field(kw_only=True)
    embedding_sum: Callable[[Any], nn.Module] | None = field(default=None, kw_only=True)
    module: Callable[[Any], nn.Module] | None = field(default=None, kw_only=True)
    scaling_factor: int = field(default=1, kw_only=True)


# the definition of the paper's PE as the model cards write it ({base}: the config's position_encoding_base)
PE_DEFINITION = "PE(pos, 2i) = sin(pos / {base}^(2i/d)),   PE(pos, 2i+1) = cos(pos / {base}^(2i/d))"


POSITION_ENCODINGS: dict[str, PositionEncoding] = {
    "sinusoidal": PositionEncoding(
        no_attention_positions,
        embeddings=True,
        parameters=("position_encoding_base",),
        card=PositionCard(
            summary="the fixed sinusoidal position encoding of *Attention Is All You Need* (Vaswani et al., 2017) "
            "added to its token embeddings",
            formula="h₀ = E[x]·√d + PE        " + PE_DEFINITION,
            note="The encoding has no parameters: it is computed from the positions, exactly, in every forward pass.",
            length="The encoding is defined at every position",
            extrapolation="the literature (Press et al., 2022, *Train Short, Test Long*) finds that sinusoidal "
            "encodings extrapolate poorly",
            tags=("sinusoidal-position-encoding",),
            pictures=True,
        ),
    ),
    "scaled_sinusoidal": PositionEncoding(
        no_attention_positions,
        embeddings=True,
        parameters=("position_encoding_base",),
        embedding_sum=ScaledEncodingSum,
        card=PositionCard(
            summary="the sinusoidal encoding of *Attention Is All You Need* (Vaswani et al., 2017) scaled by a "
            "learned scalar and added to its token embeddings, with a LayerNorm on the sum (as in *Cramming*, "
            "Geiping & Goldstein, 2023)",
            formula="h₀ = LayerNorm(E[x]·√d + α·PE)        α learned,   " + PE_DEFINITION,
            note="The encoding itself has no parameters: it is computed from the positions, exactly, in every forward "
            "pass; its scale α (1 at initialisation) and the LayerNorm after the sum are learned.",
            length="The encoding is defined at every position",
            extrapolation="the literature (Press et al., 2022, *Train Short, Test Long*) finds that sinusoidal "
            "encodings added to the embeddings extrapolate poorly",
            tags=("scaled-sinusoidal-position-encoding",),
            pictures=True,
        ),
    ),
    "sinusoidal_every_layer": PositionEncoding(
        every_layer_encoding,
        embeddings=True,
        parameters=("position_encoding_base",),
        card=PositionCard(
            summary="the sinusoidal encoding of *Attention Is All You Need* (Vaswani et al., 2017) added to its token "
            "embeddings and again to the input of every later layer, as the *Universal Transformer* adds it at "
            "every step (Dehghani et al., 2019)",
            formula="h₀ = E[x]·√d + PE,   the input of each later layer: h + PE        " + PE_DEFINITION,
            note="The encoding has no parameters: it is computed from the positions, exactly, once per forward pass, "
            "and added before every layer.",
            length="The encoding is defined at every position",
            extrapolation="the literature (Press et al., 2022, *Train Short, Test Long*) finds that sinusoidal "
            "encodings added to the embeddings extrapolate poorly",
            tags=("sinusoidal-position-encoding-every-layer",),
            pictures=True,
        ),
    ),
    "tupe": PositionEncoding(
        None,
        parameters=("position_encoding_base",),
        module=UntiedPositionScores,
        scaling_factor=2,
        card=PositionCard(
            summary="untied positional attention (TUPE: Ke, He & Liu, 2021, *Rethinking Positional Encoding in "
            "Language Pre-training*) on the sinusoidal encoding of *Attention Is All You Need*, in place of an "
            "encoding added to its embeddings",
            formula="h₀ = E[x]·√d\nattention, head h: score(i, j) = (x_i W_Q)(x_j W_K)ᵀ/√(2·{head}) + (PE_i U_Q)(PE_j "
            "U_K)ᵀ/√(2·{head}), PE(pos, 2i) = sin(pos / {base}^(2i/d)), PE(pos, 2i+1) = cos(pos / {base}^(2i/d)); "
            "the positional term computed once and shared by every layer; the first token's ([CLS]) row and "
            "column of it a learned θ₁ and θ₂ per head",
            note="The encoding has no parameters; its projections U_Q and U_K (one per head) and the [CLS] scalars "
            "θ₁, θ₂ are learned, one set shared by all layers.",
            length="The positional term is defined at every position",
            extrapolation="TUPE was measured at its pre-training length; sinusoidal encodings are reported to "
            "extrapolate poorly (Press et al., 2022, *Train Short, Test Long*)",
            tags=("tupe",),
        ),
    ),
    "sinusoidal_relative": PositionEncoding(
        None,
        parameters=("position_encoding_base",),
        module=RelativePositionScores,
        card=PositionCard(
            summary="the sinusoidal encoding of *Attention Is All You Need* of the offset between two tokens, "
            "weighted per head into a bias on the attention scores (Transformer-XL's positional bias, Dai et al., "
            "2019), in place of an encoding added to its embeddings",
            formula="h₀ = E[x]·√d\nattention, head h: score(i, j) = q_i·k_j/√{head} + w_h·PE(j − i), PE(pos, 2i) = "
            "sin(pos / {base}^(2i/d)), PE(pos, 2i+1) = cos(pos / {base}^(2i/d)); the term computed once and shared "
            "by every layer",
            note="The encoding has no parameters; its weights w_h (one vector per head) are learned, one set shared "
            "by all layers. The term depends on the offset between tokens alone.",
            length="The bias is defined at every offset",
            extrapolation="Transformer-XL's relative encoding was evaluated at attention lengths past its training "
            "length (Dai et al., 2019); attention within a window at inference (`long_input_attention_window`) keeps "
            "every offset in the trained range",
            tags=("sinusoidal-relative-position-bias",),
        ),
    ),
    "rotary": PositionEncoding(
        rotary_cos_sin,
        parameters=("position_encoding_base", "partial_rotary_factor"),
        card=PositionCard(
            summary="rotary position embeddings (Su et al., 2021, *RoFormer*) at the frequencies of the sinusoidal "
            "encoding of *Attention Is All You Need*, in place of an encoding added to its embeddings",
            formula="h₀ = E[x]·√d\nattention: the query and key at position pos rotated pair by pair, (2i, 2i+1) by "
            "pos / {base}^(2i/{rotary}), in {rotary} of a head's {head} dimensions",
            note="The rotation has no parameters: it is computed from the positions in every forward pass, and makes "
            "each attention score depend on the distance between query and key.",
            length="The rotation is defined at every position",
            extrapolation="rotary models are reported to degrade past their training length unless their angles are "
            "rescaled (Chen et al., 2023, *Position Interpolation*)",
            tags=("rotary-position-embedding",),
        ),
    ),
    "alibi": PositionEncoding(
        alibi_bias,
        card=PositionCard(
            summary="ALiBi attention biases (Press et al., 2022, *Train Short, Test Long*) in place of a position "
            "encoding added to its embeddings",
            formula="h₀ = E[x]·√d\nattention: score(i, j) = q_i·k_j / √d_k − m_h·|i − j|, one slope m_h a head (the "
            "paper's geometric sequence), symmetric",
            note="The biases have no parameters: they are computed from the positions in every forward pass.",
            length="The bias is defined at every distance",
            extrapolation="ALiBi was designed to extrapolate past the training length (Press et al., 2022)",
            tags=("alibi",),
        ),
    ),
}

# The encodings' fields of the config and their defaults (the config's signature reads them here, with the modes'),
# and each one's check: a description of the values it takes, or None when the value is valid.
ENCODING_DEFAULTS: dict[str, Any] = {
    "position_encoding": "sinusoidal",
    "position_encoding_base": 10000.0,
    "partial_rotary_factor": 1.0,
}
ENCODING_PARAMETERS: dict[str, Callable[[Any], str | None]] = {
    "position_encoding_base": lambda v: None if is_number(v) and 0 < v < float("inf") else "a positive finite number",
    "partial_rotary_factor": lambda v: None if is_number(v) and 0 < v <= 1 else "a number in (0, 1]",
}


def attention_positions(config: Any, positions: Positions, learned: nn.Module | None = None) -> AttentionPositions:
    """What every attention layer takes from the positions of a forward pass (`select_positions`), by
    `config.position_encoding`: nothing for the sinusoidal encoding (added to the embeddings) or without positions,
    the rotation of `"rotary"`, the bias of `"alibi"`, the encoding again at every layer's input with
    `"sinusoidal_every_layer"`; from `learned`, the model's module of an encoding with learned parts in attention
    (`learned_positions`), what it computes (the positional term of `"tupe"`)."""
    if positions.ids is None:
        return AttentionPositions()
    if learned is not None:
        return learned(positions.ids)
    return POSITION_ENCODINGS[config.position_encoding].attention(config, positions.ids)


def learned_positions(config: Any) -> nn.Module | None:
    """The module of an encoding with learned parts that act in attention (`PositionEncoding.module`, built once by
    the model: `"tupe"`'s projections), or None."""
    module = POSITION_ENCODINGS[config.position_encoding].module
    return None if module is None or config.position_mode == "none" else module(config)


def attention_scaling(config: Any) -> float:
    """The scaling of the attention scores q·k: 1/√hs, the paper's; 1/√(2·hs) for `"tupe"`, whose positional term
    is the other half (`PositionEncoding.scaling_factor`)."""
    head_dim = config.hidden_size // config.num_attention_heads
    return (head_dim * POSITION_ENCODINGS[config.position_encoding].scaling_factor) ** -0.5


def encoding_sum(config: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """How the embeddings add PE to the scaled token embeddings, `sum(tokens, encoding)`: the plain sum
    (`torch.add`, the paper's), or the module of an encoding that learns how (`"scaled_sinusoidal"`)."""
    embedding_sum = POSITION_ENCODINGS[config.position_encoding].embedding_sum
    return torch.add if embedding_sum is None or config.position_mode == "none" else embedding_sum(config)


def adds_to_embeddings(config: Any) -> bool:
    """Whether positions are added to the token embeddings (the paper's encoding), rather than entering attention."""
    return config.position_mode != "none" and POSITION_ENCODINGS[config.position_encoding].embeddings


def position_card(config: Any) -> PositionCard:
    """How a model card describes the positions of `config`: the card of its `position_mode` when the mode has one
    (`"none"`), else that of its `position_encoding`, the formula filled in with the config's values."""
    card = POSITION_MODES[config.position_mode].card or POSITION_ENCODINGS[config.position_encoding].card
    values = dict(vars(config), base=f"{config.position_encoding_base:g}", rotary=rotary_dim(config))
    values["head"] = config.hidden_size // config.num_attention_heads
    return replace(card, formula=card.formula.format_map(values))
