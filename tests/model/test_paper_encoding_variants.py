"""Ways of using the paper's encoding PE(pos) other than adding it once to the embeddings, each a registered
`position_encoding`: `"scaled_sinusoidal"` (PE times a learned scalar, a LayerNorm on the embedding sum, as in
Cramming), `"sinusoidal_every_layer"` (PE added again at every layer's input, as the Universal Transformer does) and
`"tupe"` (untied positional attention: a positional term of the scores from PE through projections of its own,
shared by the layers, [CLS] untied) and `"sinusoidal_relative"` (the encoding of the offset between tokens, weighted
per head into a bias on the scores). What each claims, every attention path, a model compiled, the ONNX
export."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import assert_rows_match_alone, padded_batch, random_ids, tiny_config
from torch.nn import functional as F
from transformers import AutoModel

import sinusoidal_encoder as se
from sinusoidal_encoder import fast_paths
from sinusoidal_encoder.positions import POSITION_ENCODINGS, sinusoidal_position_encoding

VARIANTS = ["scaled_sinusoidal", "sinusoidal_every_layer", "tupe", "sinusoidal_relative"]
BIASED = ("tupe", "sinusoidal_relative")  # the encodings that bias the scores


def model_with(encoding: str, attn_implementation: str = "sdpa", **overrides):
    config = tiny_config(position_encoding=encoding, **overrides)
    return AutoModel.from_config(config, attn_implementation=attn_implementation).eval()


def twin(model, attn_implementation: str = "sdpa", **overrides):
    """A model of `model`'s config with `overrides`, every weight of it `model`'s."""
    config = copy.deepcopy(model.config)
    for name, value in overrides.items():
        setattr(config, name, value)
    config.check()
    other = AutoModel.from_config(config, attn_implementation=attn_implementation).eval()
    missing, _ = other.load_state_dict(model.state_dict(), strict=False)
    assert not missing, missing
    return other


def with_drawn_parameters(model):
    """`model` with the learned parts of its positions drawn away from their initial values (α = 1, θ = 0)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "position_scale" in name or "first_token" in name:
                parameter.copy_(torch.randn_like(parameter))
    return model


def layer_inputs(model, *args, **kwargs) -> list[tuple]:
    """The positional arguments each layer of `model` received in one forward pass: (hidden_states, mask, ...)."""
    seen = []
    hooks = [layer.register_forward_pre_hook(lambda module, args: seen.append(args)) for layer in model.encoder.layers]
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


# ----------------------------------------------------------------------------------------------------------------
# every variant: the registry, every attention path, compiled


@pytest.mark.parametrize("encoding", VARIANTS)
def test_every_variant_is_registered_with_its_card_and_reads_the_base(encoding):
    entry = POSITION_ENCODINGS[encoding]
    assert entry.parameters == ("position_encoding_base",) and entry.card.tags
    model = model_with(encoding, position_encoding_base=500.0, initializer_range=0.3)
    ids = random_ids(1, 9)
    with torch.no_grad():
        other_base = twin(model, position_encoding_base=10000.0, initializer_range=0.3)(ids).last_hidden_state
        assert (model(ids).last_hidden_state - other_base).abs().max() > 1e-4  # the base reaches the positions


