"""Record a finished fine-tuning run of the built-in task as one line of the fine-tuning-gap table.

    bash scripts/finetune.sh --learning_rate 3e-4       # the run itself: outputs/library-classifier
    python -m benchmarks.finetuning_gap.run outputs/library-classifier --label "learning rate 3e-4 (1 epoch)" \\
        --model "the main job (1,000 steps)" --command "bash scripts/finetune.sh --learning_rate 3e-4" \\
        --pretrained "outputs/small-builtin of bash scripts/pretrain.sh"

Reads the run's `eval_results.json` (what `training/finetune.py` writes into its output folder: accuracy, macro-F1
and, with `--baselines`, the majority-class and TF-IDF baselines scored on the same split) and appends one JSON line
to `--results` (default benchmarks/finetuning_gap/results.jsonl): the label and pretrained model the table shows, the
command and pretrained folder of the run, the commit of the code and today's date, and the eval results. Nothing is
trained here; `python docs/tables.py` writes the table of docs/finetuning.md from that file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

from benchmarks.machine import git_commit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(REPO, "benchmarks", "finetuning_gap", "results.jsonl")


def record(folder: str, label: str, model: str, command: str, pretrained: str) -> dict:
    """The line of the table for the fine-tuning run in `folder`, in the fields of results.jsonl."""
    path = os.path.join(folder, "eval_results.json")
    if not os.path.isfile(path):
        raise SystemExit(f"{path} does not exist: {folder} is not a finished fine-tuning run.")
    with open(path) as handle:
        eval_results = json.load(handle)
    return {
        "label": label,
        "model": model,
        "command": command,
        "pretrained": pretrained,
        "commit": git_commit(),
        "date": datetime.date.today().isoformat(),
        "eval_results": eval_results,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.finetuning_gap.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("folder", help="The output folder of a finished fine-tuning run (its eval_results.json).")
    parser.add_argument("--label", required=True, help="The row's label: the fine-tuning settings.")
    parser.add_argument("--model", required=True, help="The pretrained model, as the table names it.")
    parser.add_argument("--command", required=True, help="The command that fine-tuned the model.")
    parser.add_argument("--pretrained", default="", help="The pretrained folder and how it was made.")
    parser.add_argument("--results", default=RESULTS, help="The JSON Lines file the line is appended to.")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    line = record(args.folder, args.label, args.model, args.command, args.pretrained)
    with open(args.results, "a") as handle:
        handle.write(json.dumps(line) + "\n")
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()
