"""Contracts transformers users rely on without reading our code: every return form of
`from_pretrained`, gradients through returned hidden states, all-padding batches, empty inputs; then the rest of
what transformers' common model tests check for BERT (base/head checkpoints both ways, mismatched sizes, missing
weights, embedding accessors, inputs_embeds, attention gradients, batching, torch.export, device_map, adapters)."""

from __future__ import annotations

import re

import pytest
import torch
import transformers
from conftest import random_ids, tiny_config
from transformers import AutoModel, AutoModelForMaskedLM

import sinusoidal_encoder as se


@pytest.mark.parametrize("auto_name", ["AutoModel", "AutoModelForMaskedLM", "AutoModelForSequenceClassification"])
def test_from_pretrained_returns_loading_info_when_asked(tmp_path, auto_name):
    se.SinusoidalEncoderForMaskedLM(tiny_config(num_labels=2)).save_pretrained(tmp_path)
    model, info = getattr(transformers, auto_name).from_pretrained(tmp_path, output_loading_info=True)
    assert isinstance(model, se.SinusoidalEncoderPreTrainedModel)
    assert {"missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"} <= set(info)
    assert not info["unexpected_keys"]  # the masked-LM head is expected to go unused (no LOAD REPORT about it)
    if auto_name == "AutoModelForSequenceClassification":  # a new head: reported missing, as for BERT
        assert any(key.startswith("classifier") for key in info["missing_keys"])
    else:
        assert not info["missing_keys"]
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert isinstance(loaded, se.SinusoidalEncoderForMaskedLM)  # the plain form is unchanged


HEADS = [name for name in se.__all__ if name.startswith("SinusoidalEncoderFor")]


@pytest.mark.parametrize("head", HEADS)
def test_the_bare_encoder_loads_from_any_head_without_a_report(tmp_path, head, capfd):
    """sentence-transformers and feature extraction load a fine-tuned folder as the bare encoder: its head is no
    weight of the encoder, nothing to report (a LOAD REPORT listing it UNEXPECTED on every load); the encoder's
    weights are the folder's."""
    saved = getattr(se, head)(tiny_config(num_labels=3))
    saved.save_pretrained(tmp_path)
    capfd.readouterr()
    model, info = AutoModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["unexpected_keys"] and not info["missing_keys"], info
    assert "LOAD REPORT" not in "".join(capfd.readouterr())
    assert all(torch.equal(value, saved.model.state_dict()[key]) for key, value in model.state_dict().items())
    # the names ignored are the heads' own: an unknown weight is still reported
    names = {key.split(".")[0] for key in saved.state_dict() if not key.startswith("model.")}
    assert all(
        any(re.match(p, name + ".") for p in se.SinusoidalEncoderModel._keys_to_ignore_on_load_unexpected)
        for name in names
    )


def test_a_weight_of_no_head_is_still_reported(tmp_path):
    state = se.SinusoidalEncoderForSequenceClassification(tiny_config(num_labels=2)).state_dict()
    state["adapter.weight"] = torch.zeros(2)
    from safetensors.torch import save_file

    tiny_config(num_labels=2).save_pretrained(tmp_path)
    save_file({key: value.contiguous() for key, value in state.items()}, str(tmp_path / "model.safetensors"))
    _, info = AutoModel.from_pretrained(tmp_path, output_loading_info=True)
    assert set(info["unexpected_keys"]) == {"adapter.weight"}


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_returned_hidden_states_receive_gradients(norm_first, padded):
    """`hidden_states[i].retain_grad()` then `backward()` fills `.grad` for every layer's input, padded or not, and
    the gradients equal those of the padded layout (unpad_inputs=False)."""
    ids = random_ids(3, 9)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, 5:] = 0
        mask[2, 2:] = 0
    grads = []
    for unpad in (True, False):
        torch.manual_seed(0)
        model = AutoModel.from_config(tiny_config(norm_first=norm_first, unpad_inputs=unpad))
        out = model(ids, attention_mask=mask, output_hidden_states=True)
        for state in out.hidden_states:
            state.retain_grad()
        (out.last_hidden_state * mask[..., None]).square().sum().backward()
        assert all(state.grad is not None for state in out.hidden_states)
        grads.append([state.grad * mask[..., None] for state in out.hidden_states])
        assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    for with_unpadding, without in zip(*grads, strict=True):
        torch.testing.assert_close(with_unpadding, without, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("unpad_inputs", [True, False])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_an_all_padding_batch_gives_finite_outputs(unpad_inputs, attn_implementation):
    model = AutoModelForMaskedLM.from_config(
        tiny_config(unpad_inputs=unpad_inputs), attn_implementation=attn_implementation
    ).eval()
    ids = random_ids(2, 6)
    mask = torch.zeros_like(ids)
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_hidden_states=True)
    assert out.logits.shape == (2, 6, model.config.vocab_size) and torch.isfinite(out.logits).all()
    assert all(torch.isfinite(state).all() for state in out.hidden_states)


