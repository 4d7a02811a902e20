"""The encoder of the paper: attention, feed-forward, residual + LayerNorm, padding, masks, attention backends."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch
from conftest import VOCAB_SIZE, HostReads, random_ids, tiny_config
from torch import nn
from transformers import AttentionInterface, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import sinusoidal_encoder as se
from sinusoidal_encoder import fast_paths
from sinusoidal_encoder import modeling_sinusoidal_encoder as modeling


def torch_reference_encoder(model: se.SinusoidalEncoderModel) -> nn.TransformerEncoder:
    """`torch.nn.TransformerEncoder` (the paper's layer, as PyTorch ships it) holding our model's weights."""
    config = model.config
    layer = nn.TransformerEncoderLayer(
        config.hidden_size,
        config.num_attention_heads,
        config.intermediate_size,
        dropout=0.0,
        activation=config.hidden_act,
        layer_norm_eps=config.layer_norm_eps,
        batch_first=True,
        norm_first=config.norm_first,
    )
    final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.norm_first else None
    reference = nn.TransformerEncoder(layer, config.num_hidden_layers, norm=final_norm, enable_nested_tensor=False)
    with torch.no_grad():
        for ours, theirs in zip(model.encoder.layers, reference.layers, strict=True):
            theirs.self_attn.in_proj_weight.copy_(ours.attention.qkv.weight)
            theirs.self_attn.in_proj_bias.copy_(ours.attention.qkv.bias)
            theirs.self_attn.out_proj.weight.copy_(ours.attention.out_proj.weight)
            theirs.self_attn.out_proj.bias.copy_(ours.attention.out_proj.bias)
            theirs.linear1.load_state_dict(ours.feed_forward.dense_in.state_dict())
            theirs.linear2.load_state_dict(ours.feed_forward.dense_out.state_dict())
            theirs.norm1.load_state_dict(ours.attention_norm.state_dict())
            theirs.norm2.load_state_dict(ours.feed_forward_norm.state_dict())
        if final_norm is not None:
            final_norm.load_state_dict(model.encoder.final_norm.state_dict())
    return reference.eval()


def randomize_norms(model):
    """LayerNorms start at (1, 0); random affine parameters make a parity test see them."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_parity_with_torch_transformer_encoder(norm_first, attn_implementation):
    model = se.SinusoidalEncoderModel(tiny_config(norm_first=norm_first))
    model.config._attn_implementation = attn_implementation
    randomize_norms(model)
    model.eval()
    reference = torch_reference_encoder(model)
    ids = random_ids(3, 20)
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    mask[2, 7:] = 0
    with torch.no_grad():
        ours = model(ids, attention_mask=mask).last_hidden_state
        theirs = reference(model.embeddings(input_ids=ids), src_key_padding_mask=mask == 0)
    real = mask.bool()
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)


def test_layer_structure_post_and_pre_ln():
    post = se.SinusoidalEncoderModel(tiny_config())
    pre = se.SinusoidalEncoderModel(tiny_config(norm_first=True))
    assert post.encoder.final_norm is None and isinstance(pre.encoder.final_norm, nn.LayerNorm)
    layer = post.encoder.layers[0]
    assert layer.attention.num_heads == 4 and layer.attention.head_dim == 8
    assert layer.attention.scaling == pytest.approx(8**-0.5)  # softmax(QKᵀ/√d_k)V
    assert layer.attention.is_causal is False


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_eager_and_sdpa_agree(norm_first, padded):
    eager = AutoModelForMaskedLM.from_config(tiny_config(norm_first=norm_first), attn_implementation="eager").eval()
    sdpa = AutoModelForMaskedLM.from_config(tiny_config(norm_first=norm_first), attn_implementation="sdpa").eval()
    sdpa.load_state_dict(eager.state_dict())
    assert eager.config._attn_implementation == "eager" and sdpa.config._attn_implementation == "sdpa"
    ids = random_ids(4, 33)
    mask = torch.ones_like(ids)
    if padded:
        mask[0, 10:] = 0
        mask[3, 30:] = 0
    with torch.no_grad():
        a = eager(ids, attention_mask=mask).logits
        b = sdpa(ids, attention_mask=mask).logits
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=1e-5, rtol=1e-5)


