"""A Transformer encoder with the fixed sinusoidal position encoding of "Attention Is All You Need".

    h_0 = E[x] * sqrt(d) + PE,   PE(pos, 2i) = sin(pos / base^(2i/d)),   PE(pos, 2i+1) = cos(pos / base^(2i/d))
    h_l = Norm(h + Dropout(FeedForward(h))),  h = Norm(h_{l-1} + Dropout(SelfAttention(h_{l-1})))   (post-LN)

The encoding has no parameters and no table: it is computed from the positions in every forward pass, in float64,
so it is exact in every dtype, defined at every position (no length cap), and cannot be left uninitialised or be
overwritten when transformers builds a model on the meta device and loads weights into it.

This file is the architecture, top to bottom: embeddings, attention, feed-forward, layer, stack, pooler and LM head,
the base model, the heads. Its siblings hold the rest, each function named where it is used: `position_modes.py`
which positions tokens get, `positions.py` how they enter the model, `fast_paths.py` the machine-specific fast paths
and the code for transformers' attention implementations and older releases, `inputs.py` the checks of what a
forward pass is given, `losses.py` the heads' losses. All of them are copied as-is into Hub repositories: they import
only the standard library, torch, public transformers API and each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging

from .configuration_sinusoidal_encoder import SinusoidalEncoderConfig
from .fast_paths import (
    activate,
    add_residual,
    add_score_bias,
    align_loaded_tensors,
    bidirectional_mask,
    check_flash_takes,
    forward_unpadded,
    packed_attention,
    register_for_auto_class,
    restrict_to_window,
    runs_unpadded,
    written_out_is_faster,
)
from .inputs import check_inputs, require_one_of, selected_hidden_states
from .losses import answer_span_loss, classification_loss, masked_lm_loss, multi_label_loss, sequence_problem_type
from .position_modes import default_positions, select_positions
from .positions import (
    adds_to_embeddings,
    attention_positions,
    attention_scaling,
    encode_positions,
    encoding_sum,
    learned_positions,
    rotate_queries_and_keys,
    sinusoidal_position_encoding,
)

logger = logging.get_logger(__name__)


class SinusoidalEncoderEmbeddings(nn.Module):
    """Token embedding × √d plus the sinusoidal encoding of the positions, then dropout (the paper has no LayerNorm
    here; `"scaled_sinusoidal"` scales PE by a learned scalar and adds one: `add_encoding`). Which positions a token
    gets is the position mode's choice (`position_modes.py`). With `position_mode="none"`, or a `position_encoding`
    that acts inside attention (`"rotary"`, `"alibi"`, `"tupe"`), no position is added here."""

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.hidden_size = config.hidden_size
        self.position_encoding_base = config.position_encoding_base
        self.encodes_positions = adds_to_embeddings(config)
        self.add_encoding = encoding_sum(config)  # tokens + PE, or a learned sum (`positions.POSITION_ENCODINGS`)
        self.scale = math.sqrt(config.hidden_size) if config.scale_embeddings else 1.0
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        num_positions: int | None = None,
    ) -> torch.Tensor:
        """Args:
        input_ids: `(B, T)`, or packed real tokens `(1, N)`. Exactly one of `input_ids` and `inputs_embeds`.
        position_ids: the positions of those tokens, same shape (or `(1, T)`); 0…T-1 when None. Ignored with
            `position_mode="none"`.
        inputs_embeds: `(B, T, d)` (or `(1, N, d)`) used instead of `self.word_embeddings(input_ids)`, scaled the
            same way.
        num_positions: when the positions are known to lie in 0…num_positions-1 (the model's own positions), the
            encoding of those rows is computed once and looked up where that is cheaper.
        """
        require_one_of(input_ids, inputs_embeds)
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, d)
        if not self.encodes_positions:
            return self.dropout(inputs_embeds * self.scale)
        if position_ids is None:
            position_ids, num_positions = default_positions(inputs_embeds.shape[-2], inputs_embeds.device)  # (1, T)
        encoding = self.encode_positions(position_ids, num_positions, inputs_embeds.dtype)  # (B or 1, T, d)
        return self.dropout(self.add_encoding(inputs_embeds * self.scale, encoding))

    def encode_positions(
        self, position_ids: torch.Tensor, num_positions: int | None = None, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """PE of `position_ids` `(*position_ids.shape, d)`, as `positions.encode_positions` computes it."""
        return encode_positions(position_ids, self.hidden_size, self.position_encoding_base, num_positions, dtype)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(QKᵀ · scaling + mask) V, written out. Takes any mask transformers builds: additive float, boolean
    (True = attend), or 2-D padding `(B, T)`. Returns `(B, T, nh, hs)` and the probabilities `(B, nh, T, T)`."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling  # (B, nh, T, T)
    if attention_mask is not None:
        if attention_mask.dim() == 2:  # (B, T) padding mask, as built for flash attention
            attention_mask = attention_mask[:, None, None, :].bool()  # (B, 1, 1, T)
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = F.dropout(probs, p=dropout, training=module.training)
    output = torch.matmul(probs, value).transpose(1, 2).contiguous()  # (B, T, nh, hs)
    return output, probs


def _attention_function(attn_implementation: str | None) -> Callable:
    """The attention function registered with transformers under `attn_implementation`, or the written-out one for
    "eager" (transformers 5 answers through `get_interface`, which is also how `set_attn_implementation` recognises a
    model that can switch: it looks for that call in this file; 4.x keeps a plain mapping without "eager")."""
    if hasattr(ALL_ATTENTION_FUNCTIONS, "get_interface"):
        return ALL_ATTENTION_FUNCTIONS.get_interface(attn_implementation, eager_attention_forward)
    if attn_implementation != "eager" and attn_implementation in ALL_ATTENTION_FUNCTIONS:
        return ALL_ATTENTION_FUNCTIONS[attn_implementation]
    return eager_attention_forward


class SinusoidalEncoderSelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention with one fused Q/K/V projection (laid out [Q; K; V], each head
    a contiguous block, as `torch.nn.MultiheadAttention.in_proj_weight`)."""

    def __init__(self, config: SinusoidalEncoderConfig, layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = attention_scaling(config)  # 1/√hs, the paper's (`"tupe"`: 1/√(2·hs))
        self.attention_dropout = config.attention_probs_dropout_prob
        self.is_causal = False  # read by transformers' sdpa and flash integrations: an encoder attends both ways
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`hidden_states` is `(B, T, d)` with `attention_mask`, or the real tokens of a batch packed into one row
        `(1, N, d)` with transformers' variable-length arguments `cu_seq_lens_q/k` (the sequence boundaries, `(B+1,)`)
        and `max_length_q/k`. Returns `(B, T, d)` or `(1, N, d)`, and the probabilities with `output_attentions`.

        The positions that act inside attention enter here, once, before any attention path: `position_embeddings`,
        the cosines and sines of a `"rotary"` encoding `(B or 1, T, r/2)` (packed `(1, N, r/2)`), rotate the queries
        and keys; the scores' bias of `"alibi"` arrives in `attention_mask` (`SinusoidalEncoderModel`)."""
        rotary = kwargs.pop("position_embeddings", None)
        qkv = self.qkv(hidden_states)  # (B, T, 3d), or (1, N, 3d) packed
        if rotary is not None:
            qkv = rotate_queries_and_keys(qkv, *rotary, self.num_heads)  # (B, T, 3d)
        attention_interface: Callable = eager_attention_forward
        if not output_attentions:  # only the written-out path can return the probabilities
            attention_interface = _attention_function(self.config._attn_implementation)
        if kwargs.get("cu_seq_lens_q") is not None:  # packed sequences: `fast_paths.packed_attention` picks the call
            return self.out_proj(packed_attention(self, qkv, attention_interface, **kwargs)), None
        attn_output, attn_weights = self.attend(qkv, attention_mask, attention_interface, **kwargs)  # (B, T, d)
        return self.out_proj(attn_output), attn_weights

    def attend(
        self, qkv: torch.Tensor, attention_mask: torch.Tensor | None, attention_interface: Callable, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The one call of the attention function: `qkv` `(B, T, 3d)` split into heads, attended under
        `attention_mask` (and any variable-length arguments in `kwargs`). Returns `(B, T, d)` and the probabilities
        (eager attention only)."""
        batch_size, seq_len, _ = qkv.shape
        qkv = qkv.view(batch_size, seq_len, 3, self.num_heads, self.head_dim)  # (B, T, 3, nh, hs)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 × (B, nh, T, hs)
        if written_out_is_faster(self.config._attn_implementation, query):
            attention_interface = eager_attention_forward
        dropout = self.attention_dropout if self.training else 0.0
        attn_output, attn_weights = attention_interface(
            self, query, key, value, attention_mask, dropout=dropout, scaling=self.scaling, **kwargs
        )  # (B, T, nh, hs)
        return attn_output.reshape(batch_size, seq_len, self.num_heads * self.head_dim), attn_weights  # (B, T, d)


class SinusoidalEncoderFeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2 (the activation in place where autograd does not need its input:
    `fast_paths.activate`)."""

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__()
        self.dense_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACT2FN[config.hidden_act]
        self.hidden_act = config.hidden_act
        self.dense_out = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense_in(hidden_states)  # (B, T, d_ff), or (N, d_ff) packed
        return self.dense_out(activate(self.act, self.hidden_act, hidden_states))


class SinusoidalEncoderLayer(GradientCheckpointingLayer):
    """Self-attention and feed-forward sub-layers, each inside a residual connection with LayerNorm and dropout.

    Post-LN (the paper): x = Norm(x + Dropout(Sublayer(x))). Pre-LN (`norm_first`): x = x + Dropout(Sublayer(Norm(x))).
    The sums are `fast_paths.add_residual`: in place where that gives the same values.
    """

    def __init__(self, config: SinusoidalEncoderConfig, layer_idx: int | None = None):
        super().__init__()
        self.norm_first = config.norm_first
        self.attention = SinusoidalEncoderSelfAttention(config, layer_idx=layer_idx)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = SinusoidalEncoderFeedForward(config)
        self.feed_forward_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.norm_first:
            attn_output, attn_weights = self.attention(
                self.attention_norm(hidden_states), attention_mask, output_attentions, **kwargs
            )
            hidden_states = add_residual(self.dropout(attn_output), hidden_states)
            hidden_states = add_residual(
                self.dropout(self.feed_forward(self.feed_forward_norm(hidden_states))), hidden_states
            )
        else:
            attn_output, attn_weights = self.attention(hidden_states, attention_mask, output_attentions, **kwargs)
            hidden_states = self.attention_norm(add_residual(self.dropout(attn_output), hidden_states))
            hidden_states = self.feed_forward_norm(
                add_residual(self.dropout(self.feed_forward(hidden_states)), hidden_states)
            )
        return hidden_states, attn_weights


class SinusoidalEncoderStack(nn.Module):
    """N identical layers; with `norm_first` a final LayerNorm closes the residual stream. Runs on a padded batch
    `(B, T, d)` with its mask, or on packed tokens `(1, N, d)` with the variable-length arguments in `kwargs`."""

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            [SinusoidalEncoderLayer(config, layer_idx=index) for index in range(config.num_hidden_layers)]
        )
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.norm_first else None

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: set[int] | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        """`output_hidden_states`: the indices of the hidden states to return (0: the embeddings' output, i: the
        output of layer i); the others are None in the returned tuple. None returns no hidden states."""
        keep = output_hidden_states
        all_hidden_states = () if keep is not None else None
        all_attentions = () if output_attentions else None
        layer_positions = kwargs.pop("layer_positions", None)  # `"sinusoidal_every_layer"`: PE `(B or 1, T, d)`
        for index, layer in enumerate(self.layers):
            if keep is not None:
                all_hidden_states += (hidden_states if index in keep else None,)
            if index and layer_positions is not None:  # added again at the input of every layer after the first
                hidden_states = hidden_states + layer_positions.to(hidden_states.dtype)
            # hidden_states goes positionally: gradient checkpointing needs the tensors that require grad there
            hidden_states, attn_weights = layer(hidden_states, attention_mask, output_attentions, **kwargs)
            if output_attentions:
                all_attentions += (attn_weights,)
        if keep is not None:
            all_hidden_states += (hidden_states if len(self.layers) in keep else None,)
        if self.final_norm is not None:
            hidden_states = self.final_norm(hidden_states)
        return BaseModelOutput(
            last_hidden_state=hidden_states, hidden_states=all_hidden_states, attentions=all_attentions
        )


class SinusoidalEncoderPooler(nn.Module):
    """Pools a sequence into one vector for the sequence-level heads: the first token (`"cls"`) or the mean over the
    tokens the attention mask keeps (`"mean"`), then a dense layer with tanh."""

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__()
        self.pooling = config.classifier_pooling
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.pooling == "cls":
            pooled = hidden_states[:, 0]  # (B, d)
        elif attention_mask is not None and attention_mask.dim() != 2:
            raise ValueError("`classifier_pooling='mean'` needs a 2-D `attention_mask` (batch_size, seq_len).")
        elif attention_mask is None:
            pooled = hidden_states.mean(dim=1)  # (B, d)
        else:
            weights = attention_mask.to(hidden_states.dtype).unsqueeze(-1)  # (B, T, 1)
            pooled = (hidden_states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)  # (B, d)
        return self.activation(self.dense(pooled))


class SinusoidalEncoderLMHead(nn.Module):
    """Masked-LM head: dense, activation, LayerNorm, then the vocabulary projection (tied to the token embeddings)."""

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT2FN[config.hidden_act]
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.layer_norm(self.act(self.dense(hidden_states))))


class SinusoidalEncoderPreTrainedModel(PreTrainedModel):
    config_class = SinusoidalEncoderConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["SinusoidalEncoderEmbeddings", "SinusoidalEncoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    register_for_auto_class = classmethod(register_for_auto_class)  # an Auto class of this package's own too

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """`PreTrainedModel.from_pretrained`, its CPU tensors then 64-byte aligned (`fast_paths.align_loaded_tensors`),
        so that the loaded model reproduces the saved one bit for bit."""
        loaded = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        align_loaded_tensors(loaded[0] if isinstance(loaded, tuple) else loaded)  # (model, info): output_loading_info
        return loaded

    def _encode(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        output_attentions: bool | None,
        output_hidden_states: bool | None,
        **kwargs,
    ) -> BaseModelOutput:
        """What every head does first: run the encoder (`self.model`), keeping its hidden states and attentions for
        the head's output."""
        return self.model(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **kwargs,
        )

    def _returned(self, output, return_dict: bool | None):
        """What every forward does last: its `ModelOutput`, or that output as a tuple (`return_dict=False`)."""
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Normal(0, initializer_range) for linear layers; token embeddings get std 1/√d when they are scaled by √d,
        so that the scaled embeddings have unit variance like the encoding they are added to (as in the reference
        tensor2tensor implementation of the paper). Uses `torch.nn.init`, which transformers guards so that weights
        already loaded from a checkpoint are never overwritten."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            embedding_std = self.config.hidden_size**-0.5 if self.config.scale_embeddings else std
            nn.init.normal_(module.weight, mean=0.0, std=embedding_std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                nn.init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif hasattr(module, "init_position_weights"):  # the learned parts of a position encoding (positions.py)
            module.init_position_weights()


class SinusoidalEncoderModel(SinusoidalEncoderPreTrainedModel):
    """The bare encoder: embeddings with the sinusoidal encoding, then the layers. Returns `BaseModelOutput`."""

    # a pretrained (masked-LM) or fine-tuned checkpoint carries its head: not part of the bare encoder, nothing to
    # report when the encoder alone (sentence-transformers, feature extraction) or a model with another head is loaded
    # from one. The names of every head below; a head's weights that are missing or of another shape are reported.
    _keys_to_ignore_on_load_unexpected = [r"^(lm_head|pooler|classifier|qa_outputs|start_classifier|end_classifier)\."]

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__(config)
        config.check()  # again: `from_pretrained(folder, field=value)` sets fields after the config was built
        self.embeddings = SinusoidalEncoderEmbeddings(config)
        self.learned_positions = learned_positions(config)  # `"tupe"`'s projections of PE, shared by every layer
        self.encoder = SinusoidalEncoderStack(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def _long_input_window(self, seq_len: int) -> int | None:
        """`long_input_attention_window` when it applies: configured, and the input longer than the training length."""
        window = self.config.long_input_attention_window
        return None if window is None or seq_len <= self.config.max_position_embeddings else window

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput | tuple[torch.Tensor, ...]:
        r"""
        input_ids (`(batch_size, seq_len)`): token ids. Exactly one of `input_ids` and `inputs_embeds`.
        attention_mask (`(batch_size, seq_len)`): 1 for real tokens, 0 for padding (or a prepared 4-D mask).
        position_ids (`(batch_size, seq_len)` or `(1, seq_len)`): positions fed to the encoding; when absent, those
            of `config.position_mode` (0…seq_len-1 by default: right padding). Any position is valid: the encoding
            has no table to run past.
        inputs_embeds (`(batch_size, seq_len, hidden_size)`): token embeddings used instead of `input_ids`; they are
            scaled by √d like looked-up ones.
        """
        check_inputs(input_ids, attention_mask, position_ids, inputs_embeds, kwargs)
        kwargs.pop("token_type_ids", None)
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        kept_hidden_states = selected_hidden_states(output_hidden_states, self.config.num_hidden_layers)
        kwargs.pop("num_items_in_batch", None)

        if output_attentions and self.config._attn_implementation != "eager":
            logger.warning_once(
                f"`output_attentions=True` is computed with eager attention instead of "
                f"{self.config._attn_implementation!r}, which cannot return the attention probabilities."
            )
        reference = input_ids if input_ids is not None else inputs_embeds
        batch_size, seq_len = reference.shape[:2]
        positions = select_positions(
            self.config, position_ids, batch_size, seq_len, attention_mask, reference.device, self.training
        )  # ids (B or 1, T), or None: no position encoded
        in_attention = attention_positions(self.config, positions, self.learned_positions)  # a rotation, a bias, ...
        window = self._long_input_window(seq_len)
        check_flash_takes(self.config, in_attention.bias, window)
        padded_layout = window is not None or in_attention.bias is not None or output_attentions
        if runs_unpadded(self.config, attention_mask, padded_layout or kept_hidden_states is not None):
            outputs = forward_unpadded(
                self, input_ids, attention_mask, positions, in_attention, inputs_embeds, **kwargs
            )
            return self._returned(outputs, return_dict)  # the real tokens alone, packed into one row
        hidden_states = self.embeddings(
            input_ids=input_ids,
            position_ids=positions.ids,
            inputs_embeds=inputs_embeds,
            num_positions=positions.num_positions,
        )  # (B, T, d)
        attention_mask = bidirectional_mask(self.config, attention_mask, hidden_states)
        if in_attention.bias is not None:
            attention_mask = add_score_bias(attention_mask, in_attention.bias, hidden_states.dtype)
        if window is not None:
            attention_mask = restrict_to_window(attention_mask, window, seq_len, hidden_states.device)
        kwargs.update(in_attention.layer_arguments())  # the rotation, or PE for every layer's input
        outputs = self.encoder(
            hidden_states,
            attention_mask,
            output_attentions=output_attentions,
            output_hidden_states=kept_hidden_states,
            **kwargs,
        )
        return self._returned(outputs, return_dict)


def _classifier_dropout(config: SinusoidalEncoderConfig) -> float:
    return config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob


class SinusoidalEncoderForMaskedLM(SinusoidalEncoderPreTrainedModel):
    """The encoder with a masked-language-modelling head whose vocabulary projection is tied to the token
    embeddings (`config.tie_word_embeddings`)."""

    _tied_weights_keys = {"lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"}

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__(config)
        self.model = SinusoidalEncoderModel(config)
        self.lm_head = SinusoidalEncoderLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head.decoder = new_embeddings

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> MaskedLMOutput | tuple[torch.Tensor, ...]:
        r"""labels (`(batch_size, seq_len)`): the original ids at masked positions, -100 elsewhere. With
        `config.sparse_prediction`, `logits` then covers only the labelled positions: `(num_labelled, vocab_size)`."""
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)  # from Trainer
        outputs = self._encode(
            input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states, **kwargs
        )
        hidden_states = outputs.last_hidden_state  # (B, T, d)
        if labels is not None and self.config.sparse_prediction:
            kept = (labels.flatten() != -100).nonzero().squeeze(1)  # (N,): one wait for the device, for both
            hidden_states = hidden_states.flatten(0, 1).index_select(0, kept)  # (N, d)
            labels = labels.flatten().index_select(0, kept)  # (N,)
        logits = self.lm_head(hidden_states)  # (B, T, V), or (N, V) when sparse
        loss = masked_lm_loss(logits, labels, num_items_in_batch) if labels is not None else None
        output = MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return self._returned(output, return_dict)


class SinusoidalEncoderForSequenceClassification(SinusoidalEncoderPreTrainedModel):
    """The encoder with a pooled classification or regression head (`config.problem_type` as in BERT)."""

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = SinusoidalEncoderModel(config)
        self.pooler = SinusoidalEncoderPooler(config)
        self.dropout = nn.Dropout(_classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput | tuple[torch.Tensor, ...]:
        r"""labels (`(batch_size,)`, or `(batch_size, num_labels)` floats for multi-label): targets; the problem type
        follows `config.problem_type` or is inferred as in BERT."""
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)  # from Trainer
        outputs = self._encode(
            input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states, **kwargs
        )
        pooled = self.pooler(outputs.last_hidden_state, attention_mask)  # (B, d)
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels)
        loss = None
        if labels is not None:
            problem_type = sequence_problem_type(self.config, self.num_labels, labels)
            loss = classification_loss(problem_type, logits, labels, num_items_in_batch)
        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return self._returned(output, return_dict)


class SinusoidalEncoderForTokenClassification(SinusoidalEncoderPreTrainedModel):
    """The encoder with a per-token classification head (named-entity recognition, tagging)."""

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = SinusoidalEncoderModel(config)
        self.dropout = nn.Dropout(_classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput | tuple[torch.Tensor, ...]:
        r"""labels (`(batch_size, seq_len)`): a class per token, -100 where no loss is wanted."""
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)  # from Trainer
        outputs = self._encode(
            input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states, **kwargs
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))  # (B, T, num_labels)
        loss = None
        if labels is not None:
            loss = classification_loss("token_classification", logits, labels, num_items_in_batch)
        output = TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return self._returned(output, return_dict)


class SinusoidalEncoderForQuestionAnswering(SinusoidalEncoderPreTrainedModel):
    """The encoder with an extractive question-answering head: start and end logits over the tokens."""

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__(config)
        self.model = SinusoidalEncoderModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput | tuple[torch.Tensor, ...]:
        r"""start_positions, end_positions (`(batch_size,)`): token indices of the answer span; positions outside the
        sequence are ignored in the loss (as in BERT). The loss is the mean of the start and end cross-entropies,
        summed over the examples and divided by `num_items_in_batch`, else by the examples with a position; padded
        positions take no share of its softmax (the logits themselves are returned as computed)."""
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)  # from Trainer
        outputs = self._encode(
            input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states, **kwargs
        )
        logits = self.qa_outputs(outputs.last_hidden_state)  # (B, T, 2)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))  # 2 × (B, T)
        loss = None
        if start_positions is not None and end_positions is not None:
            positions = start_positions, end_positions
            loss = answer_span_loss(start_logits, end_logits, *positions, num_items_in_batch, attention_mask)
        output = QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return self._returned(output, return_dict)


