"""The model's fast paths and compatibility code, apart from its architecture (`modeling_sinusoidal_encoder.py`).

Each gives the results of the plain code it stands for (the tests hold them to it) and pays on some machine or
release:

- running on the real tokens alone (`unpad_inputs`): a padded batch packed into one row `(1, N)` and attended within
  each sequence, by flash attention's variable-length kernel, torch's own (`varlen_attn`, CUDA), one call per
  sequence (CPUs), or one call on a padded batch (elsewhere);
- the written-out attention in bf16 CPU training of short sequences, where it is faster than sdpa's kernel;
- in-place activations and residual sums, one activation-sized buffer fewer each;
- loaded weights copied to 64-byte aligned memory, where CPU kernels round as they did before saving;
- the attention masks in the forms transformers' attention implementations take (booleans, additive floats, a
  padding mask for flash attention), and what flash attention refuses;
- transformers 4.x, which lacks `create_bidirectional_mask`.

This file is copied as-is into Hub repositories with the model: it imports only the standard library, torch, public
transformers API and its siblings `positions.py` and `position_modes.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from itertools import pairwise

import torch
import transformers
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from .configuration_sinusoidal_encoder import AUTO_MAP
from .position_modes import Positions
from .positions import AttentionPositions

try:  # transformers >= 4.58
    from transformers.masking_utils import create_bidirectional_mask
except ImportError:  # transformers 4.57 and older: `bidirectional_mask` builds the same masks itself
    create_bidirectional_mask = None

try:  # torch >= 2.10: a variable-length flash attention kernel (CUDA) that takes packed sequences as they are
    from torch.nn.attention.varlen import varlen_attn
except ImportError:
    varlen_attn = None


def _flash_varlen_forward() -> Callable | None:
    """torch's flash attention forward on packed sequences, `aten::_flash_attention_forward`: the kernel that
    `varlen_attn` calls with dropout fixed at 0, here for training with attention dropout (its backward replays the
    dropout mask). None where torch lacks it or its leading arguments are not those called here."""
    try:
        operator = torch.ops.aten._flash_attention_forward
        arguments = [argument.name for argument in operator.default._schema.arguments]
    except (AttributeError, RuntimeError):
        return None
    leading = ["query", "key", "value", "cum_seq_q", "cum_seq_k", "max_q", "max_k", "dropout_p", "is_causal"]
    return operator if arguments[: len(leading)] == leading and "return_debug_mask" in arguments else None


flash_varlen_forward = _flash_varlen_forward()


# ----------------------------------------------------------------------------------------------------------------
# attention implementations and their masks


def is_flash(attn_implementation: str | None) -> bool:
    """flash_attention_2, flash_attention_3, and Hub flash kernels: the implementations that take packed sequences."""
    return attn_implementation is not None and "flash" in attn_implementation


def check_flash_takes(config, score_bias: torch.Tensor | None, window: int | None) -> None:
    """Raise a `ValueError` when flash attention is asked to take what its kernels cannot: a bias on the attention
    scores (`score_bias`, as `"alibi"` adds) or a long-input window (`window`, `long_input_attention_window`)."""
    if not is_flash(config._attn_implementation):
        return
    if score_bias is not None:
        raise ValueError(
            f"`position_encoding={config.position_encoding!r}` adds a bias to the attention scores, which "
            "flash attention cannot take: load the model with attn_implementation='sdpa' or 'eager'."
        )
    if window is not None:
        raise ValueError(
            "`long_input_attention_window` is not available with flash attention: load the model with "
            "attn_implementation='sdpa' or 'eager', or set the window to None."
        )


def bidirectional_mask(config, attention_mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    """The padding mask in the form the attention implementation takes: None when nothing is masked, `(B, T)` for
    flash attention, `(B, 1, T, T)` booleans (True = attend) for sdpa, additive floats for eager. transformers'
    `create_bidirectional_mask` where it exists; the same masks built here on older transformers."""
    if create_bidirectional_mask is not None:
        return create_bidirectional_mask(config=config, inputs_embeds=like, attention_mask=attention_mask)
    if attention_mask is None or attention_mask.dim() == 4:
        return attention_mask
    keep = attention_mask.bool()  # (B, T)
    if keep.all():
        return None
    if is_flash(config._attn_implementation):
        return keep
    return padding_mask(config, keep, like)


def padding_mask(config, keep: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The places that hold tokens `keep` `(B, T)` as the mask of sdpa (`(B, 1, T, T)` booleans, True = attend) or
    of eager attention (additive floats of `like`'s dtype), without asking whether anything is masked (which would
    wait for the device)."""
    batch_size, seq_len = keep.shape
    keep = keep[:, None, None, :].expand(batch_size, 1, seq_len, seq_len)  # (B, 1, T, T): every query, same keys
    if config._attn_implementation == "eager":
        return torch.zeros(keep.shape, dtype=like.dtype, device=like.device).masked_fill(
            ~keep, torch.finfo(like.dtype).min
        )
    return keep