def test_flash_attention_2_gets_packed_sequences_with_the_varlen_convention(monkeypatch):
    """flash-attn cannot run on this CPU: put a stand-in under its name in transformers' attention registry. A padded
    batch must reach it as the packed real tokens, one row `(1, nh, N, hs)` with no mask and the keyword arguments
    that transformers' flash integration hands to flash-attention's variable-length kernel (`cu_seq_lens_q/k`,
    `max_length_q/k`); a batch without padding as `(B, nh, T, hs)`. The stand-in attends within the sequences that
    `cu_seq_lens_q` delimits, so the outputs must equal sdpa's."""
    assert se.SinusoidalEncoderPreTrainedModel._supports_flash_attn
    calls = []

    def flash_stand_in(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        assert attention_mask is None and not module.is_causal
        bounds = kwargs.get("cu_seq_lens_q")
        calls.append((tuple(query.shape), None if bounds is None else (bounds.tolist(), kwargs["max_length_q"])))
        if bounds is None:
            out = nn.functional.scaled_dot_product_attention(query, key, value, scale=scaling)
            return out.transpose(1, 2), None  # (B, T, nh, hs)
        assert torch.equal(kwargs["cu_seq_lens_k"], bounds) and bounds.dtype == torch.int32
        pieces = [
            nn.functional.scaled_dot_product_attention(
                query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], scale=scaling
            )
            for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
        ]
        return torch.cat(pieces, dim=2).transpose(1, 2), None  # (1, N, nh, hs)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, "flash_attention_2", flash_stand_in)
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    ids = random_ids(3, 12)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[2, 5:] = 0
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).last_hidden_state
        dense_expected = model(ids).last_hidden_state
        model.config._attn_implementation = "flash_attention_2"
        got = model(ids, attention_mask=mask).last_hidden_state
        dense_got = model(ids).last_hidden_state
    packed_call = ((1, 4, 25, 8), ([0, 12, 20, 25], 12))  # 12 + 8 + 5 real tokens, longest 12
    assert calls == [packed_call] * 2 + [((3, 4, 12, 8), None)] * 2  # once per layer
    torch.testing.assert_close(got[mask.bool()], expected[mask.bool()], atol=1e-5, rtol=1e-5)
    assert torch.all(got[~mask.bool()] == 0)
    torch.testing.assert_close(dense_got, dense_expected, atol=1e-5, rtol=1e-5)


def _varlen_stand_in(calls: list):
    """A CPU stand-in for torch's `varlen_attn` with its signature and layout: packed `(N, nh, hs)` query, key and
    value, int32 boundaries `(B+1,)`, the longest lengths; attention within each sequence at the default scale."""

    def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k):
        assert query.dim() == 3 and query.shape == key.shape == value.shape
        assert cu_seq_q.dtype == torch.int32 and torch.equal(cu_seq_q, cu_seq_k) and max_q == max_k
        bounds = cu_seq_q.tolist()
        assert max_q == max(end - start for start, end in pairwise(bounds))
        calls.append((tuple(query.shape), bounds, max_q))
        pieces = [
            nn.functional.scaled_dot_product_attention(
                *(tensor[start:end].transpose(0, 1) for tensor in (query, key, value))  # (nh, L, hs)
            ).transpose(0, 1)  # (L, nh, hs)
            for start, end in pairwise(bounds)
        ]
        return torch.cat(pieces)  # (N, nh, hs)

    return varlen_attn


def _flash_varlen_stand_in(calls: list):
    """A CPU stand-in for `aten._flash_attention_forward` on packed sequences, called as `varlen_attention` calls it
    with attention dropout: `varlen_attn`'s arguments, then the dropout, `is_causal` and `return_debug_mask`; the
    output first of the tuple it returns."""
    varlen_attn = _varlen_stand_in(calls)

    def flash_attention_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, causal, debug):
        assert 0.0 < dropout_p < 1.0 and causal is False and debug is False
        calls.append(("dropout", dropout_p))
        output = varlen_attn(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k)
        return output, None, None, None, None

    return flash_attention_forward


