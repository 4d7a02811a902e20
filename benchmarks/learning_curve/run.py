"""The learning curve of a pretraining run: eval loss, unigram baseline and order gap against tokens seen, as a
markdown table and a plot, from the run's metrics.jsonl (the run may still be going, or resumed across sessions).

    python -m benchmarks.learning_curve.run outputs/learning-curve    # -> benchmarks/learning_curve/results.{md,png}

The run itself is training/pretrain.py with frequent evaluations and checkpoints; README gives the command.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def read_metrics(folder: Path) -> list[dict]:
    path = folder / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def curve_rows(metrics: list[dict]) -> list[dict]:
    """One row per evaluation: step, tokens seen, eval loss, unigram baseline, order gap."""
    from sinusoidal_encoder_training.publishing.plots import tokens_per_step

    per_step = tokens_per_step(metrics)
    if per_step is None:
        raise ValueError("The metrics log has no training line with tokens_seen: nothing to put on the x axis.")
    return [
        {
            "step": m["step"],
            "tokens": round(m["step"] * per_step),
            "eval_loss": m["eval_loss"],
            "eval_unigram_loss": m["eval_unigram_loss"],
            "eval_order_gap": m["eval_order_gap"],
        }
        for m in metrics
        if "eval_order_gap" in m
    ]


def first_reaching(rows: list[dict], key: str, threshold: float) -> dict | None:
    return next((row for row in rows if row[key] >= threshold), None)


def write_table(rows: list[dict], path: Path, command: str | None) -> None:
    lines = ["# Learning curve: loss, unigram baseline and order gap against tokens seen", ""]
    if command:
        lines += ["```bash", command, "```", ""]
    for threshold in (0.1, 0.3, 1.0):
        row = first_reaching(rows, "eval_order_gap", threshold)
        reached = f"{row['tokens']:,} tokens (step {row['step']})" if row else "not reached"
        lines.append(f"- order gap ≥ {threshold}: {reached}")
    lines += [
        "",
        "| step | tokens seen | eval loss | unigram baseline | below unigram | order gap |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['step']} | {row['tokens']:,} | {row['eval_loss']:.3f} | {row['eval_unigram_loss']:.3f} | "
            f"{row['eval_unigram_loss'] - row['eval_loss']:.3f} | {row['eval_order_gap']:+.3f} |"
        )
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="The output_dir of the pretraining run (its metrics.jsonl).")
    parser.add_argument(
        "--output", type=Path, default=REPO / "benchmarks" / "learning_curve" / "results", help="Path stem."
    )
    parser.add_argument("--command", default=None, help="The command of the run, quoted in the table.")
    args = parser.parse_args(argv)
    metrics = read_metrics(args.folder)
    rows = curve_rows(metrics)
    write_table(rows, args.output.with_suffix(".md"), args.command)
    from sinusoidal_encoder_training.publishing.plots import plot_losses

    plot_losses(str(args.output.with_suffix(".png")), metrics, by_tokens=True)
    last = rows[-1] if rows else None
    if last:
        print(
            f"{len(rows)} evaluations; last at {last['tokens']:,} tokens: eval loss {last['eval_loss']:.3f}, "
            f"unigram {last['eval_unigram_loss']:.3f}, order gap {last['eval_order_gap']:+.3f}"
        )


if __name__ == "__main__":
    main()
