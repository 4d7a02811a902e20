"""ONNX export of the base and masked-LM models (training/export_onnx.py): dynamic batch and sequence axes, and
onnxruntime equal to PyTorch within 1e-4, including past `max_position_embeddings`. The command exports a folder's
own head, refuses a head the folder does not have, and never replaces an earlier export unless told."""

from __future__ import annotations

import logging
import os
import warnings

import pytest
import torch
from conftest import run_command, tiny_config

pytest.importorskip("onnxscript", reason="ONNX export needs onnxscript (the `integrations` extra)")
onnx = pytest.importorskip("onnx", reason="ONNX export needs onnx (the `integrations` extra)")
pytest.importorskip("onnxruntime", reason="the ONNX check needs onnxruntime (the `integrations` extra)")

import sinusoidal_encoder as se  # noqa: E402
from sinusoidal_encoder_training.cli.command_line import UsageError  # noqa: E402
from sinusoidal_encoder_training.publishing import onnx_export  # noqa: E402
from sinusoidal_encoder_training.runs.atomic import is_temporary  # noqa: E402
from sinusoidal_encoder_training.tasks.registry import EXPORTED, TASKS  # noqa: E402


def model_class_of(task: str) -> type:
    """The model class of a task of the table: the class its head names."""
    return getattr(se, f"SinusoidalEncoder{TASKS[task].head}")


@pytest.mark.parametrize("task", EXPORTED)
@pytest.mark.slow
def test_export_runs_in_onnxruntime_at_any_batch_and_length(tmp_path, task, monkeypatch, capsys, caplog):
    """The command on a folder of each exported task (in-process: the console script's `main`, behind its front)."""
    model_class = model_class_of(task)
    model_class(tiny_config(max_position_embeddings=16, hidden_act="gelu")).save_pretrained(tmp_path / "model")
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        status, out, err = export_command([tmp_path / "model", "--task", task, "--no_check"], monkeypatch, capsys)
    assert status == 0, err[-3000:]
    said = out + err + caplog.text + "".join(str(warning.message) for warning in warned)
    assert "training mode" not in said  # exported as used: in eval mode (no dropout)
    path = tmp_path / "model" / "model.onnx"
    graph = onnx.load(str(path)).graph
    entry = TASKS[task]
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask"]
    assert tuple(o.name for o in graph.output) == entry.outputs  # start_logits and end_logits for question answering
    for tensor in graph.input:
        dims = tensor.type.tensor_type.shape.dim
        assert len(dims) == len(entry.input_axes)  # (batch, sequence), or (batch, choices, sequence)
        assert all(d.dim_param and not d.dim_value for d in dims)  # every axis symbolic: any batch, any length
    model = model_class.from_pretrained(tmp_path / "model").eval()
    # lengths 8 and 300 (far past the 16 positions of the config), padded rows, batch 3 (traced with 2)
    worst = onnx_export.check_onnx(model, str(path), entry.outputs, lengths=(8, 300), input_axes=entry.input_axes)
    assert worst <= 1e-4


@pytest.mark.slow
def test_the_export_says_what_it_did_and_passes_on_every_warning_but_the_exporters_noise(
    tmp_path, monkeypatch, capsys, caplog
):
    """The command's output is its two lines: none of torch's progress lines, nor its warnings that say nothing
    about this export (`onnx_export.EXPORTER_NOISE`); a warning of anything else, here of the model, still shows."""
    folder = tmp_path / "model"
    se.SinusoidalEncoderModel(tiny_config()).save_pretrained(folder)
    forward = se.SinusoidalEncoderModel.forward

    def warning_forward(self, *args, **kwargs):
        warnings.warn("a warning of the model's own", UserWarning, stacklevel=1)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(se.SinusoidalEncoderModel, "forward", warning_forward)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        status, out, err = export_command([folder, "--no_check"], monkeypatch, capsys)
    assert status == 0, err[-3000:]
    path = folder / "model.onnx"
    said = [f"exporting SinusoidalEncoderModel (feature-extraction) from {folder}", f"wrote {path}"]
    assert out.splitlines() == said
    messages = [str(warning.message) for warning in warned]
    assert "a warning of the model's own" in messages
    assert not [text for text in messages if "axis name" in text or "LeafSpec" in text], messages
    assert "[torch.onnx]" not in out + err and "torchvision" not in err + caplog.text
    assert all("axis name" not in str(entry[1]) for entry in warnings.filters)  # nothing leaks out
    assert logging.getLogger(onnx_export.EXPORTER_REGISTRATION_LOGGER).level == logging.NOTSET