@pytest.mark.parametrize(
    "implementation, dtype, dropout, training, capability, used",
    [
        ("sdpa", torch.bfloat16, 0.0, False, (9, 0), True),
        ("sdpa", torch.float16, 0.1, False, (8, 0), True),  # dropout applies in training only
        ("sdpa", torch.bfloat16, 0.0, True, (8, 6), True),
        ("sdpa", torch.bfloat16, 0.1, True, (9, 0), True),  # with dropout: the flash kernel varlen_attn calls
        ("sdpa", torch.float32, 0.0, False, (9, 0), False),  # fp32: flash kernels take fp16/bf16 only
        ("sdpa", torch.bfloat16, 0.0, False, (7, 5), False),  # before Ampere: no flash attention
        ("eager", torch.bfloat16, 0.0, False, (9, 0), False),  # the written-out attention, as asked
    ],
)
def test_packed_sequences_go_to_torchs_varlen_kernel_where_it_runs(
    monkeypatch, implementation, dtype, dropout, training, capability, used
):
    """On a CUDA GPU (simulated: the capability is what torch would report) the unpadded path calls `varlen_attn`
    with the packed layout (in training with attention dropout, the flash kernel it calls, with the dropout), and
    only where the kernel runs; elsewhere the padded layout, as before."""
    calls = []
    monkeypatch.setattr(fast_paths, "varlen_attn", _varlen_stand_in(calls))
    monkeypatch.setattr(fast_paths, "flash_varlen_forward", _flash_varlen_stand_in(calls))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert fast_paths.runs_flash_attention(torch.device("cuda")) == (capability >= (8, 0))
    assert not fast_paths.runs_flash_attention(torch.device("cpu"))
    monkeypatch.setattr(fast_paths, "runs_flash_attention", lambda device: capability >= (8, 0))  # as on a GPU
    config = tiny_config(attention_probs_dropout_prob=dropout)
    model = AutoModel.from_config(config, attn_implementation=implementation).to(dtype).train(training)
    ids = random_ids(3, 12)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[2, 5:] = 0
    model(ids, attention_mask=mask)
    call = [("dropout", dropout)] if dropout and training else []
    assert calls == ([*call, ((25, 4, 8), [0, 12, 20, 25], 12)] * 2 if used else [])  # once per layer
    if dropout and training:  # a torch without the flash kernel's operator as called here: the padded layout
        monkeypatch.setattr(fast_paths, "flash_varlen_forward", None)
        model(ids, attention_mask=mask)
        assert len(calls) == 4
    monkeypatch.setattr(fast_paths, "varlen_attn", None)  # a torch without the kernel (before 2.10)
    model(ids, attention_mask=mask)
    assert len(calls) == (len(call) + 1) * (2 if used else 0)


def test_the_flash_kernels_operator_takes_packed_sequences_with_dropout_as_called():
    """The operator `varlen_attention` calls in training with attention dropout, torch's own
    `aten._flash_attention_forward`, on meta tensors (its shapes without a GPU): the packed layout in, `(1, N, d)`
    out, and gradients for the query, key and value through its backward."""
    assert fast_paths.flash_varlen_forward is not None  # this torch has it, with the arguments called
    heads, head_dim, cu_seq_lens = 4, 8, torch.tensor([0, 12, 20, 25], dtype=torch.int32, device="meta")
    qkv = torch.empty(1, 25, 3 * heads * head_dim, device="meta", dtype=torch.bfloat16, requires_grad=True)
    output = fast_paths.varlen_attention(qkv, cu_seq_lens, 12, heads, head_dim, dropout=0.1)
    assert output.shape == (1, 25, heads * head_dim) and output.dtype == torch.bfloat16
    output.sum().backward()
    assert qkv.grad.shape == qkv.shape


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_varlen_kernel_path_gives_the_padded_batchs_outputs_and_gradients(monkeypatch, dtype):
    """The packed layout handed to `varlen_attn` (the CPU stand-in above): the masked-LM logits and the gradients of
    every weight equal those of the padded batch attended by sdpa, up to half-precision rounding. (fp16 gradients
    are compared on a GPU, tests/model/test_gpu.py: on the CPU, fp16 LayerNorm of the unpadded path's zero rows at
    padding underflows its epsilon and gives NaN there.)"""
    calls = []
    monkeypatch.setattr(fast_paths, "varlen_attn", _varlen_stand_in(calls))
    monkeypatch.setattr(fast_paths, "runs_flash_attention", lambda device: True)
    ids = random_ids(4, 16, seed=5)
    mask = torch.ones_like(ids)
    for row, keep in enumerate((16, 9, 3, 1)):
        mask[row, keep:] = 0
    labels = torch.where(mask.bool(), ids, -100)
    results = {}
    for unpad in (True, False):
        torch.manual_seed(0)
        model = AutoModelForMaskedLM.from_config(tiny_config(unpad_inputs=unpad)).to(dtype).train()
        output = model(ids, attention_mask=mask, labels=labels)
        output.loss.backward()
        results[unpad] = output.logits.float(), {n: p.grad.float() for n, p in model.named_parameters()}
    assert len(calls) == 2  # the unpadded model's two layers, and only those
    (logits, grads), (padded_logits, padded_grads) = results[True], results[False]
    real = mask.bool()
    torch.testing.assert_close(logits[real], padded_logits[real], atol=3e-2, rtol=3e-2)
    if dtype == torch.bfloat16:
        for name, grad in grads.items():
            torch.testing.assert_close(grad, padded_grads[name], atol=3e-2, rtol=5e-2, msg=name)


