"""How long does attention take to learn position, by sequence length? A toy where only order helps.

Each row counts upwards through S symbols from a random start ("7 8 9 ... S-1 0 1 ..."), so a masked symbol is
decided by its neighbours, while every row holds all symbols about equally often (a bag of words learns nothing).
The same model (pre-LN, 2 layers, d=64, 4 heads, no dropout) is trained on rows of each length with the same tokens
per step, learning rate and seed; the table gives the training loss every 50 steps. The loss of ignoring order is
log S.

    python -m benchmarks.position_toy.run    # -> benchmarks/position_toy/results.md, about 2 minutes on 1 thread
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch

import sinusoidal_encoder as se

REPO = Path(__file__).resolve().parents[2]
FIRST_SYMBOL, MASK, CLS = 4, 3, 1  # ids 0-3 are special in the toy vocabulary


def counting_batch(rows: int, length: int, symbols: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    start = torch.randint(0, symbols, (rows, 1), generator=generator)  # (R, 1)
    ids = (start + torch.arange(length - 1)) % symbols + FIRST_SYMBOL  # (R, L-1)
    ids = torch.cat([torch.full((rows, 1), CLS), ids], dim=1)  # (R, L)
    masked = torch.rand(rows, length, generator=generator) < 0.15
    masked[:, 0] = False
    return torch.where(masked, MASK, ids), torch.where(masked, ids, -100)


def train_curve(length: int, args: argparse.Namespace) -> list[float]:
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    config = se.SinusoidalEncoderConfig(
        vocab_size=args.symbols + FIRST_SYMBOL,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=length,
        norm_first=True,
        pad_token_id=0,
    )
    model = se.SinusoidalEncoderForMaskedLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, betas=(0.9, 0.98))
    curve, window = [], []
    for step in range(1, args.steps + 1):
        input_ids, labels = counting_batch(args.tokens_per_step // length, length, args.symbols, generator)
        loss = model(input_ids=input_ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        window.append(loss.item())
        if step % args.every == 0:
            curve.append(sum(window) / len(window))
            window = []
    return curve


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--symbols", type=int, default=50)
    parser.add_argument("--tokens_per_step", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "position_toy" / "results.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    steps = list(range(args.every, args.steps + 1, args.every))
    lines = [
        "# Attention learns position sooner on short sequences",
        "",
        f"`python -m benchmarks.position_toy.run` ({args.symbols} symbols counted upwards from a random start; "
        f"{args.tokens_per_step} tokens per step; lr {args.learning_rate:g}; seed {args.seed}). Mean training loss "
        f"over each window of {args.every} steps; ignoring order costs log {args.symbols} = "
        f"{math.log(args.symbols):.2f}.",
        "",
        "| sequence length | " + " | ".join(f"steps {s - args.every + 1}–{s}" for s in steps) + " |",
        "|---|" + "---|" * len(steps),
    ]
    for length in args.lengths:
        start = time.time()
        curve = train_curve(length, args)
        lines.append(f"| {length} | " + " | ".join(f"{loss:.2f}" for loss in curve) + " |")
        print(lines[-1], f"({time.time() - start:.0f} s)", flush=True)
    args.output.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