@pytest.mark.parametrize("field", ["input_ids", "inputs_embeds"])
def test_an_empty_sequence_is_refused_by_name(field):
    model = AutoModel.from_config(tiny_config())
    given = torch.zeros(2, 0, dtype=torch.long) if field == "input_ids" else torch.zeros(2, 0, 32)
    with pytest.raises(ValueError, match=f"`{field}` has no tokens"):
        model(**{field: given})


# The rest of the class: what transformers' common model tests (tests/test_modeling_common.py) check for BERT, where
# no other test file covers it. Covered elsewhere: save/load round trips in every head, sharded and bf16
# (test_auto_and_save.py); tied and untied decoders, resizing (test_heads.py); attentions, hidden states, tuple
# outputs, gradient checkpointing, eager/sdpa/flash (test_model.py); torch.compile (test_compile.py); ONNX
# (test_onnx.py); mismatched label counts through fine-tuning (test_finetuning.py). Not applicable: head masking and
# TorchScript tracing with `config.torchscript`, which transformers 5 dropped for BERT too (torch.export instead).
HEAD_CLASSES = [  # every head of AUTO_MAP (its model classes but the bare encoder)
    model_class for model_class in se.AUTO_CLASSES.values() if model_class is not se.SinusoidalEncoderModel
]


@pytest.mark.parametrize("head_class", HEAD_CLASSES)
def test_a_base_checkpoint_loads_into_every_head(tmp_path, head_class):
    base = se.SinusoidalEncoderModel(tiny_config())
    base.save_pretrained(tmp_path)
    head, info = head_class.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    assert info["missing_keys"] and not any(key.startswith("model.") for key in info["missing_keys"])
    for name, value in base.state_dict().items():
        assert torch.equal(head.model.state_dict()[name], value), name


@pytest.mark.parametrize("head_class", HEAD_CLASSES)
def test_a_head_checkpoint_loads_into_the_base_model(tmp_path, head_class):
    head = head_class(tiny_config())
    head.save_pretrained(tmp_path)
    base, info = AutoModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"]
    for name, value in base.state_dict().items():
        assert torch.equal(head.model.state_dict()[name], value), name


def test_another_label_count_needs_ignore_mismatched_sizes(tmp_path):
    se.SinusoidalEncoderForSequenceClassification(tiny_config(num_labels=2)).save_pretrained(tmp_path)
    with pytest.raises((RuntimeError, ValueError), match=r"(?i)size|shape"):
        se.SinusoidalEncoderForSequenceClassification.from_pretrained(tmp_path, num_labels=5)
    model, info = se.SinusoidalEncoderForSequenceClassification.from_pretrained(
        tmp_path, num_labels=5, ignore_mismatched_sizes=True, output_loading_info=True
    )
    assert info["mismatched_keys"]
    logits = model(random_ids(2, 7)).logits
    assert logits.shape == (2, 5) and torch.isfinite(logits).all()