@pytest.mark.slow
def test_check_reports_a_wrong_graph(tmp_path):
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    path = onnx_export.export_onnx(model, str(tmp_path / "m.onnx"), "last_hidden_state")
    other = se.SinusoidalEncoderModel(tiny_config()).eval()  # other weights
    with pytest.raises(ValueError, match="onnxruntime differs"):
        onnx_export.check_onnx(other, path, "last_hidden_state")


def save_head(folder, model_class, **config_overrides):
    """A tiny randomly initialised `model_class` saved to `folder` (as training leaves one): its path, as text."""
    model_class(tiny_config(num_labels=3, **config_overrides)).save_pretrained(folder)
    return str(folder)


def export_command(argv, monkeypatch, capsys):
    """`training/export_onnx.py ARGV` in-process, behind the command-line front: (exit status, stdout, stderr)."""
    return run_command(onnx_export.main, "export_onnx.py", argv, monkeypatch, capsys)


def assert_one_line_refusal(status, err, *expected):
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("export_onnx.py: error: ") and all(text in err for text in expected), err


@pytest.fixture
def exports(monkeypatch):
    """Stands in for the export and its check (seconds each): records (model class, output names, path) of each
    export, the folder of the path existing when it is written."""
    made = []

    def fake_export(model, path, outputs, opset=18, input_axes=("batch", "sequence")):
        folder, name = os.path.split(os.path.abspath(path))
        assert os.path.isdir(folder) and is_temporary(os.path.basename(folder)), path  # moved into place once whole
        made.append((type(model).__name__, ",".join(outputs), os.path.join(os.path.dirname(folder), name)))
        return path

    monkeypatch.setattr(onnx_export, "export_onnx", fake_export)
    monkeypatch.setattr(onnx_export, "check_onnx", lambda *args, **kwargs: 0.0)
    return made


@pytest.mark.parametrize(
    ("model_class", "argv", "exported"),
    [
        *(
            (model_class_of(task), [], (model_class_of(task).__name__, ",".join(TASKS[task].outputs)))
            for task in EXPORTED
        ),
        # the encoder is trained in every folder: feature-extraction from a classifier is fine
        (
            se.SinusoidalEncoderForSequenceClassification,
            ["--task", "feature-extraction"],
            ("SinusoidalEncoderModel", "last_hidden_state"),
        ),
    ],
    ids=[*EXPORTED, "classifier-fe"],
)
def test_export_takes_the_folders_own_head_by_default(
    tmp_path, monkeypatch, capsys, exports, model_class, argv, exported
):
    """ "The right head or none": without --task, a classifier folder was exported with a masked-LM head
    initialised at random, and its check passed. Now the folder's own head (config.json's `architectures`)."""
    folder = save_head(tmp_path / "model", model_class)
    status, out, err = export_command([folder, *argv], monkeypatch, capsys)
    assert status == 0, err
    assert exports == [(*exported, os.path.join(folder, "model.onnx"))]
    assert f"exporting {exported[0]} " in out
    assert "LOAD REPORT" not in err and "MISSING" not in err


@pytest.mark.parametrize(
    ("model_class", "argv", "expected"),
    [
        (
            se.SinusoidalEncoderForSequenceClassification,
            ["--task", "fill-mask"],
            [
                "is a SinusoidalEncoderForSequenceClassification, without a trained masked-LM head",
                "--task text-classification (the default)",
            ],
        ),
        (
            se.SinusoidalEncoderForSequenceClassification,
            ["--task", "token-classification"],
            ["without a trained token-classification head", "--task feature-extraction"],
        ),
        (
            se.SinusoidalEncoderModel,
            ["--task", "text-classification"],
            ["is a SinusoidalEncoderModel, without a trained sequence-classification head"],
        ),
        (
            "BertForNextSentencePrediction",  # config.json names a head of no task here
            [],
            ["is a BertForNextSentencePrediction, a head export_onnx does not export", "feature-extraction"],
        ),
    ],
    ids=["classifier-fill-mask", "classifier-token-classification", "encoder-text-classification", "other-head"],
)
def test_export_refuses_a_head_the_folder_does_not_have(
    tmp_path, monkeypatch, capsys, exports, model_class, argv, expected
):
    if isinstance(model_class, str):
        import json

        folder = save_head(tmp_path / "model", se.SinusoidalEncoderModel)
        config = json.loads((tmp_path / "model" / "config.json").read_text())
        (tmp_path / "model" / "config.json").write_text(json.dumps({**config, "architectures": [model_class]}))
    else:
        folder = save_head(tmp_path / "model", model_class)
    status, out, err = export_command([folder, *argv], monkeypatch, capsys)
    assert_one_line_refusal(status, err, *expected)
    assert exports == [] and out == "" and not (tmp_path / "model" / "model.onnx").exists()