class SinusoidalEncoderForMultipleChoice(SinusoidalEncoderPreTrainedModel):
    """The encoder scoring each of several choices with the pooled head; inputs are `(batch, num_choices, seq_len)`."""

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__(config)
        self.model = SinusoidalEncoderModel(config)
        self.pooler = SinusoidalEncoderPooler(config)
        self.dropout = nn.Dropout(_classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> MultipleChoiceModelOutput | tuple[torch.Tensor, ...]:
        r"""input_ids, attention_mask, position_ids (`(batch_size, num_choices, seq_len)`); inputs_embeds
        (`(batch_size, num_choices, seq_len, hidden_size)`); labels (`(batch_size,)`): index of the right choice."""
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)  # from Trainer
        reference = input_ids if input_ids is not None else inputs_embeds
        if reference is None or reference.dim() < 3:
            raise ValueError("`input_ids` (or `inputs_embeds`) must have shape (batch_size, num_choices, seq_len).")
        num_choices = reference.shape[1]

        def flat(tensor: torch.Tensor | None, trailing: int) -> torch.Tensor | None:
            # (B, C, T, ...) -> (B*C, T, ...)
            return None if tensor is None else tensor.reshape(-1, *tensor.shape[tensor.dim() - trailing :])

        outputs = self._encode(
            flat(input_ids, 1),
            flat(attention_mask, 1),
            flat(position_ids, 1),
            flat(inputs_embeds, 2),
            output_attentions,
            output_hidden_states,
            **kwargs,
        )
        pooled = self.pooler(outputs.last_hidden_state, flat(attention_mask, 1))  # (B*C, d)
        logits = self.classifier(self.dropout(pooled)).view(-1, num_choices)  # (B, C)
        loss = None
        if labels is not None:
            loss = classification_loss("single_label_classification", logits, labels, num_items_in_batch)
        output = MultipleChoiceModelOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return self._returned(output, return_dict)