def restrict_to_window(
    attention_mask: torch.Tensor | None, window: int, seq_len: int, device: torch.device
) -> torch.Tensor:
    """`attention_mask` (None, booleans or additive floats of shape `(B or 1, 1, T, T)`) with every pair of tokens
    `window` or more positions apart masked out as well."""
    positions = torch.arange(seq_len, device=device)
    band = ((positions[:, None] - positions[None, :]).abs() < window)[None, None]  # (1, 1, T, T): True = attend
    if attention_mask is None:
        return band
    if attention_mask.dtype == torch.bool:
        return attention_mask & band
    return attention_mask.masked_fill(~band, torch.finfo(attention_mask.dtype).min)


def add_score_bias(attention_mask: torch.Tensor | None, bias: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`attention_mask` (None, booleans or additive floats `(B or 1, 1, T, T)`, as `bidirectional_mask` builds it
    for sdpa and eager attention) as additive floats of `dtype` with `bias` `(B or 1, nh, T, T)` added: one mask of
    shape `(B or 1, nh, T, T)` that both take."""
    bias = bias.to(dtype)
    if attention_mask is None:
        return bias
    if attention_mask.dtype == torch.bool:
        return torch.where(attention_mask, bias, torch.finfo(dtype).min)  # (B or 1, nh, T, T)
    return attention_mask.to(dtype) + bias


def written_out_is_faster(attn_implementation: str | None, query: torch.Tensor) -> bool:
    """Whether sdpa hands this call to the written-out attention instead: in bf16 on the CPU, with autograd, for
    sequences of at most 128 tokens, where the backward of sdpa's CPU kernel costs more than the two matrix products
    it replaces. The result is the same up to rounding; longer sequences, and inference, keep the kernel, which is
    faster there and never builds the `T × T` scores."""
    return (
        attn_implementation == "sdpa"
        and query.device.type == "cpu"
        and query.dtype == torch.bfloat16
        and query.requires_grad
        and torch.is_grad_enabled()
        and query.shape[-2] <= 128
    )


# ----------------------------------------------------------------------------------------------------------------
# the real tokens alone: a padded batch packed into one row


def runs_unpadded(config, attention_mask: torch.Tensor | None, needs_padded_layout: bool) -> bool:
    """Whether a forward pass runs on the real tokens only (`config.unpad_inputs`): a 2-D mask that masks
    something, an attention implementation that takes packed sequences, and nothing that needs the padded layout
    (`needs_padded_layout`: the caller's windowed long input, bias on the scores, returned attentions or hidden
    states; or a compiled graph, whose shapes cannot depend on data)."""
    if not config.unpad_inputs or attention_mask is None or attention_mask.dim() != 2:
        return False
    implementation = config._attn_implementation
    if implementation not in ("sdpa", "eager") and not is_flash(implementation):
        return False
    if needs_padded_layout:
        return False
    if torch.compiler.is_compiling():
        return False
    return not attention_mask.bool().all()


def forward_unpadded(
    model: nn.Module,
    input_ids: torch.LongTensor | None,
    attention_mask: torch.Tensor,
    positions: Positions,
    in_attention: AttentionPositions,
    inputs_embeds: torch.Tensor | None,
    **kwargs,
) -> BaseModelOutput:
    """`model` (a `SinusoidalEncoderModel`) on the real tokens alone: ids (or embeddings) and positions packed
    together into one row `(1, N)`, the layers run with transformers' variable-length arguments (`cu_seq_lens_q/k`,
    `max_length_q/k`), and the last hidden state laid out as the input again `(B, T, d)`, zeros at padding."""
    keep = attention_mask.bool()  # (B, T)
    batch_size, seq_len = keep.shape
    indices = keep.flatten().nonzero().squeeze(-1)  # (N,): real tokens in the flattened batch

    def packed(tensor: torch.Tensor | None) -> torch.Tensor | None:
        # (B, T, ...) -> (1, N, ...)
        return None if tensor is None else tensor.reshape(batch_size * seq_len, *tensor.shape[2:])[indices][None]

    lengths = keep.sum(dim=-1, dtype=torch.int32)  # (B,)
    cu_seq_lens = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))  # (B+1,)
    max_length = int(lengths.max())
    hidden_states = model.embeddings(
        input_ids=packed(input_ids),
        position_ids=None if positions.ids is None else packed(positions.ids.expand(batch_size, seq_len)),
        inputs_embeds=packed(inputs_embeds),
        num_positions=positions.num_positions,
    )  # (1, N, d)
    if in_attention.rotary is not None:  # (B or 1, T, r/2) -> (1, N, r/2)
        kwargs["position_embeddings"] = tuple(
            packed(part.expand(batch_size, seq_len, -1)) for part in in_attention.rotary
        )
    if in_attention.layer_input is not None:  # (B or 1, T, d) -> (1, N, d)
        kwargs["layer_positions"] = packed(in_attention.layer_input.expand(batch_size, seq_len, -1))
    outputs = model.encoder(
        hidden_states,
        None,
        cu_seq_lens_q=cu_seq_lens,
        cu_seq_lens_k=cu_seq_lens,
        max_length_q=max_length,
        max_length_k=max_length,
        **kwargs,
    )
    last = outputs.last_hidden_state[0]  # (N, d)
    padded = last.new_zeros(batch_size * seq_len, last.shape[-1]).index_copy(0, indices, last)  # (B*T, d)
    return BaseModelOutput(last_hidden_state=padded.view(batch_size, seq_len, -1))  # (B, T, d)


def packed_attention(attention: nn.Module, qkv: torch.Tensor, attention_interface: Callable, **kwargs) -> torch.Tensor:
    """Attention within each sequence of packed tokens `(1, N, 3d)`, for `attention` (a
    `SinusoidalEncoderSelfAttention`, whose `attend` makes the call). Flash attention's variable-length kernel takes
    them as they are, and so does torch's own (`varlen_attn`, or in training with attention dropout the flash kernel
    it calls) for sdpa on a CUDA GPU in fp16 or bf16; on the CPU, sdpa and eager attention run one unmasked call per
    sequence (no work on padding, which a batch of mixed lengths is mostly made of); elsewhere the sequences are laid
    out as a padded batch `(B, max_length)` with its mask. `kwargs` holds the sequence boundaries `cu_seq_lens_q`
    `(B+1,)` and the longest length `max_length_q`. Returns `(1, N, d)`."""
    config = attention.config
    cu_seq_lens = kwargs.pop("cu_seq_lens_q")
    max_length = kwargs.pop("max_length_q")
    for name in ("cu_seq_lens_k", "max_length_k"):  # self-attention: the keys are the queries' tokens
        kwargs.pop(name, None)
    if qkv.shape[1] == 0:  # an all-padding batch: no token attends to anything
        return qkv[..., : config.hidden_size]  # (1, 0, d)
    if is_flash(config._attn_implementation):
        lengths = {"cu_seq_lens_q": cu_seq_lens, "cu_seq_lens_k": cu_seq_lens}
        lengths.update(max_length_q=max_length, max_length_k=max_length)
        return attention.attend(qkv, None, attention_interface, **lengths, **kwargs)[0]  # (1, N, d)
    dropout = attention.attention_dropout if attention.training else 0.0
    if uses_varlen_kernel(config._attn_implementation, qkv, attention.head_dim, dropout):
        heads = (attention.num_heads, attention.head_dim)
        return varlen_attention(qkv, cu_seq_lens, max_length, *heads, dropout=dropout)  # (1, N, d)
    if attends_per_sequence(qkv.device):
        outputs = [
            attention.attend(qkv[:, start:end], None, attention_interface, **kwargs)[0]  # (1, L, d)
            for start, end in pairwise(cu_seq_lens.tolist())
            if end > start
        ]
        return torch.cat(outputs, dim=1)  # (1, N, d)
    padded, keep = packed_to_padded(qkv[0], cu_seq_lens, max_length)  # (B, L, 3d), (B, L)
    output = attention.attend(padded, padding_mask(config, keep, padded), attention_interface, **kwargs)[0]
    places = padded_places(cu_seq_lens, qkv.shape[1], max_length)  # (N,)
    return output.flatten(0, 1)[places].unsqueeze(0)  # (B, L, d) -> (B*L, d) -> (1, N, d)


def uses_varlen_kernel(attn_implementation: str | None, qkv: torch.Tensor, head_dim: int, dropout: float) -> bool:
    """Whether packed sequences go to torch's variable-length kernel: sdpa asked for, torch with `varlen_attn` (and,
    with attention dropout, the flash kernel it calls, which takes dropout), a CUDA GPU that runs flash attention
    (compute capability 8.0 or newer), fp16 or bf16 and a head size the kernel takes. Otherwise the packed path lays
    the sequences out as a padded batch for sdpa."""
    return (
        attn_implementation == "sdpa"
        and varlen_attn is not None
        and (dropout == 0.0 or flash_varlen_forward is not None)
        and qkv.dtype in (torch.float16, torch.bfloat16)
        and head_dim % 8 == 0
        and head_dim <= 256
        and runs_flash_attention(qkv.device)
    )


def runs_flash_attention(device: torch.device) -> bool:
    """A CUDA device of compute capability 8.0 (Ampere) or newer: where torch's flash attention kernels run."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


