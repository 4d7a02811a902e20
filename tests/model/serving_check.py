"""Run by tests/model/test_serving.py in .venv-serving (Optimum pins transformers 4.x): loads the package's ONNX
exports with Optimum's ONNX Runtime classes, feeds each the inputs of the request, and writes the outputs it names.

    python serving_check.py REQUEST.json ANSWER.json

REQUEST: {NAME: {"class": an `optimum.onnxruntime` class, "folder": ..., "subfolder": "" or "onnx", "inputs":
{"input_ids": [...], "attention_mask": [...]}, "outputs": [names]}}. ANSWER: {NAME: {output name: values}}."""

from __future__ import annotations

import json
import sys

import optimum.onnxruntime
import torch


def main(request_path: str, answer_path: str) -> None:
    with open(request_path) as handle:
        request = json.load(handle)
    answer = {}
    for name, job in request.items():
        model_class = getattr(optimum.onnxruntime, job["class"])
        # config.json's auto_map: the folder's own configuration code
        model = model_class.from_pretrained(job["folder"], subfolder=job["subfolder"], trust_remote_code=True)
        result = model(**{key: torch.tensor(value) for key, value in job["inputs"].items()})
        answer[name] = {output: getattr(result, output).tolist() for output in job["outputs"]}
    with open(answer_path, "w") as handle:
        json.dump(answer, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
