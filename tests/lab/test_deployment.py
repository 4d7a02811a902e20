"""benchmarks/deployment/run.py on tiny folders, mechanics only (no time is asserted): every serving path and batch is
timed for ours and for BERT, ONNX Runtime fp32 computes what PyTorch does, int8 and bf16 do not quite, the
classifier's accuracy is that of its predictions, the report and its JSON record are written, and a bad folder is
refused in one line before any work."""

from __future__ import annotations

import json

import datasets
import pytest
import torch
from conftest import tiny_config
from transformers import BertConfig, BertModel

pytest.importorskip("onnxscript", reason="the ONNX export needs onnxscript (the `onnx` extra)")
pytest.importorskip("onnx", reason="the ONNX export needs onnx (the `onnx` extra)")
pytest.importorskip("onnxruntime", reason="the serving paths need onnxruntime (the `onnx` extra)")

import sinusoidal_encoder as se
from benchmarks import batches, machine
from benchmarks.deployment import run as deployment
from sinusoidal_encoder_training.stages import finetuning

LABELS = ("accelerate", "datasets", "huggingface_hub", "numpy", "python", "transformers")
SOURCES = ("python-docs", "numpy", "transformers", "datasets")  # the built-in task labels python-docs "python"
PASSAGES = 8


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer):
    """A tiny masked-LM folder and a tiny classifier of the built-in task's labels, with the shipped tokenizer: one
    layer each (every export and session of the run scales with the layers; no figure here depends on them)."""
    root = tmp_path_factory.mktemp("deployment")
    shared = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, num_hidden_layers=1)
    se.SinusoidalEncoderForMaskedLM(tiny_config(**shared)).save_pretrained(root / "pretrained")
    labels = dict(
        num_labels=len(LABELS), id2label=dict(enumerate(LABELS)), label2id={n: i for i, n in enumerate(LABELS)}
    )
    se.SinusoidalEncoderForSequenceClassification(tiny_config(**shared, **labels)).save_pretrained(root / "classifier")
    for name in ("pretrained", "classifier"):
        tokenizer.save_pretrained(root / name)
    return root


def small_corpus() -> datasets.DatasetDict:
    """Documentation passages in the built-in corpus's format (text, source), in place of the whole corpus."""
    from pydoc_data.topics import topics

    texts = [" ".join(text.split()[:80]) for _, text in sorted(topics.items())][:36]
    rows = {"text": texts, "source": [SOURCES[i % len(SOURCES)] for i in range(len(texts))]}
    return datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({key: values[:24] for key, values in rows.items()}),
            "validation": datasets.Dataset.from_dict({key: values[24:] for key, values in rows.items()}),
        }
    )


@pytest.fixture(scope="module")
def run(folders):
    """One tiny run: (its returned record, the report's path, the JSON's path, the validation passages it used)."""
    corpus = small_corpus()
    output = folders / "report" / "deployment.md"
    output.parent.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(finetuning, "load_builtin_corpus", lambda: corpus)
        patch.setenv("OMP_NUM_THREADS", "1")  # what the timing workers are to use
        record = deployment.main(
            [
                "--pretrained",
                str(folders / "pretrained"),
                "--classifier",
                str(folders / "classifier"),
                "--repeats",
                "1",
                "--warmup",
                "0",
                "--max_eval_passages",
                str(PASSAGES),
                "--output",
                str(output),
            ]
        )
        config = finetuning.FinetuningConfig(
            model_name_or_path=str(folders / "classifier"), output_dir="unused", max_eval_samples=PASSAGES
        )
        validation = finetuning.load_task_data(config)["validation"]
    return record, output, output.with_suffix(".json"), validation


@pytest.mark.slow
def test_every_path_and_batch_is_timed_for_ours_and_bert(run):
    record = run[0]
    rows = {(row["path"], row["batch"]): row for row in record["speed"]}
    assert list(rows) == [(path, batch) for path in deployment.PATHS for batch in deployment.BATCHES]
    _, padding = batches.padded_batch(vocab_size=99)  # the lengths and the mask do not depend on the vocabulary
    for (_, batch), row in rows.items():
        assert row["ours_seconds"] > 0 and row["bert_seconds"] > 0
        # tokens/s of the real tokens: all 32 × 128 of the dense batch, the unpadded ones of the padded batch
        assert row["tokens"] == (32 * 128 if batch == "dense" else int(padding.sum()))
        assert row["ours_tokens_per_s"] == pytest.approx(row["tokens"] / row["ours_seconds"])
        assert row["bert_tokens_per_s"] == pytest.approx(row["tokens"] / row["bert_seconds"])
        assert row["ratio"] == pytest.approx(row["ours_tokens_per_s"] / row["bert_tokens_per_s"])
    assert 0.5 * 32 * 256 < int(padding.sum()) < 0.7 * 32 * 256  # about 40% padding
    assert record["threads"] == {"torch": 1, "onnxruntime_intra_op": 1}  # the environment's, in the workers