def varlen_attention(
    qkv: torch.Tensor, cu_seq_lens: torch.Tensor, max_length: int, num_heads: int, head_dim: int, dropout: float = 0.0
) -> torch.Tensor:
    """Packed tokens `(1, N, 3d)` attended within the sequences that `cu_seq_lens` `(B+1,)` delimits by torch's
    variable-length kernel, scaled by 1/√hs (its default), with `dropout` on the attention probabilities (the flash
    kernel itself: `varlen_attn` has none). Returns `(1, N, d)`."""
    tokens = qkv.shape[1]
    qkv = qkv.view(tokens, 3, num_heads, head_dim)  # (N, 3, nh, hs)
    query, key, value = qkv.unbind(1)  # 3 × (N, nh, hs)
    if dropout == 0.0:
        output = varlen_attn(query, key, value, cu_seq_lens, cu_seq_lens, max_length, max_length)  # (N, nh, hs)
    else:  # (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask)
        lengths = (cu_seq_lens, cu_seq_lens, max_length, max_length)
        output = flash_varlen_forward(query, key, value, *lengths, dropout, False, False)[0]  # (N, nh, hs)
    return output.reshape(1, tokens, num_heads * head_dim)  # (1, N, d)


def attends_per_sequence(device: torch.device) -> bool:
    """Whether packed sequences get one attention call each (CPUs, where a call costs little) rather than one call
    on a padded batch (GPUs and other devices, where many small calls cost more than the padding)."""
    return device.type == "cpu"