def test_export_refuses_a_head_transformers_would_initialise(tmp_path, monkeypatch, capsys, exports):
    """config.json names a masked-LM, the weights are a classifier's: weights that do not fit config.json are
    refused before any is loaded (`command_line.weights_misfit`), not exported."""
    import json

    folder = save_head(tmp_path / "model", se.SinusoidalEncoderForSequenceClassification)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    config["architectures"] = ["SinusoidalEncoderForMaskedLM"]
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    status, _, err = export_command([folder], monkeypatch, capsys)
    fit = "5 of its weights do not fit the SinusoidalEncoderForMaskedLM of its config.json: 5 missing ('lm_head."
    assert_one_line_refusal(status, err, fit, "The weights are not this model's")
    assert exports == []


def test_export_refuses_to_replace_an_export_without_overwrite(tmp_path, monkeypatch, capsys, exports):
    """ "An output is the user's": an existing .onnx (or the .onnx.data of its weights), at --output, in a folder
    given as --output, or at the default MODEL/model.onnx, is refused in one line before the export, unless
    --overwrite."""
    folder = save_head(tmp_path / "model", se.SinusoidalEncoderForMaskedLM)
    (tmp_path / "mine.onnx").write_bytes(b"the user's")
    (tmp_path / "model" / "model.onnx.data").write_bytes(b"an earlier export's weights")
    (tmp_path / "exports").mkdir()
    (tmp_path / "exports" / "model.onnx").write_bytes(b"an earlier export")
    cases = [
        ([folder, "--output", tmp_path / "mine.onnx"], "--output ", "mine.onnx' already exists"),
        ([folder], "the output ", "model.onnx.data' (the weights of an earlier export) already exists"),
        ([folder, "--output", tmp_path / "exports"], "--output ", "exports/model.onnx' already exists"),
    ]
    for argv, *expected in cases:
        status, out, err = export_command(argv, monkeypatch, capsys)
        assert_one_line_refusal(status, err, *expected, "pass --overwrite to replace it")
        assert out == "" and exports == []
    assert (tmp_path / "mine.onnx").read_bytes() == b"the user's"
    status, _, err = export_command([folder, "--output", tmp_path / "mine.onnx", "--overwrite"], monkeypatch, capsys)
    assert status == 0, err
    assert exports == [("SinusoidalEncoderForMaskedLM", "logits", str(tmp_path / "mine.onnx"))]


def test_export_creates_the_missing_folders_of_output(tmp_path, monkeypatch, capsys, exports):
    """A missing parent of --output is created (as a training run's --output_dir is), after the model has loaded
    and before it is written: not a traceback after the export. A parent that is a file is refused up front."""
    folder = save_head(tmp_path / "model", se.SinusoidalEncoderForSequenceClassification)
    target = tmp_path / "new" / "deeper" / "classifier.onnx"
    status, _, err = export_command([folder, "--output", target], monkeypatch, capsys)
    assert status == 0, err
    assert exports == [("SinusoidalEncoderForSequenceClassification", "logits", str(target))]
    (tmp_path / "notes.txt").write_text("a file")
    status, _, err = export_command([folder, "--output", tmp_path / "notes.txt" / "m.onnx"], monkeypatch, capsys)
    assert_one_line_refusal(status, err, "notes.txt' is a file, not a folder")
    assert len(exports) == 1