@pytest.mark.parametrize("per_sequence", [True, False])
@pytest.mark.parametrize("encoding", VARIANTS)
def test_sdpa_equals_eager_and_padded_rows_equal_rows_alone(encoding, per_sequence, monkeypatch):
    """A padded batch (packed per sequence or as a padded batch where the encoding allows it, the padded layout with
    TUPE's bias) gives each row the hidden states of the row alone, with sdpa as with eager attention, and the two
    agree; the returned-attentions path agrees too."""
    monkeypatch.setattr(fast_paths, "attends_per_sequence", lambda device: per_sequence)
    eager = with_drawn_parameters(model_with(encoding, "eager", initializer_range=0.2))
    sdpa = twin(eager, "sdpa", initializer_range=0.2)
    ids, mask = padded_batch()
    expected = assert_rows_match_alone(eager, ids, mask)
    got = assert_rows_match_alone(sdpa, ids, mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        with_attentions = sdpa(ids, attention_mask=mask, output_attentions=True)
    torch.testing.assert_close(with_attentions.last_hidden_state[real], got[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("encoding", VARIANTS)
def test_every_variant_trains_and_runs_past_the_training_length_with_the_window(encoding):
    model = model_with(encoding, long_input_attention_window=8).train()
    ids = random_ids(2, 100)  # past max_position_embeddings (64): the window applies
    model(ids).last_hidden_state.square().mean().backward()
    learned = [name for name, p in model.named_parameters() if "position" in name and p.grad is not None]
    assert all(model.get_parameter(name).grad.abs().sum() > 0 for name in learned)
    assert ("position_scale" in " ".join(learned)) == (encoding == "scaled_sinusoidal")
    assert ("first_token_row" in " ".join(learned)) == (encoding == "tupe")


@pytest.mark.parametrize("encoding", VARIANTS)
def test_every_variant_compiles_to_one_graph_equal_to_eager(encoding):
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    model = with_drawn_parameters(model_with(encoding))
    compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
    ids, mask = padded_batch()
    try:
        with torch.no_grad():
            for length in (7, 12, 9):
                short_ids, short_mask = ids[:, :length].contiguous(), mask[:, :length].contiguous()
                got = compiled(short_ids, attention_mask=short_mask).last_hidden_state
                expected = model(short_ids, attention_mask=short_mask).last_hidden_state
                real = short_mask.bool()
                torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    finally:
        torch._dynamo.reset()
    assert counter.frame_count == 1  # no graph break (fullgraph), no recompilation per length


@pytest.mark.slow
@pytest.mark.parametrize("encoding", VARIANTS)
def test_every_variant_exports_to_onnx_and_runs_at_any_length(encoding, tmp_path):
    """PE, its learned scale, TUPE's positional term are computed inside the graph from the positions: onnxruntime
    equals PyTorch at lengths 8 and 300 (past the 16 positions of the config), padded rows included."""
    pytest.importorskip("onnxscript", reason="ONNX export needs onnxscript (the `integrations` extra)")
    pytest.importorskip("onnxruntime", reason="the ONNX check needs onnxruntime (the `integrations` extra)")
    from sinusoidal_encoder_training.publishing.onnx_export import check_onnx, export_onnx

    model = se.SinusoidalEncoderModel(tiny_config(position_encoding=encoding, max_position_embeddings=16)).eval()
    model = with_drawn_parameters(model)
    path = export_onnx(model, str(tmp_path / "model.onnx"), "last_hidden_state")
    assert check_onnx(model, path, "last_hidden_state", lengths=(8, 300)) <= 1e-4


# ----------------------------------------------------------------------------------------------------------------
# "scaled_sinusoidal"


def test_scaled_sinusoidal_is_the_papers_sum_scaled_then_normalised():
    """At initialisation the LayerNorm receives the paper's embedding sum bit for bit (α = 1), and the embeddings are
    LayerNorm(E[x]·√d + α·PE) for any α: the scalar scales PE alone."""
    model = model_with("scaled_sinusoidal")
    paper = twin(model, position_encoding="sinusoidal")
    ids = random_ids(2, 11)
    summed = []
    model.embeddings.add_encoding.norm.register_forward_pre_hook(lambda module, args: summed.append(args[0]))
    norm = model.embeddings.add_encoding.norm
    with torch.no_grad():
        embedded = model.embeddings(input_ids=ids)
        assert model.embeddings.add_encoding.position_scale.item() == 1.0
        assert torch.equal(summed[0], paper.embeddings(input_ids=ids))  # today's h₀, then the LayerNorm
        assert torch.equal(embedded, F.layer_norm(summed[0], (32,), norm.weight, norm.bias, norm.eps))
        model.embeddings.add_encoding.position_scale.fill_(0.25)
        tokens = model.embeddings.word_embeddings(ids) * math.sqrt(32)
        pe = sinusoidal_position_encoding(torch.arange(11), 32)
        expected = F.layer_norm(tokens + 0.25 * pe, (32,), norm.weight, norm.bias, norm.eps)
        torch.testing.assert_close(model.embeddings(input_ids=ids), expected, atol=1e-6, rtol=1e-6)


def test_scaled_sinusoidal_from_a_checkpoint_of_the_paper_starts_at_its_initial_values(tmp_path):
    """A checkpoint of the paper's encoding continued with `"scaled_sinusoidal"` (the model built on the meta device
    and loaded): the scale and the LayerNorm it lacks are initialised (α = 1, LayerNorm 1 and 0), not left empty."""
    se.SinusoidalEncoderModel(tiny_config()).save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path, position_encoding="scaled_sinusoidal")
    summed = loaded.embeddings.add_encoding
    assert summed.position_scale.item() == 1.0
    assert torch.equal(summed.norm.weight, torch.ones(32)) and torch.equal(summed.norm.bias, torch.zeros(32))


# ----------------------------------------------------------------------------------------------------------------
# "sinusoidal_every_layer"


def test_every_layer_gets_the_encoding_added_to_its_input():
    """The embeddings are the paper's h₀; layer l > 0 receives the output of layer l - 1 plus PE(pos) of the same
    positions (explicit ones as well)."""
    model = model_with("sinusoidal_every_layer", num_hidden_layers=3)
    positions = torch.tensor([[3, 4, 5, 9, 20, 21, 22]])
    ids = random_ids(2, 7)
    inputs = layer_inputs(model, ids, position_ids=positions)
    with torch.no_grad():
        hidden = model(ids, position_ids=positions, output_hidden_states=True).hidden_states
        paper = twin(model, position_encoding="sinusoidal")
        assert torch.equal(hidden[0], paper.embeddings(input_ids=ids, position_ids=positions))  # the paper's h₀
    pe = sinusoidal_position_encoding(positions, 32)
    assert torch.equal(inputs[0][0], hidden[0])
    for index in (1, 2):
        assert torch.equal(inputs[index][0], hidden[index] + pe)


def test_every_layer_with_one_layer_is_the_papers_model():
    """With one layer there is no later layer: the model is `"sinusoidal"` bit for bit, padded batches included."""
    model = model_with("sinusoidal_every_layer", num_hidden_layers=1)
    paper = se.SinusoidalEncoderModel(tiny_config(num_hidden_layers=1)).eval()
    paper.load_state_dict(model.state_dict())
    ids, mask = padded_batch()
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state, paper(ids, attention_mask=mask)[0])
        deeper = model_with("sinusoidal_every_layer", num_hidden_layers=2)
        paper_deeper = twin(deeper, position_encoding="sinusoidal")
        assert not torch.allclose(deeper(ids).last_hidden_state, paper_deeper(ids).last_hidden_state)


# ----------------------------------------------------------------------------------------------------------------
# "tupe"


def test_tupe_adds_nothing_to_the_input_and_its_term_depends_on_positions_alone():
    """The embeddings are E[x]·√d alone; the bias every layer receives is the same tensor for all layers, the same
    for other tokens (it depends on positions alone), and changes with the positions."""
    model = with_drawn_parameters(model_with("tupe", initializer_range=0.2))
    ids, other_ids = random_ids(1, 9), random_ids(1, 9, seed=5)
    with torch.no_grad():
        embedded = model.embeddings(input_ids=ids)
    assert torch.equal(embedded, model.embeddings.word_embeddings(ids) * math.sqrt(32))
    first, second = layer_inputs(model, ids)
    assert first[1] is second[1] and first[1].shape == (1, 4, 9, 9)  # computed once, shared by the layers
    assert torch.equal(layer_inputs(model, other_ids)[0][1], first[1])  # tokens do not enter it
    moved = layer_inputs(model, ids, position_ids=torch.arange(9)[None] * 7)[0][1]
    assert (moved[:, :, 1:, 1:] - first[1][:, :, 1:, 1:]).abs().max() > 1e-3


def test_tupe_positional_term_is_the_papers_with_cls_untied():
    """bias_h(i, j) = (PE_i U_Q)(PE_j U_K)ᵀ/√(2·hs) for i, j > 0 (float64 reference); the first token's row is θ₁
    and its column θ₂ per head, whatever the positions."""
    model = with_drawn_parameters(model_with("tupe", initializer_range=0.2))
    scores = model.learned_positions
    positions = torch.tensor([[0, 1, 2, 7, 300], [5, 9, 12, 13, 40]])
    with torch.no_grad():
        bias = scores(positions).bias.double()  # (B, nh, T, T)
        other = scores(positions * 3 + 11).bias.double()
    pe = sinusoidal_position_encoding(positions, 32, dtype=torch.float64)  # (B, T, d)
    query = (pe @ scores.query.weight.double().T).view(2, 5, 4, 8).transpose(1, 2)
    key = (pe @ scores.key.weight.double().T).view(2, 5, 4, 8).transpose(1, 2)
    expected = query @ key.transpose(-1, -2) / math.sqrt(2 * 8)
    torch.testing.assert_close(bias[:, :, 1:, 1:], expected[:, :, 1:, 1:], atol=1e-5, rtol=1e-5)
    theta_row, theta_column = scores.first_token_row.double(), scores.first_token_column.double()
    for term in (bias, other):
        assert torch.equal(term[:, :, 0, :], theta_row[None, :, None].expand(2, 4, 5))  # [CLS] attending
        assert torch.equal(term[:, :, 1:, 0], theta_column[None, :, None].expand(2, 4, 4))  # attending to [CLS]
    assert (other[:, :, 1:, 1:] - bias[:, :, 1:, 1:]).abs().max() > 1e-3


def test_tupe_word_term_is_scaled_by_one_over_root_two_hs():
    """Without its positional term (U_Q = U_K = 0, θ = 0) the model is the position-free model whose queries are
    divided by √2: the word term of the scores is scaled by 1/√(2·hs) instead of 1/√hs."""
    model = model_with("tupe", initializer_range=0.2)
    assert model.encoder.layers[0].attention.scaling == (2 * 8) ** -0.5
    with torch.no_grad():
        for parameter in model.learned_positions.parameters():
            parameter.zero_()
    plain = se.SinusoidalEncoderModel(tiny_config(position_mode="none", initializer_range=0.2)).eval()
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("learned_positions.")}
    for index in range(2):
        for part in ("weight", "bias"):
            name = f"encoder.layers.{index}.attention.qkv.{part}"
            state[name] = state[name].clone()
            state[name][:32] /= math.sqrt(2)  # the query rows of [Q; K; V]
    plain.load_state_dict(state)
    ids, mask = padded_batch()
    real = mask.bool()
    with torch.no_grad():
        got, expected = model(ids, attention_mask=mask)[0], plain(ids, attention_mask=mask)[0]
    torch.testing.assert_close(got[real], expected[real])


