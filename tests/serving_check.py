"""Run by tests/test_serving.py in .venv-serving (Optimum pins transformers 4.x): loads the package's ONNX exports
with Optimum's ONNX Runtime classes, feeds them the token ids of REQUEST, and writes their outputs to ANSWER.

    python serving_check.py REQUEST.json ANSWER.json

REQUEST: {"encoder": folder whose onnx/model.onnx is the feature-extraction export, "classifier": folder whose
model.onnx is a text-classification export, "input_ids": [[...]], "attention_mask": [[...]]}.
ANSWER: {"last_hidden_state": [...], "logits": [...], "classes": [the Optimum classes' names]}."""

from __future__ import annotations

import json
import sys

import torch
from optimum.onnxruntime import ORTModelForFeatureExtraction, ORTModelForSequenceClassification


def main(request_path: str, answer_path: str) -> None:
    with open(request_path) as handle:
        request = json.load(handle)
    inputs = {name: torch.tensor(request[name]) for name in ("input_ids", "attention_mask")}
    encoder = ORTModelForFeatureExtraction.from_pretrained(
        request["encoder"], subfolder="onnx", trust_remote_code=True
    )
    classifier = ORTModelForSequenceClassification.from_pretrained(request["classifier"], trust_remote_code=True)
    answer = {
        "last_hidden_state": encoder(**inputs).last_hidden_state.tolist(),
        "logits": classifier(**inputs).logits.tolist(),
        "classes": [type(encoder).__name__, type(classifier).__name__],
    }
    with open(answer_path, "w") as handle:
        json.dump(answer, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
