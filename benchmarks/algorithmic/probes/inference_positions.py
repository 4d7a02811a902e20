"""Probe (one seed): does a model trained with the randomized encoding (`position_mode="ordered_subset"`) score
higher at test with evenly spaced positions than with a random draw?

Trains the benchmark's randomized arm for STEPS steps (`trained_probe.trained_model`), then scores the fixed test
inputs of each test length with the five choices of positions of `trained_probe` (its own draw, evenly spaced,
evenly spaced and centred, a draw per input, an ensemble of draws).

    python -m benchmarks.algorithmic.probes.inference_positions reverse_string 6000 0   # log: inference_positions.log
"""

import sys

import torch

from benchmarks.algorithmic.probes.trained_probe import PROBES, score_choices, trained_model
from benchmarks.algorithmic.tasks import get_task


def main(task_name: str, steps: int, seed: int) -> None:
    torch.set_num_threads(1)
    task = get_task(task_name)
    model = trained_model(task, steps, seed, PROBES / f"{task_name}-{steps}-seed{seed}.pt")
    score_choices(model, task)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