# "sinusoidal_relative"


def test_relative_term_is_the_papers_encoding_of_the_offset():
    """bias_h(i, j) = w_h·PE(p_j − p_i), [CLS] included, against the encoding of every offset computed directly in
    float64: the same for positions shifted by any k, other for positions spaced otherwise."""
    model = with_drawn_parameters(model_with("sinusoidal_relative", initializer_range=0.2))
    scores = model.learned_positions
    positions = torch.tensor([[0, 1, 2, 7, 300], [5, 9, 12, 13, 40]])
    with torch.no_grad():
        bias = scores(positions).bias.double()  # (B, nh, T, T)
        shifted = scores(positions + 1000).bias.double()
        spaced = scores(positions * 3).bias.double()
    offsets = positions[:, None, :] - positions[:, :, None]  # (B, T, T): p_j − p_i
    pe = sinusoidal_position_encoding(offsets, 32, dtype=torch.float64)  # (B, T, T, d)
    expected = torch.einsum("bijd,hd->bhij", pe, scores.weight.double())  # (B, nh, T, T)
    torch.testing.assert_close(bias, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shifted, bias, atol=1e-5, rtol=1e-5)  # the offset alone
    assert (spaced - bias).abs().max() > 1e-3


def test_relative_model_gives_a_sequence_the_same_states_wherever_it_starts():
    """Nothing is added to the input and the term depends on offsets alone: the hidden states of a sequence are the
    same whether its positions start at 0 or at 500 (past the training length), but not if they are spread."""
    model = with_drawn_parameters(model_with("sinusoidal_relative", initializer_range=0.2))
    ids = random_ids(2, 9)
    with torch.no_grad():
        at_zero = model(ids).last_hidden_state
        later = model(ids, position_ids=torch.arange(9)[None] + 500).last_hidden_state
        spread = model(ids, position_ids=torch.arange(9)[None] * 5).last_hidden_state
    torch.testing.assert_close(later, at_zero, atol=1e-5, rtol=1e-5)
    assert (spread - at_zero).abs().max() > 1e-3


