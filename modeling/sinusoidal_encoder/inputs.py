"""The checks of what a forward pass is given, apart from the architecture (`modeling_sinusoidal_encoder.py`): shapes
that would broadcast silently into wrong results are errors naming the argument, and `output_hidden_states` is read
the ways transformers' models take it.

This file is copied as-is into Hub repositories with the model: it imports only torch.
"""

from __future__ import annotations

import torch


def require_one_of(input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> None:
    """Raise a `ValueError` unless exactly one of `input_ids` and `inputs_embeds` is given."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("Pass exactly one of `input_ids` and `inputs_embeds`.")


def check_inputs(
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    extra: dict,
) -> None:
    """Raise a `ValueError` naming the argument for inputs of the wrong shape (see `SinusoidalEncoderModel.forward`),
    none or both of `input_ids` and `inputs_embeds`, no tokens, or a `token_type_ids` in `extra` (this model has no
    segment embeddings)."""
    require_one_of(input_ids, inputs_embeds)
    if extra.get("token_type_ids") is not None:
        raise ValueError(
            "`token_type_ids` was passed, but this model has no segment embeddings. Drop it (with a tokenizer, set "
            "`model_input_names=['input_ids', 'attention_mask']`)."
        )
    if input_ids is not None and input_ids.dim() != 2:
        raise ValueError(f"`input_ids` must have shape (batch_size, seq_len), got {tuple(input_ids.shape)}.")
    if inputs_embeds is not None and inputs_embeds.dim() != 3:
        raise ValueError(
            f"`inputs_embeds` must have shape (batch_size, seq_len, hidden_size), got {tuple(inputs_embeds.shape)}."
        )
    name, given = ("input_ids", input_ids) if input_ids is not None else ("inputs_embeds", inputs_embeds)
    batch_size, seq_len = given.shape[:2]
    if seq_len == 0:
        raise ValueError(f"`{name}` has no tokens (shape {tuple(given.shape)}): every sequence needs at least one.")
    if attention_mask is not None:
        shape = tuple(attention_mask.shape)
        if attention_mask.dim() == 2:
            ok = shape == (batch_size, seq_len)
        else:
            ok = (
                attention_mask.dim() == 4
                and shape[0] in (1, batch_size)
                and shape[1] == 1
                and shape[2:] == (seq_len, seq_len)
            )
        if not ok:
            raise ValueError(
                f"`attention_mask` has shape {shape}, but the input is (batch_size={batch_size}, seq_len={seq_len}): "
                f"expected ({batch_size}, {seq_len}) or a 4-D mask ({batch_size}, 1, {seq_len}, {seq_len})."
            )
    if position_ids is not None and (
        position_ids.dim() != 2 or position_ids.shape[0] not in (1, batch_size) or position_ids.shape[1] != seq_len
    ):
        raise ValueError(
            f"`position_ids` has shape {tuple(position_ids.shape)}, "
            f"expected ({batch_size}, {seq_len}) or (1, {seq_len})."
        )


def selected_hidden_states(output_hidden_states: bool | int | list[int] | None, num_layers: int) -> set[int] | None:
    """The indices of the hidden states (0…num_layers) that `output_hidden_states` asks for, as transformers' models
    take it: a flag (all or none), an index, or a list of indices (negative ones count from the end; out-of-range
    ones select nothing). None when no hidden state is asked for (False, None or an empty list)."""
    if isinstance(output_hidden_states, bool) or output_hidden_states is None:
        return set(range(num_layers + 1)) if output_hidden_states else None
    selected = [output_hidden_states] if isinstance(output_hidden_states, int) else list(output_hidden_states)
    if not selected:
        return None
    count = num_layers + 1
    return {index % count for index in selected if -count <= index < count}
