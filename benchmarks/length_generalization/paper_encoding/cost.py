"""What each way of using the paper's PE costs in the utilisation benchmark's training cell (the main job's `small`
shape, 16 × 128 tokens, 15% masked, sparse prediction, AdamW; benchmarks/utilization), timed alternately with the
paper's encoding as shipped (`position_encoding="sinusoidal"`) in the same run, so that the machine's noise moves
both alike.

    python -m benchmarks.length_generalization.paper_encoding.cost                       # every variant, bf16 and fp32
    python -m benchmarks.length_generalization.paper_encoding.cost --encodings tupe --precisions bf16 --repeats 5

A training step is what a position mode does not change (a random training offset draws B integers), so the
encoding alone is timed. Writes `cost.md` and `cost.json` beside this file (or at --output). Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from benchmarks import timing
from benchmarks.machine import cpu_description, git_commit
from benchmarks.utilization import run as utilization

SHIPPED = "sinusoidal"
VARIANTS = ("scaled_sinusoidal", "sinusoidal_every_layer", "tupe", "sinusoidal_relative", "rotary")
TARGET = 0.9  # issue 54: no slower than the paper's encoding by more than 10%


def worker(encoding: str, precision: str, args: argparse.Namespace) -> list[str]:
    """The utilisation benchmark's worker of our training step with `encoding`."""
    settings = argparse.Namespace(size=args.size, position_encoding=encoding)
    return utilization.worker_command("ours", "train", precision, "eager", settings)


def measure(args: argparse.Namespace) -> list[dict]:
    """Each variant against the shipped encoding, interleaved: the medians and their ratio (>1: the variant is
    slower)."""
    _, tokens = utilization.job("train", utilization.main_job_shape(args.size))
    rows = []
    for precision in args.precisions:
        for encoding in args.encodings:
            shipped, variant = timing.interleaved_series(
                [worker(SHIPPED, precision, args), worker(encoding, precision, args)], args.repeats
            )
            row = {
                "encoding": encoding,
                "precision": precision,
                "shipped_seconds": statistics.median(shipped),
                "seconds": statistics.median(variant),
                "tokens": tokens,
            }
            row["speed"] = row["shipped_seconds"] / row["seconds"]  # the variant's speed, the shipped one's = 1
            rows.append(row)
            print(format_row(row), flush=True)
    return rows


def format_row(row: dict) -> str:
    met = "met" if row["speed"] >= TARGET else "missed"
    return (
        f"| `{row['encoding']}` | {row['precision']} | {row['tokens'] / row['shipped_seconds']:,.0f} | "
        f"{row['tokens'] / row['seconds']:,.0f} | {row['speed']:.3f} | ≥ {TARGET}: {met} |"
    )


def markdown(record: dict) -> str:
    return "\n".join(
        [
            "# The cost of each way of using the paper's PE: the training cell, against the shipped encoding",
            "",
            f"`{record['command']}` at commit {record['commit']}: {record['cpu']['model']}, "
            f"{record['cpu']['threads']} threads; the `{record['size']}` shape, 16 × 128 tokens per step, eager; "
            f"medians of {record['repeats']} repetitions, each variant timed alternately with the shipped encoding.",
            "",
            "| position_encoding | precision | tokens/s shipped | tokens/s variant | speed (shipped = 1) | target |",
            "|---|---|---|---|---|---|",
            *(format_row(row) for row in record["rows"]),
            "",
        ]
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encodings", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--precisions", nargs="+", default=["bf16", "fp32"], choices=utilization.PRECISIONS)
    parser.add_argument("--size", default="small", help="The pretraining script's size preset (default: small).")
    parser.add_argument("--repeats", type=int, default=9, help="Interleaved repetitions per pair (the median).")
    parser.add_argument("--output", default=None, help="Markdown report (default: cost.md beside this file).")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}.")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    record = {
        "command": "python -m benchmarks.length_generalization.paper_encoding.cost " + " ".join(sys.argv[1:]),
        "commit": git_commit(),
        "cpu": cpu_description(),
        "size": args.size,
        "repeats": args.repeats,
    }
    record["rows"] = measure(args)
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(__file__)), "cost.md")
    with open(output, "w") as handle:
        handle.write(markdown(record))
    with open(os.path.splitext(output)[0] + ".json", "w") as handle:
        json.dump(record, handle, indent=1)
    print(markdown(record))
    return record


if __name__ == "__main__":
    main()