class SinusoidalEncoderForSpanClassification(SinusoidalEncoderPreTrainedModel):
    """The encoder with a span-categorisation head (as spaCy's spancat): every span of up to `config.max_span_width`
    tokens gets a score per label from the states of its first and last tokens;
    a span may have several labels or none, and spans may nest or overlap. `logits` is `(batch, seq_len, width,
    num_labels)`: `[b, i, w]` scores the tokens i…i+w; a span that runs past the sequence or onto a masked token
    scores -1e4 (never predicted)."""

    def __init__(self, config: SinusoidalEncoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.max_span_width = config.max_span_width
        self.model = SinusoidalEncoderModel(config)
        self.dropout = nn.Dropout(_classifier_dropout(config))
        self.start_classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.end_classifier = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput | tuple[torch.Tensor, ...]:
        r"""labels (`(batch_size, seq_len, width, num_labels)`): 1 where the span has the label, 0 where not, -100
        for a span that is no candidate. The loss is the binary cross-entropy of every labelled entry, summed and
        divided by `num_items_in_batch`, else by the labelled entries."""
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)  # from Trainer
        outputs = self._encode(
            input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states, **kwargs
        )
        hidden_states = self.dropout(outputs.last_hidden_state)  # (B, T, d)
        seq_len = hidden_states.shape[1]
        last = torch.arange(seq_len, device=hidden_states.device)[:, None] + torch.arange(
            self.max_span_width, device=hidden_states.device
        )  # (T, W): the last token of each span
        inside = last < seq_len
        last = last.clamp(max=seq_len - 1)
        ends = self.end_classifier(hidden_states)  # (B, T, L)
        logits = self.start_classifier(hidden_states)[:, :, None, :] + ends[:, last]  # (B, T, W, L)
        valid = inside[None]  # (1, T, W)
        if attention_mask is not None:
            real = attention_mask.bool()
            valid = valid & real[:, :, None] & real[:, last]  # (B, T, W)
        logits = logits.masked_fill(~valid[..., None], -1e4)
        loss = multi_label_loss(logits, labels, num_items_in_batch) if labels is not None else None
        output = TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return self._returned(output, return_dict)


__all__ = [
    "SinusoidalEncoderForMaskedLM",
    "SinusoidalEncoderForMultipleChoice",
    "SinusoidalEncoderForQuestionAnswering",
    "SinusoidalEncoderForSequenceClassification",
    "SinusoidalEncoderForSpanClassification",
    "SinusoidalEncoderForTokenClassification",
    "SinusoidalEncoderModel",
    "SinusoidalEncoderPreTrainedModel",
    "sinusoidal_position_encoding",
]
