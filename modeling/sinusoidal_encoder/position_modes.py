"""Which position each token gets: the position modes (`position_mode`), one function each, registered in
`POSITION_MODES` with the config fields it reads (its parameters). The model asks `select_positions` once per forward
pass; how the positions then enter the model is `positions.py`'s (`position_encoding`), which also checks the fields
of both together. A mode is a function of a `PositionRequest` returning `Positions`; adding one means its function
and its entry here, its values in the config's docstring, and tests.

This file is copied as-is into Hub repositories with the model: it imports only the standard library and torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch


class Positions(NamedTuple):
    """What a position mode answers. `ids`: the positions `(B, T)` or `(1, T)` (shared by the batch); None when the
    model encodes no position. `num_positions`: when every position lies in 0…num_positions-1, that bound (the
    embeddings then compute the encoding of those rows once), else None."""

    ids: torch.Tensor | None
    num_positions: int | None


@dataclass(frozen=True)
class PositionRequest:
    """What a position mode is asked: the batch's shape, its 2-D padding mask (1 = real token) if any, the device,
    whether the model is training, and the config (for the mode's parameters)."""

    config: Any
    batch_size: int
    seq_len: int
    attention_mask: torch.Tensor | None
    device: torch.device
    training: bool

    def real_tokens(self) -> torch.Tensor:
        """`(B, T)` booleans: the real tokens (every token without a 2-D mask)."""
        mask = self.attention_mask
        if mask is not None and mask.dim() == 2:
            return mask.bool()
        return torch.ones(self.batch_size, self.seq_len, dtype=torch.bool, device=self.device)


# ----------------------------------------------------------------------------------------------------------------
# the modes: each takes a PositionRequest and returns Positions


def default_positions(seq_len: int, device: torch.device) -> Positions:
    """0…T-1, shared by the batch `(1, T)`: the paper's positions, and those of any input given without them."""
    return Positions(torch.arange(seq_len, device=device).unsqueeze(0), seq_len)


def consecutive_positions(request: PositionRequest) -> Positions:
    """`"consecutive"`, the paper's: 0…T-1 for every sequence `(1, T)` (right padding is the convention)."""
    return default_positions(request.seq_len, request.device)


def random_offset_positions(request: PositionRequest) -> Positions:
    """`"random_offset"`: in training, each sequence's positions start at an offset drawn uniformly from
    0…`max_position_offset` with the global RNG (like dropout, so that seeded runs and accelerate's checkpoints repeat
    it) `(B, T)`; in evaluation, 0…T-1 as `"consecutive"`."""
    positions = default_positions(request.seq_len, request.device)
    if not request.training:
        return positions
    max_offset = request.config.max_position_offset
    starts = torch.randint(0, max_offset + 1, (request.batch_size, 1), device=request.device)  # (B, 1)
    return Positions(positions.ids + starts, request.seq_len + max_offset)  # (B, T)


def ordered_subset_positions(request: PositionRequest) -> Positions:
    """`"ordered_subset"`, the randomized encoding of Ruoss et al. (2023): for each sequence of n real tokens, n
    distinct positions drawn uniformly from 0…L-1 (`position_range`) and sorted, given to the real tokens in order
    (padding gets 0); in evaluation with `position_inference="evenly_spaced"`, ⌊k·L/n⌋ for the k-th of n. `(B, T)`."""
    span, seq_len = request.config.position_range, request.seq_len
    real, lengths, rank = _ranked_real_tokens(request)
    if not request.training and request.config.position_inference == "evenly_spaced":
        spaced = rank * span // lengths.clamp(min=1).unsqueeze(-1)  # (B, T): ⌊k·L/n⌋, distinct since n ≤ L
        return Positions(spaced.masked_fill(~real, 0), span)
    if request.training:  # the global RNG, like dropout: seeded by set_seed, restored by accelerate checkpoints
        keys = torch.rand(request.batch_size, span, device=request.device)  # (B, L)
    else:  # one fixed draw per length: the same input gets the same positions in any batch
        keys = _evaluation_draw(request.config, lengths, (request.batch_size, span)).to(request.device)  # (B, L)
    # the n largest keys of a row are a uniform n-subset of 0…L-1; the first n of the top T are those n
    chosen = keys.topk(seq_len, dim=-1).indices  # (B, T)
    beyond = torch.arange(seq_len, device=request.device) >= lengths.unsqueeze(-1)  # (B, T)
    ordered = chosen.masked_fill(beyond, span).sort(dim=-1).values  # (B, T): the n sorted positions, then L…
    return Positions(ordered.gather(-1, rank).masked_fill(~real, 0), span)  # (B, T)


def stratified_positions(request: PositionRequest) -> Positions:
    """`"stratified"`: 0…L-1 cut into n equal cells, [⌊k·L/n⌋, ⌊(k+1)·L/n⌋) for k < n; the k-th of n real tokens
    gets a position drawn uniformly from the k-th cell (padding gets 0), the same RNGs as `"ordered_subset"`. In
    evaluation with `position_inference="evenly_spaced"`, the middle of its cell. `(B, T)`."""
    span = request.config.position_range
    real, lengths, rank = _ranked_real_tokens(request)
    n = lengths.clamp(min=1).unsqueeze(-1)  # (B, 1)
    start = rank * span // n  # (B, T): ⌊k·L/n⌋
    width = (rank + 1) * span // n - start  # (B, T): ≥ 1 since n ≤ L
    if not request.training and request.config.position_inference == "evenly_spaced":
        return Positions((start + width // 2).masked_fill(~real, 0), span)  # (B, T): the middle of each cell
    if request.training:  # the global RNG, like dropout: seeded by set_seed, restored by accelerate checkpoints
        uniform = torch.rand(request.batch_size, request.seq_len, device=request.device)  # (B, T)
    else:  # one fixed draw per length, read by rank: the same input gets the same positions in any batch
        draw = _evaluation_draw(request.config, lengths, (request.batch_size, span))  # (B, L)
        uniform = draw.to(request.device).gather(-1, rank)  # (B, T)
    offset = (uniform * width).long().clamp(max=width - 1)  # (B, T): uniform over the cell
    return Positions((start + offset).masked_fill(~real, 0), span)  # (B, T)


def no_positions(request: PositionRequest) -> Positions:
    """`"none"`: no position is encoded (token embeddings alone): the ablation that shows what positions are for."""
    return Positions(None, None)


def _ranked_real_tokens(request: PositionRequest) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For the drawing modes: the real tokens `(B, T)`, how many per sequence `(B,)`, and each token's index among
    its sequence's real tokens `(B, T)` (0 for padding)."""
    span = request.config.position_range
    if request.seq_len > span:
        raise ValueError(
            f"The input has {request.seq_len} tokens, more than `position_range` ({span}) positions to draw them "
            "from: raise `position_range` in the config."
        )
    real = request.real_tokens()  # (B, T)
    rank = (real.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
    return real, real.sum(-1), rank


def _evaluation_draw(config: Any, lengths: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """Uniform numbers of `shape` (B, K) for evaluation mode, on the CPU: each row from a generator seeded by
    `position_seed` and the row's number of real tokens, so a sequence's draw does not depend on its batch."""
    uniform = torch.empty(shape)  # (B, K)
    for length in lengths.unique().tolist():
        generator = torch.Generator().manual_seed(config.position_seed * 1_000_003 + length)
        uniform[(lengths == length).cpu()] = torch.rand(shape[1], generator=generator)
    return uniform


# ----------------------------------------------------------------------------------------------------------------
# the registry


@dataclass(frozen=True)
class PositionCard:
    """How a model card describes a way positions enter the model. `summary` follows "A Transformer encoder with";
    `formula` is the model's first formula, in which `{base}` (`position_encoding_base`), `{head}` (the head size),
    `{rotary}` (`rotary_dim`) and `{field}` for any config field are filled in (`str.format`: other braces
    doubled); `note` says what has parameters;
    `length` why the model runs past its training length (followed by ", so the model runs on inputs longer than
    ..."), `extrapolation` what the literature says of that (after "and"); `tags` are the card's Hub tags, its own;
    `pictures` whether the card shows the pictures of the encoding PE (heatmap, similarity of positions)."""

    summary: str
    formula: str
    note: str
    length: str
    extrapolation: str
    tags: tuple[str, ...]
    pictures: bool = False


@dataclass(frozen=True)
class PositionMode:
    """A position mode: its function and the config fields it reads. `card`: how a model card describes a model of
    this mode when the mode decides it alone (`"none"`: no position to encode); None leaves it to the card of the
    `position_encoding`. `doc`: what the mode does, as the config's docstring lists it."""

    select: Callable[[PositionRequest], Positions]
    parameters: tuple[str, ...] = ()
    card: PositionCard | None = None
    doc: str = field(kw_only=True)


_DRAWN = ("position_range", "position_seed", "position_inference")

POSITION_MODES: dict[str, PositionMode] = {
    "consecutive": PositionMode(
        consecutive_positions,
        doc="0…T-1, the paper's.",
    ),
    "random_offset": PositionMode(
        random_offset_positions,
        ("max_position_offset",),
        doc="in training, each sequence's positions start at an offset drawn uniformly from "
        "0…`max_position_offset`, so that the model meets positions beyond its training length without training "
        "on longer sequences; evaluation and inference start at 0.",
    ),
    "ordered_subset": PositionMode(
        ordered_subset_positions,
        _DRAWN,
        doc='the randomized encoding of Ruoss et al. (2023, "Randomized Positional Encodings Boost Length '
        'Generalization of Transformers"): each sequence of n real tokens gets n distinct positions drawn '
        "uniformly from 0…`position_range`-1 and sorted, so that every position up to the range is seen in "
        "training, however short the sequences. As in the paper this holds in training *and* at inference: in "
        "training the draw uses the global RNG (seeded like dropout, restored by accelerate checkpoints); in "
        "evaluation mode a generator seeded by `position_seed` and the sequence's length, so the same input "
        "always gets the same positions, whatever the batch.",
    ),
    "stratified": PositionMode(
        stratified_positions,
        _DRAWN,
        doc="a variant that keeps each token's rank in its position: the range is cut into n equal cells, [⌊k·L/n⌋, "
        "⌊(k+1)·L/n⌋), and the k-th real token's position is drawn uniformly from the k-th cell (the same RNGs "
        'as `"ordered_subset"`), so positions never stray from k·L/n by a cell or more, where an ordered '
        'subset\'s stray by about √n/2 cells. Best with `position_inference="evenly_spaced"`.',
    ),
    "none": PositionMode(
        no_positions,
        doc="no position encoding at all (token embeddings alone; `position_ids` are ignored): the ablation that "
        "shows what the encoding is for.",
        card=PositionCard(
            summary='no position information (`position_mode="none"`, an ablation)',
            formula="h₀ = E[x]·√d        (no position encoding)",
            note="Without positions the model cannot tell one order of the same tokens from another.",
            length="Nothing in the model depends on the position",
            extrapolation="a model without positions cannot use word order at any length",
            tags=("no-position-encoding",),
        ),
    ),
}


# The modes' fields of the config and their defaults (the config's signature reads them here), and each one's check:
# a description of the values it takes, or None when the value is valid (the config's `check_position_config`).
MODE_DEFAULTS: dict[str, Any] = {
    "position_mode": "consecutive",
    "max_position_offset": 0,
    "position_range": 2048,
    "position_seed": 0,
    "position_inference": "draw",
}
MODE_PARAMETERS: dict[str, Callable[[Any], str | None]] = {
    "max_position_offset": lambda v: None if is_int(v) and v >= 0 else "a non-negative integer",
    "position_range": lambda v: None if is_int(v) and v > 0 else "a positive integer",
    "position_seed": lambda v: None if is_int(v) and v >= 0 else "a non-negative integer",
    "position_inference": lambda v: None if v in ("draw", "evenly_spaced") else "one of ['draw', 'evenly_spaced']",
}


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def select_positions(
    config: Any,
    position_ids: torch.Tensor | None,
    batch_size: int,
    seq_len: int,
    attention_mask: torch.Tensor | None,
    device: torch.device,
    training: bool,
) -> Positions:
    """The positions of a forward pass: the caller's `position_ids` when given (any position is valid; the mode
    `"none"` ignores them), else those of `config.position_mode`."""
    if config.position_mode == "none":
        return Positions(None, None)
    if position_ids is not None:
        return Positions(position_ids, None)
    request = PositionRequest(config, batch_size, seq_len, attention_mask, device, training)
    return POSITION_MODES[config.position_mode].select(request)