def test_custom_attention_function_registered_with_transformers_is_used():
    seen = []

    def spy(module, query, key, value, attention_mask, **kwargs):
        seen.append(query.shape)
        return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("spy_for_test", spy)
    model = AutoModel.from_config(tiny_config(), attn_implementation="spy_for_test").eval()
    with torch.no_grad():
        model(random_ids(2, 6))
    assert seen == [torch.Size([2, 4, 6, 8])] * 2  # (B, nh, T, hs) per layer


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_output_attentions_hidden_states_and_tuples(attn_implementation):
    model = AutoModel.from_config(tiny_config(), attn_implementation=attn_implementation).eval()
    ids = random_ids(2, 10)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
        as_tuple = model(
            ids, attention_mask=mask, output_attentions=True, output_hidden_states=True, return_dict=False
        )
    assert len(out.attentions) == 2 and len(out.hidden_states) == 3
    for probs in out.attentions:
        assert probs.shape == (2, 4, 10, 10)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 10))
        assert probs[1, :, :, 6:].abs().max() == 0  # nobody attends to padding
    real = mask.bool()
    assert torch.equal(out.hidden_states[0][real], model.embeddings(input_ids=ids)[real])
    unpadded = model(ids, attention_mask=mask).last_hidden_state  # the real tokens alone (unpad_inputs)
    assert unpadded[~real].abs().max() == 0
    torch.testing.assert_close(out.last_hidden_state[real], unpadded[real], atol=1e-5, rtol=1e-5)
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 3
    assert torch.equal(as_tuple[0], out.last_hidden_state)
    plain = model(ids)
    assert plain.attentions is None and plain.hidden_states is None


def test_output_attentions_from_config_and_heads_return_tuples():
    model = se.SinusoidalEncoderForSequenceClassification(tiny_config(num_labels=2, output_hidden_states=True)).eval()
    out = model(random_ids(2, 5), labels=torch.tensor([0, 1]), return_dict=False)
    loss, logits, hidden_states = out
    assert loss.ndim == 0 and logits.shape == (2, 2) and len(hidden_states) == 3


