"""The serving engines that install from the package registry, run on folders the package wrote: Infinity's server
(`infinity_emb v2`, its torch engine: sentence-transformers for embeddings, transformers' text-classification
pipeline for a classifier) answers `/embeddings` and `/classify` on loopback, and Optimum's ONNX Runtime classes
(`ORTModelFor...`: feature extraction and every head: masked LM, sequence and token classification, question
answering, multiple choice) load the ONNX exports; both answers equal the package's own outputs within float
tolerance. Both engines pin transformers 4.x, so they run in their own environment, .venv-serving, which
scripts/setup_test_environments.sh builds (scripts/test.sh calls it); without it the tests skip. docs/serving.md
shows the same commands, run in the suite by tests/repository/test_docs.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, tiny_config

import sinusoidal_encoder as se

SERVING = Path(os.environ.get("SINUSOIDAL_SERVING_VENV", REPO / ".venv-serving"))
TEXTS = ["Return a new list.", "Open the file for reading and return its contents, line by line, as text."]
LABELS = {0: "negative", 1: "positive"}
STARTUP_S = 180

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (SERVING / "bin" / "python").exists(),
        reason=f"no serving environment at {SERVING} (scripts/setup_test_environments.sh builds it)",
    ),
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer) -> dict[str, Path]:
    """An encoder folder (masked LM, sentence-transformers files, the feature-extraction ONNX export in onnx/), and
    a folder of every head (each with its own ONNX export beside the weights), written as the package's exports
    write them."""
    pytest.importorskip("onnxscript", reason="ONNX export needs onnxscript (the `integrations` extra)")
    from sinusoidal_encoder_training.configs import OnnxExportConfig
    from sinusoidal_encoder_training.publishing.export import save_tokenizer, write_sentence_transformers_files
    from sinusoidal_encoder_training.publishing.onnx_export import run

    root = tmp_path_factory.mktemp("served")
    shared = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    models = {
        "encoder": se.SinusoidalEncoderForMaskedLM(tiny_config(**shared)),
        "classifier": se.SinusoidalEncoderForSequenceClassification(
            tiny_config(**shared, num_labels=2, id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
        ),
        "fill-mask": se.SinusoidalEncoderForMaskedLM(tiny_config(**shared)),
        "token-classification": se.SinusoidalEncoderForTokenClassification(tiny_config(**shared, num_labels=3)),
        "question-answering": se.SinusoidalEncoderForQuestionAnswering(tiny_config(**shared)),
        "multiple-choice": se.SinusoidalEncoderForMultipleChoice(tiny_config(**shared)),
    }
    for name, model in models.items():
        model.eval().save_pretrained(root / name)
        save_tokenizer(tokenizer, str(root / name))
    write_sentence_transformers_files(str(root / "encoder"), models["encoder"].config)
    for name in models:  # the encoder's graph in onnx/, as TEI reads it; every head's own beside its weights
        encoder = name == "encoder"
        task, output = ("feature-extraction", str(root / name / "onnx") + "/") if encoder else (None, None)
        run(OnnxExportConfig(model=str(root / name), task=task, output=output, no_check=True))
    return {name: root / name for name in models}


def package_outputs(folder: Path, tokenizer, texts=TEXTS) -> tuple[np.ndarray, np.ndarray]:
    """The package's mean-pooled embeddings of the texts (`folder`'s encoder), and its classifier's logits."""
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    encoder = se.SinusoidalEncoderModel.from_pretrained(folder / "encoder").eval()
    classifier = se.SinusoidalEncoderForSequenceClassification.from_pretrained(folder / "classifier").eval()
    with torch.no_grad():
        hidden = encoder(**batch).last_hidden_state
        logits = classifier(**batch).logits
    mask = batch["attention_mask"][..., None].float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return pooled.numpy(), logits.numpy()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post(port: int, route: str, payload: dict) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{route}",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def wait_until_healthy(server: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"Infinity exited with status {server.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"Infinity did not answer /health within {STARTUP_S} s:\n{log.read_text()[-4000:]}")


