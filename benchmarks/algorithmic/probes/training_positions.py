"""Probe (one seed): the randomized encoding with training positions that carry each token's rank. The paper's
ordered subset (`position_mode="ordered_subset"`) puts the k-th of T tokens near k·L/T, give or take several
cells of width L/T, so a model learns to read a blurred fraction k/T (see `position_span.py`). Two other draws:

    stratified  the k-th token's position drawn uniformly from the k-th of T equal cells of 0…L-1,
                [⌊k·L/T⌋, ⌊(k+1)·L/T⌋): the cells do not overlap, so the position tells the rank exactly
    grid        ⌊k·L/T⌋ exactly, the test positions of `position_inference="evenly_spaced"` (no randomness
                left: each training length has one set of positions)

Does training on positions that carry the rank make the evenly spaced positions of long test inputs easier to read?
Trains with the benchmark's recipe and scores as `inference_positions.py` does (same seed, data and steps: compare
with its log). Only `grid` and `cgrid` test positions mean anything here: `fixed`, `perinput` and `ens` are the
ordered subset's draws, which these models never trained on.

Result (training_positions.log; Reverse String seed 0, 6,000 steps; plain mean of the 12 test lengths past training,
in distribution in brackets): stratified training tested at the cells' middles (`cgrid`) 76.3 (100.0), against
71.2 (99.6) for the ordered subset tested evenly spaced (inference_positions.log), and ahead at every length past
training (61: 97.6 against 85.3; 100: 79.4 against 74.0; 250: 68.0 against 64.2); tested at the cells' first
positions (`grid`) it fails in distribution (67.2: those sit on the cells' edges). Grid training learns the task
at once (loss below 0.001 at step 1,000) and scores 100.0 in distribution, then falls to 58.2 at length 61 and
57.2 over the lengths past training: with no randomness the model stores the training grids' positions instead of
reading a fraction. Kept, as `position_mode="stratified"` (the benchmark's `stratified` arm).

    python -m benchmarks.algorithmic.probes.training_positions reverse_string 6000 0 stratified
    python -m benchmarks.algorithmic.probes.training_positions reverse_string 6000 0 grid     # training_positions.log
"""

import sys

import torch

from benchmarks.algorithmic.arms import POSITION_RANGE
from benchmarks.algorithmic.probes.trained_probe import PROBES, score_choices, trained_model
from benchmarks.algorithmic.tasks import get_task


def stratified_positions(length: int, batch_size: int) -> torch.Tensor:
    """(B, T) positions: the k-th token's drawn uniformly from [⌊k·L/T⌋, ⌊(k+1)·L/T⌋), sorted and distinct."""
    edges = torch.arange(length + 1) * POSITION_RANGE // length  # (T + 1,) cell boundaries
    widths = (edges[1:] - edges[:-1]).expand(batch_size, length)  # (B, T), each ≥ 1 while T ≤ L
    return edges[:-1] + (torch.rand(batch_size, length) * widths).long()  # (B, T)


def grid_positions(length: int, batch_size: int) -> torch.Tensor:
    """(B, T) positions ⌊k·L/T⌋, the same for every input."""
    return (torch.arange(length) * POSITION_RANGE // length).expand(batch_size, length)  # (B, T)


SCHEMES = {"stratified": stratified_positions, "grid": grid_positions}


def main(task_name: str, steps: int, seed: int, scheme: str) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {list(SCHEMES)}, got {scheme!r}.")
    torch.set_num_threads(1)
    task = get_task(task_name)
    out = PROBES / f"{task_name}-{steps}-seed{seed}-{scheme}.pt"
    score_choices(trained_model(task, steps, seed, out, positions=SCHEMES[scheme]), task)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
