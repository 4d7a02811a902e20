"""Probe (kept weights, no training): does scaling the attention logits by log(T)/log(T_train) past the training
length (T the sequence length; Chiang & Cholak 2022, "Overcoming a Theoretical Limitation of Self-Attention", to
keep attention as sharp on long inputs as on the ones trained on) raise accuracy past the training length? And the
inverse, log(T_train)/log(T), which softens attention on long inputs?

Loads a finished benchmark run's weights (`outputs/algorithmic/<task>/<arm>-seed<seed>/model.pt`) and scores the
benchmark's fixed test inputs (the same lengths and inputs as `run.evaluate`) with and without the scaling, with
both `position_inference` settings when the arm is the randomized one.

    python -m benchmarks.algorithmic.probes.attention_log_scaling duplicate_string randomized 1

"in" and "out" in the log are plain means over the 4 test lengths in distribution and the 12 past it. Result
(attention_log_scaling.log, Duplicate String, randomized seed 1): both directions lower accuracy past the training
length (evenly spaced: 71.1 unscaled, 60.2 sharpened, 61.6 softened); dropped.
"""

import math
import sys
import time

import torch

from benchmarks.algorithmic.arms import ModelSize, build_model
from benchmarks.algorithmic.run import BUCKETS, CHECKPOINTS, accuracy_at, test_lengths
from benchmarks.algorithmic.tasks import get_task

torch.set_num_threads(1)
task_name, arm, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
task = get_task(task_name)
state = torch.load(CHECKPOINTS / task_name / f"{arm}-seed{seed}" / "model.pt", weights_only=False)
torch.manual_seed(seed)
model = build_model(arm, task, ModelSize(), 40)
model.load_state_dict(state["model"])
attentions = [m for m in model.modules() if hasattr(m, "scaling") and hasattr(m, "qkv")]
base_scaling = attentions[0].scaling
train_tokens = task.sequence_length(40)

lengths = [n for bucket in BUCKETS for n in test_lengths(bucket, 4)]
samplings = ["draw", "evenly_spaced"] if arm == "randomized" else [None]
print(f"{task_name} {arm} seed {seed}; train sequence length {train_tokens}", flush=True)
for sampling in samplings:
    if sampling is not None:
        model.config.position_inference = sampling
    for power in (0, 1, -1):  # none, sharpen, soften
        started = time.time()
        row = []
        for n in lengths:
            tokens = task.sequence_length(n)
            factor = max(1.0, math.log(tokens) / math.log(train_tokens)) ** power
            for module in attentions:
                module.scaling = base_scaling * factor
            row.append(100 * accuracy_at(model, task, n, 64)["accuracy"])
        inside = [a for n, a in zip(lengths, row, strict=True) if n <= 40]
        outside = [a for n, a in zip(lengths, row, strict=True) if n > 40]
        print(
            f"sampling={sampling} scaling=(log T/log T_train)^{power}: in {sum(inside) / len(inside):.1f} "
            f"out {sum(outside) / len(outside):.1f} | "
            + " ".join(f"{n}:{a:.1f}" for n, a in zip(lengths, row, strict=True))
            + f" ({time.time() - started:.0f} s)",
            flush=True,
        )
