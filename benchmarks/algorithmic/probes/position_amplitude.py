"""Probe (kept weights, no training): does a stronger position signal at inference sharpen where the randomized
models look? `probes/position_span.py` found that these models read where a token falls in 0…L-1, and that past the
training length they lack the resolution to pick one of many close tokens. Multiplying the sinusoidal encoding by α
(token embeddings × √d unchanged) scales the position terms of the first layer's attention logits by up to α², a
sharper kernel over positions if the model reads them there.

Loads a finished run's weights (`outputs/algorithmic/<task>/<arm>-seed<seed>/model.pt`, a randomized or
randomized_evenly run) and scores the benchmark's fixed test inputs (`run.evaluate`'s lengths and inputs) with evenly
spaced positions, for each α.

    python -m benchmarks.algorithmic.probes.position_amplitude reverse_string randomized_evenly 0

"in" and "out" in the log are plain means over the 4 test lengths in distribution and the 12 past it. Result
(position_amplitude.log): α = 1 is best in both directions on both models tried; dropped.
"""

import sys
import time

import torch

from benchmarks.algorithmic.arms import ModelSize, build_model
from benchmarks.algorithmic.run import BUCKETS, CHECKPOINTS, accuracy_at, test_lengths
from benchmarks.algorithmic.tasks import get_task

ALPHAS = (1.0, 0.8, 1.25, 1.5)


def main() -> None:
    torch.set_num_threads(1)
    task_name, arm, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    task = get_task(task_name)
    state = torch.load(CHECKPOINTS / task_name / f"{arm}-seed{seed}" / "model.pt", weights_only=False)
    torch.manual_seed(seed)
    model = build_model("randomized_evenly", task, ModelSize(), 40).eval()  # the randomized model, evenly spaced
    model.load_state_dict(state["model"])
    embeddings = model.base_model.embeddings
    encode = embeddings.encode_positions
    lengths = [n for bucket in BUCKETS for n in test_lengths(bucket, 4)]
    print(f"{task_name} {arm} seed {seed}; evenly spaced positions; encoding × α", flush=True)
    for alpha in ALPHAS:
        embeddings.encode_positions = lambda *args, scale=alpha, **kwargs: scale * encode(*args, **kwargs)
        started = time.time()
        row = [100 * accuracy_at(model, task, n, 64)["accuracy"] for n in lengths]
        inside = [a for n, a in zip(lengths, row, strict=True) if n <= 40]
        outside = [a for n, a in zip(lengths, row, strict=True) if n > 40]
        print(
            f"α={alpha}: in {sum(inside) / len(inside):.1f} out {sum(outside) / len(outside):.1f} | "
            + " ".join(f"{n}:{a:.1f}" for n, a in zip(lengths, row, strict=True))
            + f" ({time.time() - started:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
