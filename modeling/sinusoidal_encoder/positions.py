"""Which position each token gets: the position modes of `SinusoidalEncoderConfig.position_mode`, in one place.

The model asks `select_positions` once per forward pass; the embeddings turn the answer into the sinusoidal
encoding (`sinusoidal_position_encoding`). Each mode is one function below, registered in `POSITION_MODES` with the
config fields it reads (its parameters), which `check_position_config` checks together. Adding a mode means: its
function and its entry here, its values in the config's docstring, and tests.

This file is copied as-is into Hub repositories with the model: it imports only torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
    device = position_ids.device
    if device.type == "mps":  # MPS has no float64: compute on the CPU, whose result is then copied over
        position_ids = position_ids.cpu()
    exponents = torch.arange(0, dim, 2, dtype=torch.float64, device=position_ids.device) / dim  # (dim/2,) = 2i/d
    inv_freq = torch.pow(float(base), -exponents)  # (dim/2,)
    angles = position_ids.to(torch.float64).unsqueeze(-1) * inv_freq  # (*, dim/2)
    encoding = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (*, dim/2, 2): [sin, cos] per frequency
    return encoding.flatten(-2).to(device=device, dtype=dtype)  # (*, dim)


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
# the registry and its checks


@dataclass(frozen=True)
class PositionMode:
    """A position mode: its function and the config fields it reads."""

    select: Callable[[PositionRequest], Positions]
    parameters: tuple[str, ...] = ()


_DRAWN = ("position_range", "position_seed", "position_inference")

POSITION_MODES: dict[str, PositionMode] = {
    "consecutive": PositionMode(consecutive_positions),
    "random_offset": PositionMode(random_offset_positions, ("max_position_offset",)),
    "ordered_subset": PositionMode(ordered_subset_positions, _DRAWN),
    "stratified": PositionMode(stratified_positions, _DRAWN),
    "none": PositionMode(no_positions),
}

# The position fields of the config and their defaults (the config's signature reads them here). A parameter at its
# default counts as "not set" for the modes that do not read it.
POSITION_DEFAULTS: dict[str, Any] = {
    "position_mode": "consecutive",
    "max_position_offset": 0,
    "position_range": 2048,
    "position_seed": 0,
    "position_inference": "draw",
}

# Each parameter's check: a description of the values it takes, or None when the value is valid.
POSITION_PARAMETERS: dict[str, Callable[[Any], str | None]] = {
    "max_position_offset": lambda v: None if _is_int(v) and v >= 0 else "a non-negative integer",
    "position_range": lambda v: None if _is_int(v) and v > 0 else "a positive integer",
    "position_seed": lambda v: None if _is_int(v) and v >= 0 else "a non-negative integer",
    "position_inference": lambda v: None if v in ("draw", "evenly_spaced") else "one of ['draw', 'evenly_spaced']",
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_position_config(config: Any) -> None:
    """Raise a `ValueError` naming the field when `position_mode` or its parameters cannot work together: an unknown
    mode, an invalid parameter value, a mode that needs a parameter left unset (`"random_offset"` needs
    `max_position_offset` ≥ 1), or a parameter set away from its default for a mode that does not read it."""
    mode = POSITION_MODES.get(config.position_mode)
    if mode is None:
        raise ValueError(f"`position_mode` must be one of {list(POSITION_MODES)}, got {config.position_mode!r}.")
    for name, check in POSITION_PARAMETERS.items():
        value, default = getattr(config, name), POSITION_DEFAULTS[name]
        problem = check(value)
        if problem is not None:
            raise ValueError(f"`{name}` must be {problem}, got {value!r}.")
        if name not in mode.parameters and value != default:
            readers = [mode_name for mode_name, other in POSITION_MODES.items() if name in other.parameters]
            raise ValueError(
                f"`{name}={value!r}` is a parameter of position_mode {readers}, not of "
                f"position_mode={config.position_mode!r}: leave it at {default!r} or change `position_mode`."
            )
    if config.position_mode == "random_offset" and config.max_position_offset < 1:
        raise ValueError("`position_mode='random_offset'` needs `max_position_offset` of at least 1.")


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


# The parameters of the drawing modes as configs saved before `position_mode` existed named them.
_LEGACY_PARAMETERS = {
    "position_sampling_range": "position_range",
    "position_sampling_seed": "position_seed",
    "position_sampling_inference": "position_inference",
}


def pop_legacy_position_fields(kwargs: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """Remove from config keyword arguments the fields of configs saved before `position_mode` existed
    (`position_sampling`, `random_position_offset`, `position_sampling_range/_seed/_inference`), and return what they
    mean now: `position_mode` and its parameters. A folder saved before loads as it was trained. Empty when there are
    none; an error when `given`, the new fields, are not all at their defaults as well."""
    if not any(key in kwargs for key in ("position_sampling", "random_position_offset", *_LEGACY_PARAMETERS)):
        return {}
    if any(given[name] != default for name, default in POSITION_DEFAULTS.items()):
        raise ValueError(
            "The older position fields (`position_sampling`, `random_position_offset`, `position_sampling_range`, "
            "...) cannot be mixed with `position_mode` and its parameters: use only the new ones."
        )
    sampling = kwargs.pop("position_sampling", "consecutive")
    offset = kwargs.pop("random_position_offset", 0) or 0
    legacy = {new: kwargs.pop(old) for old, new in _LEGACY_PARAMETERS.items() if old in kwargs}
    if sampling == "consecutive":
        return {"position_mode": "random_offset", "max_position_offset": offset} if offset else {}
    return {"position_mode": sampling, **legacy}