@pytest.mark.slow
def test_each_path_costs_what_its_arithmetic_does(run):
    paths = run[0]["accuracy"]["paths"]
    assert set(paths) == set(deployment.PATHS)
    reference, bf16, ort, int8 = (paths[path] for path in deployment.PATHS)
    assert reference["max_abs_logit_diff"] == 0.0 and reference["fill_mask_top1_agreement"] == 1.0
    assert reference["masked_tokens"] > 20
    # the export computes what PyTorch does
    assert ort["max_abs_logit_diff"] <= 1e-4 and ort["fill_mask_top1_agreement"] == 1.0
    assert ort["classifier_agreement"] == 1.0 and ort["classifier_max_abs_logit_diff"] <= 1e-4
    # int8 and bf16 round: their logits differ, and the agreement is a share of the masked tokens
    assert 0.0 < int8["max_abs_logit_diff"] < float("inf")
    assert 0.0 < bf16["max_abs_logit_diff"] < float("inf")
    for figures in (bf16, int8):
        assert 0.0 <= figures["fill_mask_top1_agreement"] <= 1.0
        assert 0.0 <= figures["classifier_agreement"] <= 1.0 and figures["classifier_max_abs_logit_diff"] > 0.0
    # int8 weights: every quantized file is smaller than its export
    sizes = run[0]["onnx_megabytes"]
    assert set(sizes) == {"ours feature-extraction", "ours fill-mask", "ours classifier", "BERT"}
    for size in sizes.values():
        assert 0.0 < size["onnxruntime-int8"] < size["onnxruntime-fp32"]


@pytest.mark.slow
def test_classifier_accuracy_is_that_of_its_predictions(run, folders, tokenizer):
    record, _, _, validation = run
    assert record["accuracy"]["passages"] == len(validation) == PASSAGES
    model = se.SinusoidalEncoderForSequenceClassification.from_pretrained(folders / "classifier").eval()
    batch = tokenizer(list(validation["text"]), truncation=True, max_length=128, padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1)
    truth = torch.tensor([LABELS.index(label) for label in validation["label"]])
    expected = float((predicted == truth).float().mean())
    assert record["accuracy"]["paths"]["pytorch-fp32"]["classifier_accuracy"] == pytest.approx(expected)
    assert record["accuracy"]["paths"]["onnxruntime-fp32"]["classifier_accuracy"] == pytest.approx(expected)


@pytest.mark.slow
def test_report_and_record_are_written(run):
    record, output, json_path, _ = run
    assert json.loads(json_path.read_text()) == json.loads(json.dumps(record))
    assert set(record["machine"]["flags"]) == set(machine.CPU_FLAGS) and record["machine"]["model"]
    assert {"torch", "onnxruntime", "transformers"} <= set(record["versions"])
    assert record["command"].startswith("python -m benchmarks.deployment.run --pretrained ")
    assert record["date"] and record["settings"]["quantization"]["weight_type"] == "QInt8"
    text = output.read_text()
    for label in [*deployment.PATH_LABELS.values(), *deployment.BATCH_LABELS.values()]:
        assert label in text
    rows = len(deployment.PATHS) * len(deployment.BATCHES) + len(deployment.PATHS)  # speed, then accuracy
    assert text.count("\n| ") == rows + 2  # and the two headers


@pytest.mark.parametrize(
    ("which", "message"),
    [
        ("missing", "--pretrained '{root}/missing': no such folder."),
        ("bert", "--pretrained '{root}/bert' is a 'bert' model, not a sinusoidal_encoder one."),
        ("classifier", "--pretrained '{root}/classifier' is not a ForMaskedLM model"),
    ],
)
def test_a_bad_folder_is_one_line_before_any_work(tmp_path, folders, monkeypatch, capsys, which, message):
    if which == "bert":
        bert = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4)
        BertModel(bert).save_pretrained(tmp_path / "bert")
    if which == "classifier":  # a sinusoidal-encoder folder, but no masked-LM
        tmp_path = folders
    monkeypatch.setattr(deployment, "prepare", lambda *args: pytest.fail("work started"))
    output = tmp_path / "report.md"
    argv = [
        "--pretrained",
        str(tmp_path / which),
        "--classifier",
        str(folders / "classifier"),
        "--output",
        str(output),
    ]
    with pytest.raises(SystemExit) as raised:
        deployment.main(argv)
    assert raised.value.code == 2
    error = capsys.readouterr().err
    assert f": error: {message.format(root=tmp_path)}" in error.strip().splitlines()[-1]  # usage, then this line
    assert "Traceback" not in error and not output.exists()
