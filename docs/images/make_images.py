"""Draw the pictures of docs/encoding.md: one per property of the sinusoidal encoding.

    python docs/images/make_images.py                      # rewrites the PNGs next to this file
    python docs/images/make_images.py --output_dir outputs/images  # anywhere else

Every picture is computed with `sinusoidal_encoder.sinusoidal_position_encoding`, the function the model uses.
Needs matplotlib (the `plots` extra).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from sinusoidal_encoder import sinusoidal_position_encoding

DPI = 80
METADATA = {"Software": None}  # no version string: the same inputs give the same bytes


def pe(positions, dim: int) -> torch.Tensor:
    """PE of integer positions, as float64 (the float32 result of the model's function, widened)."""
    return sinusoidal_position_encoding(torch.as_tensor(positions), dim).double()


def frequencies(dim: int, base: float = 10000.0) -> torch.Tensor:
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def save(fig, folder: Path, name: str) -> None:
    fig.savefig(folder / name, dpi=DPI, metadata=METADATA)
    plt.close(fig)


def heatmap(folder: Path) -> None:
    """The encoding itself: positions × dimensions, every value in [-1, 1]."""
    dim, length = 128, 200
    table = pe(torch.arange(length), dim)
    fig, ax = plt.subplots(figsize=(8, 3.2))
    image = ax.imshow(table.T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, origin="lower", interpolation="nearest")
    ax.set_xlabel("position p")
    ax.set_ylabel("dimension (2i: sin, 2i+1: cos)")
    ax.set_title(f"PE(p) for p = 0…{length - 1}, d = {dim}")
    fig.colorbar(image, ax=ax, label="value")
    fig.tight_layout()
    save(fig, folder, "encoding_heatmap.png")


def bounded(folder: Path) -> None:
    """Components stay within [-1, 1] and every vector has the same length √(d/2)."""
    dim, length = 64, 100_000
    table = pe(torch.arange(length), dim)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3))
    shown = torch.arange(400)
    for column in (12, 21, 41):
        left.plot(shown, table[:400, column], linewidth=1, label=f"dimension {column}")
    for bound in (-1, 1):
        left.axhline(bound, color="black", linestyle="--", linewidth=0.8)
    left.set_ylim(-1.25, 1.25)
    left.set_xlabel("position p")
    left.set_ylabel("PE(p, j)")
    left.set_title("components: sines and cosines")
    left.legend(fontsize=7, loc="lower right", ncol=2)
    step = 250
    left_edges = torch.arange(0, length, step)
    low = table.view(-1, step, dim).amin(dim=(1, 2))
    high = table.view(-1, step, dim).amax(dim=(1, 2))
    right.fill_between(left_edges, low, high, step="post", alpha=0.4, label="min…max over the vector")
    norms = table.norm(dim=1)[::step]
    right.plot(left_edges, norms / math.sqrt(dim / 2), color="C3", label="‖PE(p)‖ / √(d/2)")
    right.set_ylim(-1.25, 1.35)
    right.set_xlabel("position p")
    right.set_title(f"p = 0…{length - 1:,}, d = {dim}")
    right.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save(fig, folder, "bounded.png")


def unique(folder: Path) -> None:
    """‖PE(p) − PE(p+k)‖ depends on k only; against k = 1…4095 it never comes near 0."""
    length = 4096
    offsets = torch.arange(1, length)
    fig, ax = plt.subplots(figsize=(8, 3))
    for dim in (8, 32, 128):
        table = pe(torch.arange(length), dim)
        distances = torch.cdist(table, table)
        distances.fill_diagonal_(float("inf"))
        smallest = distances.min()  # over every pair p ≠ q in 0…4095, as the test computes it
        from_zero = (table[1:] - table[0]).norm(dim=1)  # ‖PE(0) − PE(k)‖
        ax.plot(offsets, from_zero, linewidth=0.6, label=f"d = {dim}: smallest over all pairs {smallest:.3f}")
    ax.axhline(1e-3, color="black", linestyle="--", linewidth=0.8, label="the test's bound, 1e-3")
    ax.set_yscale("log")
    ax.set_xlabel("offset k = q − p")
    ax.set_ylabel("‖PE(p) − PE(p + k)‖")
    ax.set_title(f"every position has its own vector (p, q in 0…{length - 1})")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save(fig, folder, "unique.png")


