"""ONNX export of the base and masked-LM models (training/export_onnx.py): dynamic batch and sequence axes, and
onnxruntime equal to PyTorch within 1e-4, including past `max_position_embeddings`."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO, env, tiny_config

pytest.importorskip("onnxscript", reason="ONNX export needs onnxscript (the `integrations` extra)")
onnx = pytest.importorskip("onnx", reason="ONNX export needs onnx (the `integrations` extra)")
pytest.importorskip("onnxruntime", reason="the ONNX check needs onnxruntime (the `integrations` extra)")

import sinusoidal_encoder as se  # noqa: E402
from sinusoidal_encoder_training import onnx_export  # noqa: E402


@pytest.mark.parametrize(
    ("task", "model_class"),
    [
        ("fill-mask", se.SinusoidalEncoderForMaskedLM),
        ("feature-extraction", se.SinusoidalEncoderModel),
        ("text-classification", se.SinusoidalEncoderForSequenceClassification),
        ("token-classification", se.SinusoidalEncoderForTokenClassification),
    ],
)
@pytest.mark.slow
def test_export_runs_in_onnxruntime_at_any_batch_and_length(tmp_path, task, model_class):
    model_class(tiny_config(max_position_embeddings=16, hidden_act="gelu")).save_pretrained(tmp_path / "model")
    command = [sys.executable, str(REPO / "training" / "export_onnx.py"), str(tmp_path / "model"), "--task", task]
    proc = subprocess.run([*command, "--no_check"], capture_output=True, text=True, timeout=600, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "training mode" not in proc.stdout + proc.stderr  # exported as used: in eval mode (no dropout)
    path = tmp_path / "model" / "model.onnx"
    graph = onnx.load(str(path)).graph
    output_name = onnx_export.TASKS[task][1]
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask"] and graph.output[0].name == output_name
    for tensor in graph.input:
        dims = tensor.type.tensor_type.shape.dim
        assert all(d.dim_param and not d.dim_value for d in dims)  # both axes symbolic: any batch, any length
    model = model_class.from_pretrained(tmp_path / "model").eval()
    # lengths 8 and 300 (far past the 16 positions of the config), padded rows, batch 3 (traced with 2)
    worst = onnx_export.check_onnx(model, str(path), output_name, lengths=(8, 300))
    assert worst <= 1e-4


@pytest.mark.slow
def test_check_reports_a_wrong_graph(tmp_path):
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    path = onnx_export.export_onnx(model, str(tmp_path / "m.onnx"), "last_hidden_state")
    other = se.SinusoidalEncoderModel(tiny_config()).eval()  # other weights
    with pytest.raises(ValueError, match="onnxruntime differs"):
        onnx_export.check_onnx(other, path, "last_hidden_state")