def packed_to_padded(
    packed: torch.Tensor, cu_seq_lens: torch.Tensor, max_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed tokens `(N, ...)` with sequence boundaries `cu_seq_lens` `(B+1,)` laid out as a right-padded batch
    `(B, max_length, ...)`, and which of its places hold tokens `(B, max_length)`."""
    starts, lengths = cu_seq_lens[:-1].long(), (cu_seq_lens[1:] - cu_seq_lens[:-1]).long()  # (B,), (B,)
    offsets = torch.arange(max_length, device=packed.device)  # (L,)
    keep = offsets < lengths.unsqueeze(-1)  # (B, L)
    index = (starts.unsqueeze(-1) + offsets).masked_fill(~keep, 0)  # (B, L): row of each place in `packed`
    padded = packed[index].masked_fill(~keep.view(*keep.shape, *([1] * (packed.dim() - 1))), 0)  # (B, L, ...)
    return padded, keep


def padded_places(cu_seq_lens: torch.Tensor, tokens: int, max_length: int) -> torch.Tensor:
    """The place of each of `tokens` packed tokens, delimited into sequences by `cu_seq_lens` `(B+1,)`, in the
    flattened right-padded batch `(B * max_length)` that `packed_to_padded` lays out: what gathers them back out of
    it, without the wait for the device that a boolean index or `nonzero` costs (`tokens` is known on the host)."""
    token = torch.arange(tokens, device=cu_seq_lens.device, dtype=cu_seq_lens.dtype)  # (N,)
    sequence = torch.searchsorted(cu_seq_lens[1:], token, right=True)  # (N,): the sequence each token belongs to
    return sequence * max_length + (token - cu_seq_lens[sequence])  # (N,)


# ----------------------------------------------------------------------------------------------------------------
# in place: one buffer fewer per activation and per residual sum


# In-place kernels of the activations whose `ACT2FN` module calls exactly that kernel out of place (the others, such
# as the Python-written "gelu_new" and "quick_gelu", always run out of place).
INPLACE_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu_,
    "gelu": torch.ops.aten.gelu_,
    "gelu_pytorch_tanh": partial(torch.ops.aten.gelu_, approximate="tanh"),
    "silu": partial(F.silu, inplace=True),
    "swish": partial(F.silu, inplace=True),
    "tanh": torch.tanh_,
}


def activate(act: Callable, hidden_act: str, hidden_states: torch.Tensor) -> torch.Tensor:
    """`act(hidden_states)`, where `act` is `ACT2FN[hidden_act]`. When autograd does not need the pre-activation
    values (inference, or frozen weights under `no_grad`) and `hidden_act` has an in-place kernel that is the one
    `act` calls, computed in place: the same values without a second buffer of their size."""
    act_inplace = INPLACE_ACTIVATIONS.get(hidden_act)
    if act_inplace is not None and not (torch.is_grad_enabled() and hidden_states.requires_grad):
        return act_inplace(hidden_states)
    return act(hidden_states)


def add_residual(sublayer_output: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """`residual + sublayer_output`, added in place into the sub-layer output (a fresh tensor: the output of a
    projection or of dropout) when it has the dtype of the sum. Same values, one activation-sized buffer fewer per
    sub-layer, which matters on CPUs, where large buffers come back from the allocator as freshly mapped memory that
    page-faults on first touch. Under autocast the projection is bf16 while the residual stream stays float32: the
    sum is then made out of place, in float32."""
    if sublayer_output.dtype == residual.dtype:
        return sublayer_output.add_(residual)
    return residual + sublayer_output


# ----------------------------------------------------------------------------------------------------------------
# loading


def align_loaded_tensors(model: nn.Module) -> None:
    """Copy every CPU parameter and buffer of `model` that lies at an address that is not 64-byte aligned (a tensor
    that still points into a memory-mapped checkpoint) into memory of its own. CPU matrix kernels round differently
    on unaligned operands (small-batch products change in the last bit), so without this a loaded model would not
    reproduce the saved one bit for bit; aligned weights are also the kernels' fast path."""
    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            if tensor.device.type == "cpu" and tensor.data_ptr() % 64:
                tensor.data = tensor.data.clone()


def register_for_auto_class(cls, auto_class: str | type = "AutoModel") -> None:
    """`PreTrainedModel.register_for_auto_class`, which takes only transformers' Auto classes, also for an
    `AUTO_MAP` name transformers has none for (a head of this package alone, such as
    `AutoModelForSpanClassification`): the name is the `auto_map` key `save_pretrained` writes for the class.
    transformers calls it on a model class it loads from a folder's code with `trust_remote_code=True`."""
    name = auto_class if isinstance(auto_class, str) else auto_class.__name__
    if name in AUTO_MAP and not hasattr(transformers, name):
        cls._auto_class = name
    else:
        PreTrainedModel.register_for_auto_class.__func__(cls, auto_class)
