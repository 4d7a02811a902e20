"""Probe (one seed, a negative result): the randomized encoding drawn at every density. Each training sequence of T
tokens draws its T sorted positions from a window of S positions, S log-uniform in [T, L], the window placed
uniformly in 0…L-1; so training also sees dense positions (spacing ~1), as long test inputs have. Evaluated as
`inference_positions.py` does.

    python -m benchmarks.algorithmic.probes.multiscale_positions reverse_string 6000 0  # multiscale_positions.log
"""

import math
import sys

import torch

from benchmarks.algorithmic.arms import POSITION_RANGE
from benchmarks.algorithmic.probes.trained_probe import PROBES, score_choices, trained_model
from benchmarks.algorithmic.tasks import get_task


def multiscale_positions(length: int, batch_size: int) -> torch.Tensor:
    """(B, T) sorted positions: per input, T distinct draws from a window of S positions, S log-uniform in [T, L]."""
    spans = torch.empty(batch_size).uniform_(math.log(length), math.log(POSITION_RANGE)).exp().long()
    positions = []
    for span in spans.clamp(length, POSITION_RANGE).tolist():
        start = int(torch.randint(0, POSITION_RANGE - span + 1, (1,)))
        positions.append(start + torch.randperm(span)[:length].sort().values)  # (T,)
    return torch.stack(positions)  # (B, T)


def main(task_name: str, steps: int, seed: int) -> None:
    torch.set_num_threads(1)
    task = get_task(task_name)
    out = PROBES / f"{task_name}-{steps}-seed{seed}-multiscale.pt"
    score_choices(trained_model(task, steps, seed, out, positions=multiscale_positions), task)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