def length_independent(folder: Path) -> None:
    """The encoding of a sequence of 24 tokens is the first 24 rows of that of a sequence of 96 tokens."""
    dim = 32
    short = pe(torch.arange(24), dim)
    long = pe(torch.arange(96), dim)
    fig, axes = plt.subplots(1, 3, figsize=(9, 2.8), gridspec_kw={"width_ratios": [24, 96, 24]})
    for ax, table, title in (
        (axes[0], short, "sequence of 24 tokens"),
        (axes[1], long, "sequence of 96 tokens"),
        (axes[2], long[:24] - short, "difference, p < 24"),
    ):
        ax.imshow(table.T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, origin="lower", interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("position p")
    axes[0].set_ylabel("dimension")
    axes[1].axvline(23.5, color="black", linewidth=1)
    axes[2].text(11.5, dim / 2, f"max |Δ| = {(long[:24] - short).abs().max():.0f}", ha="center", va="center")
    fig.tight_layout()
    save(fig, folder, "length_independent.png")


def rotation(folder: Path) -> None:
    """Each (sin, cos) pair of PE(p) lies on the unit circle; a shift by k turns it by k·ω_i, whatever p."""
    dim, k = 16, 10
    omega = frequencies(dim)
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    for ax, pair in zip(axes, (2, 3), strict=True):
        positions = torch.arange(0, 64)
        table = pe(positions, dim)
        ax.plot(table[:, 2 * pair + 1], table[:, 2 * pair], ".", color="0.7", markersize=4)
        for start, color in zip((3, 20, 41), ("C0", "C1", "C2"), strict=True):
            a = table[start, 2 * pair : 2 * pair + 2]
            b = table[start + k, 2 * pair : 2 * pair + 2]
            ax.annotate("", xy=(b[1], b[0]), xytext=(a[1], a[0]), arrowprops=dict(arrowstyle="->", color=color))
            ax.plot([0, a[1]], [0, a[0]], color=color, linewidth=0.6)
            ax.plot([0, b[1]], [0, b[0]], color=color, linewidth=0.6, linestyle="--")
            ax.text(1.08 * a[1], 1.08 * a[0], f"p={start}", color=color, fontsize=8, ha="center")
        ax.set_aspect("equal")
        ax.set_xlim(-1.3, 1.3)
        ax.set_ylim(-1.3, 1.3)
        ax.set_xlabel(f"PE(p, {2 * pair + 1}) = cos(p·ω)")
        ax.set_ylabel(f"PE(p, {2 * pair}) = sin(p·ω)")
        turn = f"p → p+{k} turns by {k * omega[pair]:.3f} rad"
        ax.set_title(f"pair i = {pair}, ω = {omega[pair]:.4f}: {turn}", fontsize=9)
    fig.suptitle("PE(p + k) = R(k)·PE(p): the same rotation from every p (grey: p = 0…63)", fontsize=10)
    fig.tight_layout()
    save(fig, folder, "rotation.png")


def dot_products(folder: Path) -> None:
    """PE(p)·PE(p+k) against k, from several p: one curve, Σ_i cos(k·ω_i)."""
    dim = 64
    offsets = torch.arange(-200, 201)
    fig, ax = plt.subplots(figsize=(8, 3))
    for start, style in zip((200, 1000, 5000, 30000), ("-", "--", ":", "-."), strict=True):
        dots = (pe(torch.full_like(offsets, start), dim) * pe(start + offsets, dim)).sum(-1)
        ax.plot(offsets, dots, linestyle=style, linewidth=1.2, label=f"p = {start}")
    formula = torch.cos(offsets[:, None].double() * frequencies(dim)).sum(-1)
    ax.plot(offsets, formula, color="black", linewidth=0.5, label="Σ cos(k·ω_i)")
    ax.set_xlabel("offset k")
    ax.set_ylabel("PE(p) · PE(p + k)")
    ax.set_title(f"the dot product depends on k only (d = {dim}; the curves lie on each other)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, folder, "dot_products.png")


def past_training_length(folder: Path) -> None:
    """No table and no cap: positions past the training length get the formula's values, exact to 1e-6."""
    dim, trained = 64, 512
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3))
    table = pe(torch.arange(2048), dim)
    left.imshow(table.T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, origin="lower", interpolation="nearest")
    left.axvline(trained, color="black", linewidth=1.2)
    left.text(trained + 30, dim - 6, "max_position_embeddings = 512", fontsize=8, backgroundcolor="white")
    left.set_xlabel("position p")
    left.set_ylabel("dimension")
    left.set_title("the encoding goes on past the training length", fontsize=9)
    positions = torch.arange(65536)
    float32 = sinusoidal_position_encoding(positions, dim).double()
    angles = positions.double()[:, None] * frequencies(dim)
    exact = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    error = (float32 - exact).abs().view(-1, 1024, dim).amax(dim=(1, 2))
    right.plot(torch.arange(0, 65536, 1024), error, drawstyle="steps-post")
    right.axhline(1e-6, color="black", linestyle="--", linewidth=0.8, label="1e-6")
    right.set_yscale("log")
    right.set_ylim(1e-9, 1e-5)
    right.set_xlabel("position p")
    right.set_ylabel("max |float32 − float64 formula|")
    right.set_title("accurate at every position up to 65,535", fontsize=9)
    right.legend(fontsize=7)
    fig.tight_layout()
    save(fig, folder, "past_training_length.png")


DRAWINGS = (heatmap, bounded, unique, length_independent, rotation, dot_products, past_training_length)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=str(Path(__file__).resolve().parent), help="Where the PNGs go.")
    folder = Path(parser.parse_args(argv).output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for draw in DRAWINGS:
        draw(folder)
    for path in sorted(folder.glob("*.png")):
        print(f"{path.name}: {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