def test_a_missing_weight_is_initialised_by_the_model_not_left_empty(tmp_path):
    from safetensors.torch import load_file, save_file

    se.SinusoidalEncoderForMaskedLM(tiny_config(initializer_range=0.02)).save_pretrained(tmp_path)
    weights = load_file(str(tmp_path / "model.safetensors"))
    del weights["lm_head.dense.weight"]
    save_file(weights, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    model, info = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == {"lm_head.dense.weight"} or list(info["missing_keys"]) == ["lm_head.dense.weight"]
    weight = model.lm_head.dense.weight
    assert abs(weight.std().item() - 0.02) < 0.005 and abs(weight.mean().item()) < 0.005


def test_embedding_accessors_and_main_input_name():
    model = se.SinusoidalEncoderForMaskedLM(tiny_config())
    assert model.main_input_name == "input_ids"
    assert isinstance(model.get_input_embeddings(), torch.nn.Embedding)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    replacement = torch.nn.Embedding(model.config.vocab_size, model.config.hidden_size)
    model.set_input_embeddings(replacement)
    assert model.get_input_embeddings() is replacement and model.model.embeddings.word_embeddings is replacement


def test_inputs_embeds_are_the_embedding_lookup():
    """As BERT: `inputs_embeds` replaces the lookup `get_input_embeddings()(input_ids)`; the scale by √d and the
    position encoding are applied to either alike."""
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    ids = random_ids(2, 9)
    expected = model(input_ids=ids).last_hidden_state
    got = model(inputs_embeds=model.get_input_embeddings()(ids)).last_hidden_state
    torch.testing.assert_close(got, expected)


def test_returned_attentions_receive_gradients():
    model = se.SinusoidalEncoderModel(tiny_config(attention_probs_dropout_prob=0.0))
    outputs = model(random_ids(2, 9), output_attentions=True)
    outputs.attentions[0].retain_grad()
    outputs.last_hidden_state.sum().backward()
    assert outputs.attentions[0].grad is not None and outputs.attentions[0].grad.abs().sum() > 0


def test_a_batch_computes_what_its_rows_compute_alone():
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    ids = random_ids(3, 11)
    batch = model(ids).last_hidden_state
    for row in range(3):
        torch.testing.assert_close(model(ids[row : row + 1]).last_hidden_state[0], batch[row], atol=1e-5, rtol=1e-5)


def test_torch_export_with_a_dynamic_sequence_length():
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    length = torch.export.Dim("length", min=2, max=4096)
    program = torch.export.export(model, (random_ids(2, 9),), dynamic_shapes=({1: length},), strict=False)
    for seq_len in (5, 70):
        ids = random_ids(2, seq_len, seed=seq_len)
        torch.testing.assert_close(program.module()(ids)[0], model(ids).last_hidden_state)


def test_big_model_loading_with_a_device_map(tmp_path):
    model = se.SinusoidalEncoderForMaskedLM(tiny_config()).eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path, device_map="auto")
    assert se.SinusoidalEncoderPreTrainedModel._no_split_modules  # what device_map="auto" keeps on one device
    assert {parameter.device.type for parameter in loaded.parameters()} == {"cpu"}
    ids = random_ids(2, 9)
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits)


def test_input_gradients_for_adapters_with_frozen_weights_and_checkpointing():
    """PEFT's recipe: frozen weights, gradient checkpointing, `enable_input_require_grads()`: the loss still has a
    graph back to the adapters' inputs."""
    model = se.SinusoidalEncoderForMaskedLM(tiny_config())
    model.activation_checkpointing_enable()
    model.enable_input_require_grads()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    model.train()
    assert model(random_ids(2, 9)).logits.requires_grad


def test_eval_outputs_are_deterministic():
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    ids = random_ids(2, 9)
    assert torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)


def test_the_attention_implementation_can_be_set_dynamically(caplog):
    """As transformers' common `test_can_set_attention_dynamically`: `set_attn_implementation` switches a loaded
    model (every sub-module's config) without a warning, BERT does the same, and the outputs agree."""
    model = AutoModelForMaskedLM.from_config(tiny_config(), attn_implementation="sdpa").eval()
    ids = random_ids(2, 9)
    with torch.no_grad():
        sdpa = model(ids).logits
    with caplog.at_level("WARNING", logger="transformers"):
        model.set_attn_implementation("eager")
    assert "does not support setting its attention implementation" not in caplog.text
    assert all(
        module.config._attn_implementation == "eager" for module in model.modules() if hasattr(module, "config")
    )
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, sdpa, atol=1e-5, rtol=1e-5)
    assert type(model)._can_set_attn_implementation() == transformers.BertModel._can_set_attn_implementation()


@pytest.mark.parametrize("selection", [[0, 2, -1], [1], 1, -1, [5], [], True, False])
def test_output_hidden_states_selects_states_as_bert_does(selection):
    """`output_hidden_states` takes a flag, an index or a list of indices (negative ones from the end): the selected
    states are those of `output_hidden_states=True`, the others None, exactly where BERT puts them."""
    config = tiny_config()
    ours = AutoModel.from_config(config).eval()
    bert = transformers.BertModel(
        transformers.BertConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads,
            intermediate_size=config.intermediate_size,
        )
    ).eval()
    ids = random_ids(2, 7)
    with torch.no_grad():
        every = ours(ids, output_hidden_states=True).hidden_states
        selected = ours(ids, output_hidden_states=selection).hidden_states
        expected = bert(ids, output_hidden_states=selection).hidden_states
    if expected is None:
        assert selected is None
        return
    assert [state is None for state in selected] == [state is None for state in expected]
    for state, reference in zip(selected, every, strict=True):
        assert state is None or torch.equal(state, reference)