@pytest.mark.parametrize(
    ("model_class", "output_shape"),
    [
        (se.SinusoidalEncoderForSequenceClassification, lambda batch, length: (batch, 3)),
        (se.SinusoidalEncoderForMaskedLM, lambda batch, length: (batch, length, 99)),
    ],
    ids=["text-classification", "fill-mask"],
)
@pytest.mark.slow
def test_export_of_a_folder_without_task_runs_its_own_head(tmp_path, monkeypatch, capsys, model_class, output_shape):
    """The command end to end (in-process, behind its command-line front), without --task: a classifier folder
    gives one row of its labels' logits per text, a masked-LM folder the vocabulary's logits at every token, equal
    to PyTorch's."""
    import onnxruntime

    folder = save_head(tmp_path / "model", model_class)
    status, _, err = export_command([folder, "--no_check"], monkeypatch, capsys)
    assert status == 0, err[-3000:]
    session = onnxruntime.InferenceSession(str(tmp_path / "model" / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = torch.randint(1, 99, (2, 11))
    (logits,) = session.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": torch.ones_like(ids).numpy()})
    assert logits.shape == output_shape(2, 11)
    with torch.no_grad():
        expected = model_class.from_pretrained(folder).eval()(input_ids=ids).logits
    torch.testing.assert_close(torch.from_numpy(logits), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    ("opset", "expected"),
    [
        (16, "--opset 16: the graph needs opset 17 or newer (its LayerNormalization)"),
        (
            onnx.defs.onnx_opset_version() + 1,
            f"the installed onnx package knows opsets up to {onnx.defs.onnx_opset_version()}",
        ),
    ],
    ids=["older than LayerNormalization", "newer than onnx knows"],
)
def test_export_refuses_an_opset_the_graph_cannot_have(tmp_path, monkeypatch, capsys, exports, opset, expected):
    """--opset 14 wrote an opset-18 file (the exporter's fallback, a warning among many) and reported success;
    --opset 99 ended in onnxruntime's InvalidGraph traceback (found 2026-11-27). Now one line, before any work."""
    folder = save_head(tmp_path / "model", se.SinusoidalEncoderForMaskedLM)
    status, out, err = export_command([folder, "--opset", str(opset)], monkeypatch, capsys)
    assert_one_line_refusal(status, err, expected)
    assert out == "" and exports == []


def _onnx_file(path, opset):
    """A minimal valid ONNX file (one Identity node) declaring `opset`."""
    from onnx import TensorProto, helper

    tensor = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [tensor("x", TensorProto.FLOAT, [1])],
        [tensor("y", TensorProto.FLOAT, [1])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)


def test_an_export_in_another_opset_than_asked_is_refused_and_removed(tmp_path, monkeypatch):
    """torch's exporter writes its own opset, with a warning, when it cannot convert the graph to the one asked
    (--opset 26 here on torch 2.13): the file would claim to be what was asked and is not. Refused, nothing kept."""
    path = str(tmp_path / "model.onnx")

    def exporter_falling_back(*args, **kwargs):
        _onnx_file(path, 18)
        open(path + ".data", "wb").close()

    monkeypatch.setattr(torch.onnx, "export", exporter_falling_back)
    model = se.SinusoidalEncoderModel(tiny_config())
    with pytest.raises(
        UsageError,
        match=r"^--opset 20: torch's ONNX exporter could not convert the graph to opset 20 \(it wrote opset 18",
    ):
        onnx_export.export_onnx(model, path, "last_hidden_state", opset=20)
    assert os.listdir(tmp_path) == []
    assert onnx_export.export_onnx(model, path, "last_hidden_state", opset=18) == path  # the opset asked: kept


def test_a_graph_onnxruntime_cannot_load_is_one_line_and_kept(tmp_path, monkeypatch):
    """An opset newer than the installed onnxruntime runs ended in its InvalidGraph traceback after the export."""
    import onnxruntime

    path = str(tmp_path / "model.onnx")
    _onnx_file(path, 18)

    def too_new(*args, **kwargs):
        raise onnxruntime.capi.onnxruntime_pybind11_state.InvalidGraph("Load model failed: opset 99 unknown\nmore")

    monkeypatch.setattr(onnxruntime, "InferenceSession", too_new)
    with pytest.raises(
        UsageError,
        match=rf"^onnxruntime {onnxruntime.__version__} cannot load .* \(opset 18\): Load model failed: opset 99 "
        "unknown; the export is kept",
    ):
        onnx_export.check_onnx(se.SinusoidalEncoderModel(tiny_config()), path, "last_hidden_state")
    assert os.path.exists(path)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc, where no file can be created, superuser or not")
def test_export_refuses_an_output_no_file_can_be_created_in(tmp_path, monkeypatch, capsys, exports):
    """--output under /proc passed the os.access check as root and ended in a FileNotFoundError traceback after the
    export: now one line before the model loads."""
    folder = save_head(tmp_path / "model", se.SinusoidalEncoderForMaskedLM)
    status, _, err = export_command([folder, "--output", "/proc/model.onnx"], monkeypatch, capsys)
    assert_one_line_refusal(
        status, err, "--output '/proc/model.onnx' cannot be written: creating a file in '/proc' fails"
    )
    assert exports == []