@pytest.mark.parametrize("norm_first", [False, True])
def test_gradient_checkpointing_gives_the_same_gradients(norm_first):
    config = tiny_config(norm_first=norm_first, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    model = se.SinusoidalEncoderForMaskedLM(config).train()
    ids = random_ids(2, 16)
    labels = ids.clone()
    labels[:, ::3] = -100

    def gradients():
        model.zero_grad()
        torch.manual_seed(123)  # same dropout masks in both runs
        model(ids, labels=labels).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    plain = gradients()
    if hasattr(model, "activation_checkpointing_enable"):  # the name in transformers >= 5.2x
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert all(layer.gradient_checkpointing for layer in model.model.encoder.layers)
    checkpointed = gradients()
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_right_padding_does_not_change_real_tokens(attn_implementation):
    model = AutoModel.from_config(tiny_config(), attn_implementation=attn_implementation).eval()
    ids = random_ids(1, 9)
    padded = torch.cat([ids, torch.zeros(1, 7, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 9), torch.zeros(1, 7)], dim=1).long()
    with torch.no_grad():
        alone = model(ids).last_hidden_state
        with_padding = model(padded, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(with_padding[:, :9], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_fully_masked_row_is_finite(attn_implementation):
    model = AutoModelForMaskedLM.from_config(tiny_config(), attn_implementation=attn_implementation)
    model.eval()
    ids = random_ids(2, 8)
    mask = torch.ones_like(ids)
    mask[1] = 0
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_hidden_states=True)
    assert torch.isfinite(out.logits).all()
    assert all(torch.isfinite(h).all() for h in out.hidden_states)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_left_padding_with_position_ids_equals_right_padding(attn_implementation):
    model = AutoModel.from_config(tiny_config(), attn_implementation=attn_implementation).eval()
    lengths = [10, 6, 3]
    width = max(lengths)
    seqs = [random_ids(1, n, seed=n)[0] for n in lengths]
    right = torch.zeros(3, width, dtype=torch.long)
    left = torch.zeros(3, width, dtype=torch.long)
    right_mask = torch.zeros(3, width, dtype=torch.long)
    left_mask = torch.zeros(3, width, dtype=torch.long)
    left_positions = torch.zeros(3, width, dtype=torch.long)
    for row, (seq, n) in enumerate(zip(seqs, lengths, strict=True)):
        right[row, :n], right_mask[row, :n] = seq, 1
        left[row, width - n :], left_mask[row, width - n :] = seq, 1
        left_positions[row, width - n :] = torch.arange(n)
    with torch.no_grad():
        r = model(right, attention_mask=right_mask).last_hidden_state
        l_ = model(left, attention_mask=left_mask, position_ids=left_positions).last_hidden_state
    torch.testing.assert_close(l_[left_mask.bool()], r[right_mask.bool()], atol=1e-5, rtol=1e-5)


def test_dropout_is_active_in_training_only():
    model = se.SinusoidalEncoderModel(tiny_config(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3))
    ids = random_ids(2, 12)
    model.train()
    assert not torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)
    embedded = model.embeddings(input_ids=ids)
    assert (embedded == 0).float().mean() > 0.1  # dropout on the sum of embeddings and encoding
    model.eval()
    assert torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_unpadded_path_equals_the_padded_one_on_real_tokens(norm_first, attn_implementation):
    """`unpad_inputs` runs token-wise layers on the real tokens only: same outputs and gradients on real tokens."""

    def build(unpad):
        config = tiny_config(norm_first=norm_first, unpad_inputs=unpad, num_labels=3)
        return AutoModelForMaskedLM.from_config(config, attn_implementation=attn_implementation)

    padded_model, unpadded_model = build(False), build(True)
    unpadded_model.load_state_dict(padded_model.state_dict())
    ids = random_ids(3, 17)
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    mask[2, 11:] = 0
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, torch.full_like(ids, -100))
    labels[mask == 0] = -100
    outs = []
    for model in (padded_model, unpadded_model):
        out = model(ids, attention_mask=mask, labels=labels, output_hidden_states=True)
        out.loss.backward()
        outs.append(out)
    real = mask.bool()
    torch.testing.assert_close(outs[1].logits[real], outs[0].logits[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outs[1].loss, outs[0].loss, atol=1e-6, rtol=1e-6)
    for a, b in zip(outs[0].hidden_states, outs[1].hidden_states, strict=True):
        torch.testing.assert_close(b[real], a[real], atol=1e-5, rtol=1e-5)
    for (name, a), b in zip(padded_model.named_parameters(), unpadded_model.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)
    # explicit position_ids (left padding) take the same path
    left = torch.stack([torch.roll(ids[0], 12), ids[1], ids[2]])
    left_mask = torch.stack([torch.roll(mask[0], 12), mask[1], mask[2]])
    positions = (left_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        a = padded_model(left, attention_mask=left_mask, position_ids=positions).logits
        b = unpadded_model(left, attention_mask=left_mask, position_ids=positions).logits
    torch.testing.assert_close(b[left_mask.bool()], a[left_mask.bool()], atol=1e-5, rtol=1e-5)


def test_packed_tokens_lay_out_as_a_right_padded_batch():
    packed = torch.arange(9.0).view(9, 1)  # three sequences of 3, 2 and 4 tokens
    padded, keep = fast_paths.packed_to_padded(packed, torch.tensor([0, 3, 5, 9], dtype=torch.int32), max_length=4)
    assert keep.tolist() == [[True, True, True, False], [True, True, False, False], [True, True, True, True]]
    assert padded[..., 0].tolist() == [[0, 1, 2, 0], [3, 4, 0, 0], [5, 6, 7, 8]]
    assert torch.equal(padded[keep], packed)
    places = fast_paths.padded_places(torch.tensor([0, 3, 5, 9], dtype=torch.int32), 9, max_length=4)
    assert torch.equal(padded.flatten(0, 1)[places], packed)  # the same tokens back, by places known without a read
    cu_seq_lens = torch.tensor([0, 3, 3, 5, 9], dtype=torch.int32)  # an empty sequence among them
    padded, keep = fast_paths.packed_to_padded(packed, cu_seq_lens, max_length=4)
    assert not keep[1].any() and torch.equal(padded.flatten(0, 1)[fast_paths.padded_places(cu_seq_lens, 9, 4)], packed)


@pytest.mark.parametrize("per_sequence", [True, False])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_the_layers_take_packed_tokens_with_transformers_varlen_arguments(
    per_sequence, attn_implementation, monkeypatch
):
    """The unpadded path: embeddings of ids and positions packed together `(1, N)`, layers run with `cu_seq_lens_q/k`
    and `max_length_q/k`; the same hidden states as the padded batch on its real tokens. `per_sequence=False` is the
    layout of GPUs (one call on a padded batch), forced here on the CPU."""
    monkeypatch.setattr(fast_paths, "attends_per_sequence", lambda device: per_sequence)
    model = AutoModel.from_config(tiny_config(), attn_implementation=attn_implementation).eval()
    ids = random_ids(3, 6)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    real = mask.bool()
    positions = torch.arange(6).expand(3, 6)
    cu_seq_lens = torch.tensor([0, 3, 9, 11], dtype=torch.int32)
    with torch.no_grad():
        packed = model.embeddings(input_ids=ids[real][None], position_ids=positions[real][None])  # (1, N, d)
        assert torch.equal(packed[0], model.embeddings(input_ids=ids)[real])
        varlen = {"cu_seq_lens_q": cu_seq_lens, "cu_seq_lens_k": cu_seq_lens, "max_length_q": 6, "max_length_k": 6}
        out = model.encoder(packed, None, **varlen).last_hidden_state  # (1, N, d)
        reference = model(ids, attention_mask=mask, output_hidden_states=True).last_hidden_state  # padded layout
        unpadded = model(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(out[0], reference[real], atol=1e-5, rtol=1e-5)
    assert torch.equal(unpadded[real], out[0]) and unpadded[~real].abs().max() == 0


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_the_packed_layers_never_wait_for_the_device(monkeypatch, attn_implementation):
    """The unpadded path laid out as a padded batch in each layer (GPUs where torch's varlen kernel does not run, as in
    training with attention dropout; forced here on the CPU) reads what only the device knows once per forward pass
    (whether anything is padding, where the real tokens are, the longest sequence), never in a layer: as often with 4
    layers as with 1, in the forward pass and the backward."""
    monkeypatch.setattr(fast_paths, "attends_per_sequence", lambda device: False)
    ids = random_ids(3, 12)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[2, 5:] = 0
    labels = torch.tensor([0, 1, 2])
    reads = {}
    for layers in (1, 4):
        config = tiny_config(num_hidden_layers=layers, num_labels=3)
        model = AutoModelForSequenceClassification.from_config(config, attn_implementation=attn_implementation)
        model.train()
        with HostReads() as watch:
            model(ids, attention_mask=mask, labels=labels).loss.backward()
        reads[layers] = watch.reads
    assert reads[1] == reads[4] and len(reads[4]) == 3, reads


def test_the_sparse_prediction_waits_for_the_device_once():
    """The masked-LM head's sparse prediction finds the labelled positions once for the hidden states and the labels
    (two boolean indexes waited twice), forward and backward, and computes the same loss and gradients as the dense
    head."""
    model = AutoModelForMaskedLM.from_config(tiny_config(sparse_prediction=True))
    dense = AutoModelForMaskedLM.from_config(tiny_config())
    dense.load_state_dict(model.state_dict())
    ids = random_ids(3, 12)
    labels = torch.full_like(ids, -100)
    labels[0, [1, 5]], labels[2, 11] = ids[0, [1, 5]], ids[2, 11]
    with HostReads() as watch:
        loss = model(ids, labels=labels).loss
        loss.backward()
    assert watch.reads == ["nonzero.default"], watch.reads
    expected = dense(ids, labels=labels).loss
    expected.backward()
    torch.testing.assert_close(loss, expected)
    for (name, parameter), reference in zip(model.named_parameters(), dense.parameters(), strict=True):
        torch.testing.assert_close(parameter.grad, reference.grad, msg=name)


def _out_of_place_residuals(sublayer_output, residual):
    return residual + sublayer_output


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("hidden_act", ["relu", "gelu", "gelu_pytorch_tanh", "silu", "tanh", "gelu_new"])
def test_inference_in_place_ops_compute_the_training_graph_values(monkeypatch, norm_first, hidden_act):
    """Without autograd the activation runs in place and each residual sum is added into the sub-layer output: the
    outputs must be bit for bit those of the out-of-place graph that training builds."""
    model = AutoModel.from_config(tiny_config(norm_first=norm_first, hidden_act=hidden_act)).eval()
    ids = random_ids(3, 11)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # the packed path too
    with torch.no_grad():
        fast = [model(ids).last_hidden_state, model(ids, attention_mask=mask).last_hidden_state]
    with monkeypatch.context() as patch:
        patch.setattr(fast_paths, "INPLACE_ACTIVATIONS", {})
        patch.setattr(modeling, "add_residual", _out_of_place_residuals)
        with torch.enable_grad():
            reference = [model(ids).last_hidden_state, model(ids, attention_mask=mask).last_hidden_state]
    assert reference[0].requires_grad  # the graph path really ran
    for a, b in zip(fast, reference, strict=True):
        assert torch.equal(a, b.detach())


def test_activation_kernels_run_in_place_only_without_autograd():
    ffn = modeling.SinusoidalEncoderFeedForward(tiny_config(hidden_act="gelu"))
    seen = []
    ffn.dense_out.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    x = torch.randn(5, 32)
    with torch.no_grad():
        ffn(x)
    ffn(x)
    pre = ffn.dense_in(x)
    torch.testing.assert_close(seen[0], nn.functional.gelu(pre), atol=0, rtol=0)
    assert seen[1].grad_fn is not None and "Gelu" in type(seen[1].grad_fn).__name__  # autograd saw a real GELU


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_stream_keeps_float32_under_autocast(monkeypatch, norm_first):
    """Under bf16 autocast the projections are bf16 while LayerNorm (and so the post-LN residual stream) is float32:
    the residual sums must not be rounded into the bf16 sub-layer outputs."""
    bf16, fp32 = torch.zeros(4, dtype=torch.bfloat16), torch.full((4,), 1.001)
    assert fast_paths.add_residual(bf16, fp32).dtype == torch.float32
    assert torch.equal(fast_paths.add_residual(bf16, fp32), fp32)

    model = AutoModel.from_config(tiny_config(norm_first=norm_first)).eval()
    ids = random_ids(2, 9)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        fast = model(ids).last_hidden_state
        monkeypatch.setattr(modeling, "add_residual", _out_of_place_residuals)
        reference = model(ids).last_hidden_state
    assert torch.equal(fast, reference)


@pytest.mark.parametrize(
    ("seq_len", "training", "written_out"),
    [(40, True, True), (128, True, True), (129, True, False), (40, False, False)],
)
def test_sdpa_trains_short_bf16_sequences_on_the_cpu_with_the_written_out_attention(
    monkeypatch, seq_len, training, written_out
):
    """In bf16 on the CPU with autograd, sdpa hands sequences of at most 128 tokens to the written-out attention
    (faster there: benchmarks/utilization/run.py); the loss and gradients are those of the sdpa kernel up to bf16
    rounding. Longer sequences and inference keep the kernel."""
    written_out_attention, calls = modeling.eager_attention_forward, []

    def counted(*args, **kwargs):
        calls.append(args[1].shape)  # the query, (B, nh, T, hs)
        return written_out_attention(*args, **kwargs)

    monkeypatch.setattr(modeling, "eager_attention_forward", counted)
    config = tiny_config(norm_first=True, max_position_embeddings=256)
    model = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa")
    ids = random_ids(2, seq_len)
    labels = ids.clone()
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.set_grad_enabled(training):
        loss = model(ids, labels=labels).loss
    assert bool(calls) == written_out
    if not written_out:
        return
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    monkeypatch.setattr(modeling, "written_out_is_faster", lambda *args: False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        kernel_loss = model(ids, labels=labels).loss
    kernel_loss.backward()
    torch.testing.assert_close(loss, kernel_loss, atol=2e-2, rtol=2e-2)
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, atol=2e-2, rtol=5e-2, msg=name)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_per_sequence_attention_handles_holes_empty_rows_and_training(attn_implementation):
    """The packed path attends within each row's real tokens: a mask with holes, an all-padding row and dropout-free
    training give the padded path's outputs and gradients on real tokens."""

    def build(unpad):
        return AutoModelForMaskedLM.from_config(
            tiny_config(unpad_inputs=unpad), attn_implementation=attn_implementation
        )

    padded_model, packed_model = build(False), build(True)
    packed_model.load_state_dict(padded_model.state_dict())
    ids = random_ids(4, 10)
    mask = torch.ones_like(ids)
    mask[0, [2, 5, 6]] = 0  # holes
    mask[1] = 0  # nothing real
    mask[3, 4:] = 0
    labels = torch.where(mask.bool(), ids, torch.full_like(ids, -100))
    outs = []
    for model in (padded_model, packed_model):
        out = model(ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        outs.append(out)
    real = mask.bool()
    torch.testing.assert_close(outs[1].logits[real], outs[0].logits[real], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(outs[1].logits).all()
    for (name, a), b in zip(padded_model.named_parameters(), packed_model.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)


def _band(length: int, window: int) -> torch.Tensor:
    positions = torch.arange(length)
    return ((positions[:, None] - positions[None, :]).abs() < window)[None, None]  # (1, 1, T, T)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_long_input_attention_window_applies_past_the_training_length_only(attn_implementation):
    """Inputs up to `max_position_embeddings` attend fully, exactly as without the option; longer ones attend
    within the window: the outputs of an explicit band mask, and right padding changes no real token."""
    window, trained = 4, 12
    windowed = AutoModel.from_config(
        tiny_config(max_position_embeddings=trained, long_input_attention_window=window),
        attn_implementation=attn_implementation,
    ).eval()
    plain = AutoModel.from_config(
        tiny_config(max_position_embeddings=trained), attn_implementation=attn_implementation
    )
    plain.load_state_dict(windowed.state_dict())
    plain.eval()
    short, long = random_ids(2, trained), random_ids(2, 30)
    with torch.no_grad():
        assert torch.equal(windowed(short).last_hidden_state, plain(short).last_hidden_state)
        got = windowed(long).last_hidden_state
        expected = plain(long, attention_mask=_band(30, window)).last_hidden_state
        assert torch.equal(got, expected)
        assert not torch.allclose(got, plain(long).last_hidden_state)
        padded = torch.cat([long, torch.zeros(2, 6, dtype=torch.long)], dim=1)
        mask = torch.cat([torch.ones(2, 30), torch.zeros(2, 6)], dim=1).long()
        torch.testing.assert_close(
            windowed(padded, attention_mask=mask).last_hidden_state[:, :30], got, atol=1e-5, rtol=1e-5
        )


def test_long_input_attention_window_limits_what_a_token_sees():
    """One layer: a token's output ignores tokens `window` or more positions away, and only those."""
    model = AutoModel.from_config(
        tiny_config(num_hidden_layers=1, max_position_embeddings=8, long_input_attention_window=5)
    ).eval()
    ids = random_ids(1, 20)
    changed = ids.clone()
    changed[0, 0] = ids[0, 0] % (VOCAB_SIZE - 2) + 1
    with torch.no_grad():
        a, b = model(ids).last_hidden_state[0], model(changed).last_hidden_state[0]
    moved = [int(not torch.allclose(a[i], b[i])) for i in range(20)]
    assert moved == [1] * 5 + [0] * 15  # positions 0…4 see position 0; 5 and beyond do not


def test_long_input_attention_window_refuses_flash_attention_and_bad_values():
    model = se.SinusoidalEncoderModel(tiny_config(max_position_embeddings=8, long_input_attention_window=4)).eval()
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="long_input_attention_window"):
        model(random_ids(1, 9))
    for value in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="long_input_attention_window"):
            tiny_config(long_input_attention_window=value)


@pytest.mark.parametrize("per_sequence", [True, False])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_padding_free_batches_of_data_collator_with_flattening(per_sequence, attn_implementation, monkeypatch):
    """transformers' `DataCollatorWithFlattening(return_flash_attn_kwargs=True)` packs sequences into one row with
    their positions and `cu_seq_lens_q/k`: each sequence's outputs are those it has alone, and the masked-LM loss is
    that of the packed labels."""
    from transformers import DataCollatorWithFlattening

    monkeypatch.setattr(fast_paths, "attends_per_sequence", lambda device: per_sequence)
    model = AutoModelForMaskedLM.from_config(tiny_config(), attn_implementation=attn_implementation).eval()
    sequences = [random_ids(1, n, seed=n)[0].tolist() for n in (5, 9, 3)]
    collator = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=True)
    batch = collator([{"input_ids": ids} for ids in sequences])
    assert batch["input_ids"].shape == (1, 17) and batch["cu_seq_lens_q"].tolist() == [0, 5, 14, 17]
    with torch.no_grad():
        packed = model(**batch)
        alone = torch.cat([model(torch.tensor([ids])).logits[0] for ids in sequences])
    torch.testing.assert_close(packed.logits[0], alone, atol=1e-5, rtol=1e-5)
    labels = batch["labels"][0]
    expected = torch.nn.functional.cross_entropy(alone[labels != -100], labels[labels != -100])
    torch.testing.assert_close(packed.loss, expected, atol=1e-5, rtol=1e-5)
