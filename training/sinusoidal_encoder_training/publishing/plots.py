"""Pictures of the sinusoidal encoding and of a training run, drawn with matplotlib (the `plots` extra).

    python -m sinusoidal_encoder_training.publishing.plots outputs/small-builtin   # writes the PNGs into the folder

- encoding_heatmap.png: PE(pos, i) for positions × dimensions (interleaved sin/cos columns);
- encoding_dot_products.png: PE(p)·PE(p+k) against k, the same curve from every p (it depends on k alone);
- loss_curves.png: training and evaluation loss against optimizer steps, from the run's metrics.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from sinusoidal_encoder import sinusoidal_position_encoding
from sinusoidal_encoder_training.cli.command_line import require_extra
from sinusoidal_encoder_training.runs.metrics_log import read_metrics
from sinusoidal_encoder_training.tasks.registry import TASKS, loss_unit

PICTURES = {
    "encoding_heatmap.png": "The sinusoidal position encoding (positions × dimensions)",
    "encoding_dot_products.png": "PE(p)·PE(p+k) against the offset k",
    "loss_curves.png": "Training and evaluation loss",
}


def figure(**kwargs):
    """A matplotlib `Figure` (keyword arguments as its own) that draws into files only: not through pyplot, so the
    calling process keeps its backend and its open figures (a notebook's inline plots go on showing)."""
    require_extra("matplotlib", what="drawing the pictures")
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def plot_encoding(path: str, dim: int, base: float = 10000.0, positions: int = 256) -> None:
    pe = sinusoidal_position_encoding(torch.arange(positions), dim, base).numpy()  # (positions, dim)
    fig = figure(figsize=(8, 5))
    ax = fig.subplots()
    image = ax.imshow(pe, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xlabel("dimension (even: sin, odd: cos; frequency falls to the right)")
    ax.set_ylabel("position")
    ax.set_title(f"PE(pos, 2i) = sin(pos / {base:g}^(2i/{dim})), PE(pos, 2i+1) = cos(...)")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_dot_products(path: str, dim: int, base: float = 10000.0, max_offset: int = 512) -> None:
    offsets = torch.arange(max_offset + 1)
    fig = figure(figsize=(8, 4))
    ax = fig.subplots()
    for start in (0, 100, 1000):
        pe = sinusoidal_position_encoding(torch.tensor([start]), dim, base).double()  # (1, dim)
        shifted = sinusoidal_position_encoding(start + offsets, dim, base).double()  # (K, dim)
        ax.plot(offsets.numpy(), (shifted @ pe.T).squeeze(-1).numpy(), label=f"p = {start}", linewidth=1.2)
    ax.set_xlabel("offset k")
    ax.set_ylabel("PE(p) · PE(p + k)")
    ax.set_title(f"The curves coincide: the dot product depends on k alone (d = {dim}, peak d/2 at k = 0)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def tokens_per_step(metrics: list[dict]) -> float | None:
    """Tokens of one optimizer step, from the training lines of a metrics log (None when it has none)."""
    for m in metrics:
        if m.get("tokens_seen") and m.get("step"):
            return m["tokens_seen"] / m["step"]
    return None


def plot_losses(
    path: str,
    metrics: list[dict],
    by_tokens: bool = False,
    unit: str = TASKS["fill-mask"].loss_units[""],
) -> bool:
    """Training and evaluation loss in `unit` (`tasks.loss_unit`), with the unigram baseline beside them and, in a
    second panel, the order gap when the log has them (masked-LM pretraining). Against optimizer steps, or tokens
    seen with `by_tokens`. False (and no file) when the log holds no losses."""
    scale = (tokens_per_step(metrics) or 1.0) if by_tokens else 1.0

    def series(key: str) -> list[tuple[float, float]]:
        return [(m["step"] * scale, m[key]) for m in metrics if key in m]

    train, evaluation, unigram, gap = (
        series(k) for k in ("train_loss", "eval_loss", "eval_unigram_loss", "eval_order_gap")
    )
    if not train and not evaluation:
        return False
    fig = figure(figsize=(12 if gap else 8, 4))
    axes = fig.subplots(1, 2 if gap else 1, squeeze=False)
    ax = axes[0][0]
    if train:
        ax.plot(*zip(*train, strict=True), label="training loss", linewidth=1.2)
    if evaluation:
        ax.plot(*zip(*evaluation, strict=True), "o-", label="evaluation loss", linewidth=1.2)
    if unigram:
        ax.plot(*zip(*unigram, strict=True), "--", color="gray", label="unigram baseline (evaluation)")
    ax.set_ylabel(f"loss ({unit})")
    if gap:
        right = axes[0][1]
        right.plot(*zip(*gap, strict=True), "o-", color="tab:red", linewidth=1.2)
        right.axhline(0.0, color="gray", linewidth=0.8)
        right.set_ylabel("order gap (nats): shuffled − as written")
        right.set_title("Use of word order")
    for axis in axes[0]:
        axis.set_xlabel("tokens seen" if by_tokens else "optimizer step")
        axis.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def write_plots(
    output_dir: str,
    hidden_size: int,
    base: float = 10000.0,
    unit: str = TASKS["fill-mask"].loss_units[""],
    by_tokens: bool = False,
    encoding: bool = True,
) -> dict[str, str]:
    """Draw every picture into `output_dir`, the losses in `unit` (against tokens seen with `by_tokens`); return
    {file name: title} of those written. The pictures of the encoding PE only with `encoding` (a model that adds
    it to its embeddings: not a rotary, ALiBi or position-free one)."""
    written = {}
    if encoding:
        plot_encoding(os.path.join(output_dir, "encoding_heatmap.png"), hidden_size, base)
        plot_dot_products(os.path.join(output_dir, "encoding_dot_products.png"), hidden_size, base)
        written = {name: PICTURES[name] for name in ("encoding_heatmap.png", "encoding_dot_products.png")}
    metrics = read_metrics(output_dir)
    if plot_losses(os.path.join(output_dir, "loss_curves.png"), metrics, by_tokens=by_tokens, unit=unit):
        extras = " with the unigram baseline and the order gap" if any("eval_order_gap" in m for m in metrics) else ""
        written["loss_curves.png"] = f"{PICTURES['loss_curves.png']} ({unit}){extras}"
    return written


def adds_encoding(config: dict) -> bool:
    """Whether the model of `config` (config.json's fields) adds the encoding PE to its embeddings: the sinusoidal
    `position_encoding` (the default), with positions."""
    return config.get("position_mode") != "none" and config.get("position_encoding", "sinusoidal") == "sinusoidal"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="A model folder (config.json; metrics.jsonl for the loss curves).")
    parser.add_argument(
        "--by_tokens", action="store_true", help="Draw the loss curves against tokens seen, not optimizer steps."
    )
    args = parser.parse_args(argv)
    with open(os.path.join(args.folder, "config.json")) as handle:
        config = json.load(handle)
    written = write_plots(
        args.folder,
        config["hidden_size"],
        config.get("position_encoding_base", 10000.0),
        loss_unit(config),
        by_tokens=args.by_tokens,
        encoding=adds_encoding(config),
    )
    for name in written:
        print(os.path.join(args.folder, name))


if __name__ == "__main__":
    main()
