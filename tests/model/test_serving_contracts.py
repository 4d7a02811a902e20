"""What serving engines require of a custom encoder, checked on the model itself. vLLM's Transformers backend runs a
model whose attention goes through transformers' `ALL_ATTENTION_FUNCTIONS` (it registers its own function there and
selects it by `attn_implementation`), whose forward passes its keyword arguments down to that function, whose
attention modules say `is_causal = False`, whose class says `_supports_attention_backend = True`, and whose config has
an `auto_map` for `AutoModel` (it loads with `trust_remote_code`). Running vLLM itself needs a GPU build: not run
here."""

from __future__ import annotations

import json

import numpy as np
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


@pytest.mark.slow
def test_an_onnx_export_answers_as_text_embeddings_inference_reads_it(tmp_path, tokenizer):
    """TEI's CPU image runs ONNX Runtime (backends/ort): it loads `model.onnx` or else `onnx/model.onnx`, feeds the
    graph's `input_ids` and `attention_mask` as int64 (right padding with config.json's `pad_token_id`; position ids
    only to a graph that declares them), reads `last_hidden_state` (or `token_embeddings`) as float32, and pools it
    as the folder's `1_Pooling/config.json` says (mean: the masked sum over the real tokens divided by their count).
    `export_onnx FOLDER --task feature-extraction --output FOLDER/onnx/` writes that graph for a masked-LM folder
    (whose own export, fill-mask, outputs logits); the result equals the package's own mean-pooled embeddings."""
    ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime (the `integrations` extra)")
    pytest.importorskip("onnxscript", reason="ONNX export needs onnxscript (the `integrations` extra)")
    from sinusoidal_encoder_training.configs import OnnxExportConfig
    from sinusoidal_encoder_training.publishing.export import write_sentence_transformers_files
    from sinusoidal_encoder_training.publishing.onnx_export import run

    config = tiny_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, max_position_embeddings=16)
    model = se.SinusoidalEncoderForMaskedLM(config).eval()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_sentence_transformers_files(str(folder), model.config)
    run(
        OnnxExportConfig(
            model=str(folder), task="feature-extraction", output=str(folder / "onnx") + "/", no_check=True
        )
    )
    assert not (folder / "model.onnx").exists() and (folder / "onnx" / "model.onnx").exists()  # TEI's second place
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"]
    saved = json.loads((folder / "config.json").read_text())
    assert saved["architectures"] == ["SinusoidalEncoderForMaskedLM"]  # not a classifier: TEI serves embeddings

    texts = ["Return a new list.", "Open the file for reading and return its contents, line by line, as text."]
    rows = [tokenizer(text)["input_ids"] for text in texts]
    width = max(map(len, rows))  # right padding with the config's pad token, as TEI pads
    input_ids = np.array([row + [saved["pad_token_id"]] * (width - len(row)) for row in rows], dtype=np.int64)
    attention_mask = np.array([[1] * len(row) + [0] * (width - len(row)) for row in rows], dtype=np.int64)
    session = ort.InferenceSession(str(folder / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert {i.name for i in session.get_inputs()} == {"input_ids", "attention_mask"}  # no position or type ids
    outputs = dict(
        zip(
            [o.name for o in session.get_outputs()],
            session.run(None, {"input_ids": input_ids, "attention_mask": attention_mask}),
            strict=True,
        )
    )
    hidden = outputs["last_hidden_state"]
    assert hidden.dtype == np.float32
    lengths = attention_mask.sum(1, keepdims=True).astype(np.float32)
    tei = (hidden * attention_mask[..., None]).sum(1) / lengths  # TEI's mean pooling with right padding

    encoder = se.SinusoidalEncoderModel.from_pretrained(folder).eval()
    with torch.no_grad():
        ours = encoder(torch.tensor(input_ids), attention_mask=torch.tensor(attention_mask)).last_hidden_state
    mask = torch.tensor(attention_mask, dtype=torch.float32)[..., None]
    expected = ((ours * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(tei, expected, atol=1e-4, rtol=1e-4)
