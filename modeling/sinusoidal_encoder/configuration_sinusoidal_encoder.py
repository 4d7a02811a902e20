"""Configuration of the sinusoidal Transformer encoder.

This file is copied as-is into Hub repositories: it imports only the standard library, public transformers API and
its siblings `positions.py` and `position_modes.py`.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

from transformers import PretrainedConfig

# each sibling imported here directly: transformers 4.x copies into its module cache only the files a loaded file
# imports itself, then reads the imports of those copies
from .position_modes import MODE_DEFAULTS, MODE_PARAMETERS, POSITION_MODES
from .positions import ENCODING_DEFAULTS, ENCODING_PARAMETERS, POSITION_ENCODINGS

# The Auto classes a saved folder answers to, and the class each one builds. Written into every saved `config.json`
# so that one Hub folder loads through all of them with `trust_remote_code=True`.
AUTO_MAP = {
    "AutoConfig": "configuration_sinusoidal_encoder.SinusoidalEncoderConfig",
    "AutoModel": "modeling_sinusoidal_encoder.SinusoidalEncoderModel",
    "AutoModelForMaskedLM": "modeling_sinusoidal_encoder.SinusoidalEncoderForMaskedLM",
    "AutoModelForSequenceClassification": "modeling_sinusoidal_encoder.SinusoidalEncoderForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_sinusoidal_encoder.SinusoidalEncoderForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_sinusoidal_encoder.SinusoidalEncoderForQuestionAnswering",
    "AutoModelForMultipleChoice": "modeling_sinusoidal_encoder.SinusoidalEncoderForMultipleChoice",
    "AutoModelForSpanClassification": "modeling_sinusoidal_encoder.SinusoidalEncoderForSpanClassification",
}

_ACTIVATIONS = ("relu", "gelu", "gelu_new", "gelu_pytorch_tanh", "silu", "swish", "tanh", "quick_gelu", "mish")
_POOLINGS = ("cls", "mean")


# Every position field: a parameter at its default counts as "not set" for the modes and encodings that do not read
# it.
POSITION_DEFAULTS: dict[str, Any] = {**MODE_DEFAULTS, **ENCODING_DEFAULTS}
POSITION_PARAMETERS = {**MODE_PARAMETERS, **ENCODING_PARAMETERS}


def check_position_config(config: Any) -> None:
    """Raise a `ValueError` naming the field when `position_mode`, `position_encoding` or their parameters cannot
    work together: an unknown mode or encoding, an invalid parameter value, a mode that needs a parameter left unset
    (`"random_offset"` needs `max_position_offset` ≥ 1), a parameter set away from its default for a mode or an
    encoding that does not read it, or an encoding chosen for `position_mode="none"`, which has no position."""
    mode = POSITION_MODES.get(config.position_mode)
    if mode is None:
        raise ValueError(f"`position_mode` must be one of {list(POSITION_MODES)}, got {config.position_mode!r}.")
    encoding = POSITION_ENCODINGS.get(config.position_encoding)
    if encoding is None:
        raise ValueError(
            f"`position_encoding` must be one of {list(POSITION_ENCODINGS)}, got {config.position_encoding!r}."
        )
    if config.position_mode == "none" and config.position_encoding != POSITION_DEFAULTS["position_encoding"]:
        raise ValueError(
            f"`position_encoding={config.position_encoding!r}` has no position to encode with position_mode='none': "
            "leave it at 'sinusoidal' or choose a `position_mode`."
        )
    for name, check in POSITION_PARAMETERS.items():
        value, default = getattr(config, name), POSITION_DEFAULTS[name]
        problem = check(value)
        if problem is not None:
            raise ValueError(f"`{name}` must be {problem}, got {value!r}.")
        if value == default or name in mode.parameters + encoding.parameters:
            continue
        modes = [mode_name for mode_name, other in POSITION_MODES.items() if name in other.parameters]
        if modes:
            chosen, field = f"position_mode {modes}", f"position_mode={config.position_mode!r}"
        else:
            encodings = [key for key, other in POSITION_ENCODINGS.items() if name in other.parameters]
            chosen, field = f"position_encoding {encodings}", f"position_encoding={config.position_encoding!r}"
        raise ValueError(
            f"`{name}={value!r}` is a parameter of {chosen}, not of {field}: leave it at {default!r} or change "
            f"`{field.partition('=')[0]}`."
        )
    if config.position_mode == "random_offset" and config.max_position_offset < 1:
        raise ValueError("`position_mode='random_offset'` needs `max_position_offset` of at least 1.")


class SinusoidalEncoderConfig(PretrainedConfig):
    r"""
    Configuration of a Transformer encoder with the fixed sinusoidal position encoding of "Attention Is All You Need"
    (Vaswani et al., 2017).

    The defaults describe the paper's base encoder: post-LN layers, ReLU feed-forward blocks, token embeddings scaled
    by √hidden_size, dropout 0.1.

    Args:
        vocab_size (`int`, defaults to 30522): number of token ids.
        hidden_size (`int`, defaults to 512): d_model. Must be even (the encoding pairs a sine and a cosine).
        num_hidden_layers (`int`, defaults to 6): N, the number of identical encoder layers.
        num_attention_heads (`int`, defaults to 8): h; must divide `hidden_size`.
        intermediate_size (`int`, defaults to 2048): d_ff, the inner size of the feed-forward block.
        hidden_act (`str`, defaults to `"relu"`): activation of the feed-forward block and of the masked-LM head.
        hidden_dropout_prob (`float`, defaults to 0.1): dropout on the embedding sum and on each sub-layer output.
        attention_probs_dropout_prob (`float`, defaults to 0.1): dropout on the attention probabilities.
        max_position_embeddings (`int`, defaults to 512): the sequence length the model was trained at. It is
            **not** a cap: the encoding is defined for every position and the model runs on longer inputs (the
            exported tokenizer has no `model_max_length` for that reason; sentence-transformers truncates here).
        initializer_range (`float`, defaults to 0.02): standard deviation of the normal weight initialisation.
        layer_norm_eps (`float`, defaults to 1e-12): epsilon of every LayerNorm.
        pad_token_id (`int`, defaults to 0): the padding token (its embedding row starts at zero).
        classifier_dropout (`float`, *optional*): dropout of the classification heads; `hidden_dropout_prob` if unset.
        classifier_pooling (`str`, defaults to `"cls"`): how sequence-level heads pool the tokens: `"cls"` (the first
            token) or `"mean"` (the mean over tokens that the attention mask keeps).
        max_span_width (`int`, defaults to 8): the span-classification head scores every span of up to this many
            tokens.
        position_encoding_base (`float`, defaults to 10000.0): the base of the wavelengths, PE(pos, 2i) =
            sin(pos / base^(2i/d)); with `position_encoding="rotary"`, that of the rotation angles.
        scale_embeddings (`bool`, defaults to `True`): multiply token embeddings by √hidden_size, as the paper does.
        norm_first (`bool`, defaults to `False`): `False` is the paper's post-LN layer (LayerNorm after each residual
            sum); `True` is pre-LN (LayerNorm before each sub-layer, plus a final LayerNorm).
        tie_word_embeddings (`bool`, defaults to `True`): share the masked-LM decoder weight with the token embeddings.
        sparse_prediction (`bool`, defaults to `False`): when the masked-LM model gets `labels`, project to the
            vocabulary only at the positions that have a label (not -100): `logits` then has shape
            `(num_labelled_tokens, vocab_size)`, in row-major order of those positions. Same loss, far less compute.
        unpad_inputs (`bool`, defaults to `True`): with an `attention_mask` that masks some tokens (eager, sdpa or
            flash attention), run the model on the real tokens only, packed into one row `(1, N)` with transformers'
            variable-length arguments (`cu_seq_lens_q/k`, `max_length_q/k`): flash-attention's variable-length
            kernel takes them as they are, eager and sdpa attention on the CPU attend within each sequence in turn,
            and elsewhere the sequences are laid out as a right-padded batch. Same results on real tokens (padded
            positions of the last hidden state are zeros); less compute. Calls with `output_attentions` or
            `output_hidden_states` run on the padded layout.
        long_input_attention_window (`int`, *optional*): an attention option, apart from the positions: for inputs
            longer than `max_position_embeddings` (the length the model was trained at), each token attends only to
            the tokens fewer than this many positions away, so that no attention spans more than training showed the
            model; inputs up to the training length attend fully, exactly as in training. None (the default) turns it
            off. Windowed long inputs use a `(T, T)` mask with sdpa or eager attention (not with flash attention).
        position_mode (`str`, defaults to `"consecutive"`): which positions a sequence gets when no `position_ids`
            are passed, one of the modes of `position_modes.POSITION_MODES` (each entry's `doc`):
            {position_modes}
        max_position_offset (`int`, defaults to 0): the largest training offset of `"random_offset"` (at least 1
            there; 0 for the other modes).
        position_range (`int`, defaults to 2048): L, the number of positions `"ordered_subset"` and `"stratified"`
            draw from; longer sequences raise a `ValueError`.
        position_seed (`int`, defaults to 0): seed of the evaluation-mode draws of `"ordered_subset"` and
            `"stratified"`.
        position_inference (`str`, defaults to `"draw"`): the positions `"ordered_subset"` and `"stratified"` give
            in evaluation mode. `"draw"`: the seeded draw above, as the paper. `"evenly_spaced"`: the draw's expected
            spacing without its noise: with `"ordered_subset"` the k-th of n real tokens gets ⌊k·L/n⌋, with
            `"stratified"` the middle of its cell, ⌊k·L/n⌋ + w // 2 for a cell of w positions. Training always draws.

        position_encoding (`str`, defaults to `"sinusoidal"`): how the positions enter the model, one of the encodings
            of `positions.POSITION_ENCODINGS` (each entry's model card: what it is, its formula, what it learns):
            {position_encodings}
            An encoding that adds a bias to the attention scores (as ALiBi does) needs a score for every pair
            of tokens: calls with padding run on the padded layout (not `unpad_inputs`), and flash attention is
            refused.
            With `position_mode="none"` there is no position to encode: leave it at `"sinusoidal"`.
        partial_rotary_factor (`float`, defaults to 1.0): the share of each head's dimensions that `"rotary"`
            rotates, in (0, 1] (rounded down to an even number of dimensions); the rest carry no position.

    A mode's or an encoding's parameters are checked together with it: one set away from its default for a mode or
    an encoding that does not read it is an error.

    Every value is checked: an invalid one raises a `ValueError` that names the field.
    """

    model_type = "sinusoidal_encoder"

    def __init__(
        self,
        vocab_size: int = 30522,
        hidden_size: int = 512,
        num_hidden_layers: int = 6,
        num_attention_heads: int = 8,
        intermediate_size: int = 2048,
        hidden_act: str = "relu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.1,
        max_position_embeddings: int = 512,
        initializer_range: float = 0.02,
        layer_norm_eps: float = 1e-12,
        pad_token_id: int | None = 0,
        classifier_dropout: float | None = None,
        classifier_pooling: str = "cls",
        max_span_width: int = 8,
        position_encoding_base: float = ENCODING_DEFAULTS["position_encoding_base"],
        scale_embeddings: bool = True,
        norm_first: bool = False,
        tie_word_embeddings: bool = True,
        sparse_prediction: bool = False,
        unpad_inputs: bool = True,
        long_input_attention_window: int | None = None,
        position_mode: str = MODE_DEFAULTS["position_mode"],
        max_position_offset: int = MODE_DEFAULTS["max_position_offset"],
        position_range: int = MODE_DEFAULTS["position_range"],
        position_seed: int = MODE_DEFAULTS["position_seed"],
        position_inference: str = MODE_DEFAULTS["position_inference"],
        position_encoding: str = ENCODING_DEFAULTS["position_encoding"],
        partial_rotary_factor: float = ENCODING_DEFAULTS["partial_rotary_factor"],
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.pad_token_id = pad_token_id
        self.classifier_dropout = classifier_dropout
        self.classifier_pooling = classifier_pooling
        self.max_span_width = max_span_width
        self.position_encoding_base = position_encoding_base
        self.scale_embeddings = scale_embeddings
        self.norm_first = norm_first
        self.tie_word_embeddings = tie_word_embeddings
        self.sparse_prediction = sparse_prediction
        self.unpad_inputs = unpad_inputs
        self.long_input_attention_window = long_input_attention_window
        self.position_mode = position_mode
        self.max_position_offset = max_position_offset
        self.position_range = position_range
        self.position_seed = position_seed
        self.position_inference = position_inference
        self.position_encoding = position_encoding
        self.partial_rotary_factor = partial_rotary_factor
        kwargs.setdefault("auto_map", dict(AUTO_MAP))
        # transformers 4.x's base class sets these two from its own arguments (None and True by default): hand ours on
        super().__init__(pad_token_id=pad_token_id, tie_word_embeddings=tie_word_embeddings, **kwargs)
        self.check()

    def check(self) -> None:
        """Raise a `ValueError` naming the first field whose value cannot build a working model."""
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "max_span_width",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
        window = self.long_input_attention_window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
            raise ValueError(f"`long_input_attention_window` must be a positive integer or None, got {window!r}.")
        check_position_config(self)
        if self.hidden_size % 2:
            raise ValueError(
                f"`hidden_size` must be even: the sinusoidal encoding pairs a sine and a cosine per frequency, "
                f"got {self.hidden_size}."
            )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"`num_attention_heads` ({self.num_attention_heads}) must divide `hidden_size` ({self.hidden_size})."
            )
        if self.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"`hidden_act` must be one of {list(_ACTIVATIONS)}, got {self.hidden_act!r}.")
        if self.classifier_pooling not in _POOLINGS:
            raise ValueError(
                f"`classifier_pooling` must be one of {list(_POOLINGS)}, got {self.classifier_pooling!r}."
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if value is None and name == "classifier_dropout":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"`{name}` must be a probability in [0, 1), got {value!r}.")
        for name in ("layer_norm_eps", "initializer_range"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"`{name}` must be a positive finite number, got {value!r}.")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"`pad_token_id` must lie in [0, vocab_size={self.vocab_size}), got {self.pad_token_id}.")


class _Symbols(dict):
    """A card formula's fields as the docstring names them: `{base}` the base, `{head}` hs, `{rotary}` r, any other
    field by its name."""

    def __missing__(self, key: str) -> str:
        return {"head": "hs", "rotary": "r"}.get(key, key)


def _listed(texts: dict[str, str]) -> str:
    """One docstring bullet per registered value, `- "name": text`, wrapped at the docstring's indent (the first
    line's indent is the placeholder's)."""
    bullets = (
        textwrap.fill(f'- `"{name}"`: {text}', 119, initial_indent=" " * 12, subsequent_indent=" " * 14)
        for name, text in texts.items()
    )
    return "\n".join(bullets).removeprefix(" " * 12)


def _encoding_text(encoding: Any) -> str:
    """An encoding as the docstring lists it, from its model card: what it is, its formula, what it learns."""
    formula = re.sub(r"\s*\n\s*| {4,}", "; ", encoding.card.formula.format_map(_Symbols()))
    return f"{encoding.card.summary}: {' '.join(formula.split())}. {encoding.card.note}"


# the docstring lists each registered mode and encoding from its registry entry: a new one is described where it is
if SinusoidalEncoderConfig.__doc__:  # None under `python -OO`
    SinusoidalEncoderConfig.__doc__ = SinusoidalEncoderConfig.__doc__.format(
        position_modes=_listed({name: mode.doc for name, mode in POSITION_MODES.items()}),
        position_encodings=_listed({name: _encoding_text(e) for name, e in POSITION_ENCODINGS.items()}),
    )

__all__ = ["SinusoidalEncoderConfig"]
