"""Run by tests/model/test_transformers4.py with the Python of a transformers 4.x environment, where sinusoidal_encoder
is not installed: load every folder that the package saved with `trust_remote_code=True` and report the largest
difference from the outputs the package computed under transformers 5.

    python tests/model/transformers4_check.py FOLDER     # FOLDER holds reference.pt and one sub-folder per model
"""

from __future__ import annotations

import importlib.util
import json
import sys

import torch
import transformers
from transformers import AutoConfig, AutoTokenizer
from transformers.dynamic_module_utils import get_class_from_dynamic_module


def main(root: str) -> None:
    reference = torch.load(f"{root}/reference.pt")
    report = {
        "transformers": transformers.__version__,
        "package_importable": importlib.util.find_spec("sinusoidal_encoder") is not None,
        "models": {},
    }
    for name, entry in reference["models"].items():
        if hasattr(transformers, entry["auto_class"]):
            auto_class = getattr(transformers, entry["auto_class"])
            model = auto_class.from_pretrained(f"{root}/{name}", trust_remote_code=True).eval()
        else:  # an Auto class of the package's own: the class the folder's auto_map names, as the card loads it
            config = AutoConfig.from_pretrained(f"{root}/{name}", trust_remote_code=True)
            model_class = get_class_from_dynamic_module(config.auto_map[entry["auto_class"]], config.name_or_path)
            model = model_class.from_pretrained(f"{root}/{name}").eval()
        with torch.no_grad():
            outputs = model(**entry["inputs"])
        report["models"][name] = {
            "class": type(model).__name__,
            "module": type(model).__module__,
            "pad_token_id": model.config.pad_token_id,
            "tie_word_embeddings": getattr(model.config, "tie_word_embeddings", None),
            "max_abs_diff": {
                key: float((outputs[key] - value).abs().max()) for key, value in entry["outputs"].items()
            },
        }
    tokenizer = AutoTokenizer.from_pretrained(f"{root}/{reference['tokenizer']['folder']}")
    report["tokenizer"] = {
        "class": type(tokenizer).__name__,
        "same_ids": tokenizer(reference["tokenizer"]["texts"])["input_ids"] == reference["tokenizer"]["input_ids"],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
