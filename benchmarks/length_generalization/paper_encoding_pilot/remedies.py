"""The study's inference-time remedies on the pilot's TUPE model (`outputs/pilot-tupe`, made by the README's
command): its masked-LM loss at 512 and 1024 tokens as trained, with attention within ±63 or ±127 tokens
(`long_input_attention_window`), and with positions scaled into the trained range. The study measures these itself
for every arm of the paper's PE from now on; this script measured them on the pilot's run.

    python benchmarks/length_generalization/paper_encoding_pilot/remedies.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root: `benchmarks` importable

from transformers import AutoTokenizer

import benchmarks.length_generalization.run as lg


def main() -> dict:
    config = lg.parse_args(
        ["--output_dir", "outputs/pilot-tupe", "--arms", "tupe", "--seeds", "42", "--finetune_arms"]
    )
    folder = lg.run_folder(config, "tupe", 42)
    model = lg.load_arm(folder)
    batches = lg.evaluation_batches(AutoTokenizer.from_pretrained(folder), [512, 1024], config)
    found = {}
    for length in (512, 1024):
        found[length] = {"as trained": lg.masked_lm_scores(model, batches[length])["eval_loss"]}
        for window in lg.WINDOWS:
            found[length][f"within ±{window - 1}"] = lg.masked_lm_scores(model, batches[length], window=window)[
                "eval_loss"
            ]
        scale = lg.TRAIN_LENGTH / length
        found[length]["positions scaled"] = lg.masked_lm_scores(model, batches[length], position_scale=scale)[
            "eval_loss"
        ]
    print(json.dumps(found, indent=1))
    return found


if __name__ == "__main__":
    main()