@pytest.mark.parametrize("encoding", BIASED)
def test_a_bias_of_the_paper_encoding_with_flash_attention_is_refused_in_one_line(encoding):
    model = model_with(encoding)
    model.config._attn_implementation = "flash_attention_2"  # the check, without a flash kernel on the CPU
    with pytest.raises(ValueError, match=rf"position_encoding='{encoding}'.*flash attention cannot take") as error:
        model(random_ids(1, 5))
    assert "\n" not in str(error.value)


def test_the_cost_study_times_each_variant_against_the_shipped_encoding_in_the_training_cell(capsys):
    """benchmarks/length_generalization/paper_encoding/cost.py: each pair is the utilisation benchmark's training
    worker with the shipped encoding and with the variant; a bad count is one line."""
    from benchmarks.length_generalization.paper_encoding import cost

    args = cost.parse_args(["--encodings", "tupe", "--precisions", "bf16"])
    shipped, variant = (cost.worker(encoding, "bf16", args) for encoding in (cost.SHIPPED, "tupe"))
    assert shipped[shipped.index("--_worker") + 1 :] == variant[variant.index("--_worker") + 1 :]
    assert ["--_worker", "ours", "train", "bf16", "eager"] == variant[variant.index("--_worker") :]
    assert variant[variant.index("--position_encoding") + 1] == "tupe"
    assert shipped[shipped.index("--position_encoding") + 1] == "sinusoidal"
    row = {"encoding": "tupe", "precision": "bf16", "shipped_seconds": 1.0, "seconds": 1.25, "tokens": 2048}
    assert cost.format_row({**row, "speed": 0.8}).endswith("| 0.800 | ≥ 0.9: missed |")
    with pytest.raises(SystemExit):
        cost.parse_args(["--repeats", "0"])
    assert "--repeats must be at least 1, got 0." in capsys.readouterr().err