def test_infinity_serves_the_embeddings_and_the_classes_the_package_computes(folders, tokenizer, tmp_path):
    port, log = free_port(), tmp_path / "infinity.log"
    command = [str(SERVING / "bin" / "infinity_emb"), "v2", "--engine", "torch", "--device", "cpu"]
    for name in ("encoder", "classifier"):
        command += ["--model-id", str(folders[name]), "--served-model-name", name]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-model-warmup"]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"}
    with open(log, "w") as output:
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment)
    try:
        wait_until_healthy(server, port, log)
        embedded = post(port, "/embeddings", {"model": "encoder", "input": TEXTS})
        classified = post(port, "/classify", {"model": "classifier", "input": TEXTS})
    finally:
        server.terminate()
        server.wait(timeout=30)
    pooled, logits = package_outputs(folders["encoder"].parent, tokenizer)
    served = np.array([row["embedding"] for row in sorted(embedded["data"], key=lambda row: row["index"])])
    expected = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)  # Infinity returns unit vectors
    np.testing.assert_allclose(served, expected, atol=1e-5, rtol=1e-4)
    probabilities = torch.softmax(torch.tensor(logits), dim=-1).numpy()
    for row, answer in zip(probabilities, classified["data"], strict=True):
        scores = {entry["label"]: entry["score"] for entry in answer}  # the config's id2label names the classes
        np.testing.assert_allclose([scores[LABELS[i]] for i in range(len(LABELS))], row, atol=1e-5, rtol=1e-4)


def test_optimum_loads_the_onnx_exports_with_the_packages_outputs(folders, tokenizer, tmp_path):
    batch = dict(tokenizer(TEXTS, padding=True, return_tensors="pt"))
    choices = {key: value.unsqueeze(0) for key, value in batch.items()}  # one question, the two texts its choices
    jobs = {  # name: (Optimum class, package class, subfolder, inputs, outputs)
        "encoder": ("ORTModelForFeatureExtraction", se.SinusoidalEncoderModel, "onnx", batch, ["last_hidden_state"]),
        "classifier": (
            "ORTModelForSequenceClassification",
            se.SinusoidalEncoderForSequenceClassification,
            "",
            batch,
            ["logits"],
        ),
        "question-answering": (
            "ORTModelForQuestionAnswering",
            se.SinusoidalEncoderForQuestionAnswering,
            "",
            batch,
            ["start_logits", "end_logits"],
        ),
        "multiple-choice": (
            "ORTModelForMultipleChoice",
            se.SinusoidalEncoderForMultipleChoice,
            "",
            choices,
            ["logits"],
        ),
    }
    request, answer = tmp_path / "request.json", tmp_path / "answer.json"
    request.write_text(
        json.dumps(
            {
                name: {
                    "class": optimum_class,
                    "folder": str(folders[name]),
                    "subfolder": subfolder,
                    "inputs": {key: value.tolist() for key, value in inputs.items()},
                    "outputs": outputs,
                }
                for name, (optimum_class, _, subfolder, inputs, outputs) in jobs.items()
            }
        )
    )
    proc = subprocess.run(
        [
            str(SERVING / "bin" / "python"),
            str(REPO / "tests" / "model" / "serving_check.py"),
            str(request),
            str(answer),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(answer.read_text())
    classifier_config = json.loads((folders["classifier"] / "config.json").read_text())
    assert classifier_config["architectures"] == ["SinusoidalEncoderForSequenceClassification"]  # TEI: a classifier
    for name, (_, package_class, _, inputs, outputs) in jobs.items():
        model = package_class.from_pretrained(folders[name]).eval()
        with torch.no_grad():
            expected = model(**inputs)
        real = inputs["attention_mask"].numpy().astype(bool)  # padded positions carry no meaning in either
        for output in outputs:
            served, ours = np.array(result[name][output]), getattr(expected, output).numpy()
            if ours.shape[: real.ndim] == real.shape:  # per token: compared at the real ones
                served, ours = served[real], ours[real]
            np.testing.assert_allclose(served, ours, atol=1e-5, rtol=1e-4, err_msg=f"{name}: {output}")
