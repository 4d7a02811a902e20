"""What serving engines require of a custom encoder, checked on the model itself. vLLM's Transformers backend runs a
model whose attention goes through transformers' `ALL_ATTENTION_FUNCTIONS` (it registers its own function there and
selects it by `attn_implementation`), whose forward passes its keyword arguments down to that function, whose
attention modules say `is_causal = False`, whose class says `_supports_attention_backend = True`, and whose config has
an `auto_map` for `AutoModel` (it loads with `trust_remote_code`). Running vLLM itself needs a GPU build: not run
here."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import padded_batch, random_ids, tiny_config
from transformers import AttentionInterface, AutoModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

import sinusoidal_encoder as se

SEEN: list[dict] = []


def recording_attention(module, query, key, value, attention_mask, **kwargs):
    """An attention function registered under its own name, as vLLM registers its own: it records what reaches it
    and computes sdpa's attention."""
    SEEN.append({"module": module, "shape": tuple(query.shape), **kwargs})
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


@pytest.fixture
def recording():
    """The function registered as transformers documents it: with the form of padding mask it takes (sdpa's)."""
    AttentionInterface.register("recording", recording_attention)
    AttentionMaskInterface.register("recording", sdpa_mask)
    SEEN.clear()
    yield SEEN
    SEEN.clear()


@pytest.mark.parametrize("encoding", ["sinusoidal", "rotary", "alibi"])
def test_attention_goes_through_the_registered_function_with_the_callers_kwargs(recording, encoding):
    model = AutoModel.from_config(tiny_config(position_encoding=encoding), attn_implementation="recording").eval()
    ids, mask = padded_batch()
    reference = AutoModel.from_config(tiny_config(position_encoding=encoding), attn_implementation="sdpa").eval()
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        out = model(ids, attention_mask=mask, engine_metadata="from the engine").last_hidden_state
        expected = reference(ids, attention_mask=mask).last_hidden_state
    assert len(recording) == model.config.num_hidden_layers  # one call per layer, through the registered function
    for call in recording:
        assert call["engine_metadata"] == "from the engine"  # the caller's keyword arguments reach it
        assert call["module"].is_causal is False
        assert "position_embeddings" not in call  # the rotation is applied before, not handed to the engine
    real = mask.bool()
    torch.testing.assert_close(out[real], expected[real], atol=1e-5, rtol=1e-5)  # the outputs do not change


def test_the_model_class_and_a_saved_config_declare_what_the_transformers_backend_reads(tmp_path):
    assert se.SinusoidalEncoderPreTrainedModel._supports_attention_backend is True
    for model_class in se.AUTO_CLASSES.values():
        assert model_class._supports_attention_backend is True
    model = se.SinusoidalEncoderModel(tiny_config())
    assert all(module.is_causal is False for module in model.modules() if hasattr(module, "is_causal"))
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_sinusoidal_encoder.SinusoidalEncoderModel"
    assert config["auto_map"]["AutoConfig"] == "configuration_sinusoidal_encoder.SinusoidalEncoderConfig"
    assert (tmp_path / "modeling_sinusoidal_encoder.py").is_file()  # the code auto_map names, beside the weights


def test_packed_tokens_reach_a_registered_function_with_the_callers_kwargs(recording):
    """Sequences packed into one row with transformers' variable-length arguments (`cu_seq_lens_q/k`): on the CPU
    each sequence goes to the registered function in its own call, with the caller's keyword arguments."""
    model = AutoModel.from_config(tiny_config(), attn_implementation="recording").eval()
    ids = random_ids(1, 9)
    cu_seq_lens = torch.tensor([0, 4, 9], dtype=torch.int32)
    lengths = {"cu_seq_lens_q": cu_seq_lens, "cu_seq_lens_k": cu_seq_lens, "max_length_q": 5, "max_length_k": 5}
    with torch.no_grad():
        embedded = model.embeddings(input_ids=ids, position_ids=torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4]]))
        model.encoder(embedded, None, engine_metadata=1, **lengths)
    assert [call["shape"][2] for call in recording] == [4, 5] * model.config.num_hidden_layers  # (1, nh, L, hs)
    assert all(call["engine_metadata"] == 1 for call in recording)
