"""Probe (kept weights, no training): what does a model trained with the randomized encoding read from its
positions, the gaps between tokens or where they fall in the range 0…L-1?

A draw of n sorted positions from 0…L-1 spreads over the whole range whatever n, so the k-th of n tokens sits near
k·L/n: the fraction k/n of the sequence is written in the position itself. If the model reads that fraction, the
same inputs placed evenly over a part of the range (a smaller span, or the same span moved) should fail; if it reads
gaps, a span of a few training gaps should do. Scores in-distribution test inputs (the benchmark's fixed inputs) with
positions ⌊start + k·span/T⌋ for the k-th of T tokens:

- span = g·T for gaps g = 1, 2, 4, 8, 16 from position 0 (dense: the spacing of long test inputs in 0…L-1);
- span = L/2, from 0 and from L/2 (half the range: the training gaps of short inputs, a wrong fraction);
- span = L from 0 (what `position_inference="evenly_spaced"` gives).

For the first seed it also scores lengths 120 and 500 with the whole range, the accuracy by tenth of the output
(do the errors gather near an end?), with positions ⌊k·L/T⌋ and unrounded k·L/T.

    python -m benchmarks.algorithmic.probes.position_span reverse_string randomized_evenly 0 1 2

Loads `outputs/algorithmic/<task>/<arm>-seed<seed>/model.pt` (a randomized or randomized_evenly run: the same
training). Result (position_span.log; Reverse String, Bucket Sort, Odds First seeds 0–2, Duplicate String seeds
1–2): every model reads where its tokens fall in 0…L-1. Only the whole range gives its in-distribution accuracy
(Reverse String 100.0 for every seed); half of it, which keeps the training gaps, loses much of it (Reverse String
70.8–92.6, Duplicate String 54.2–60.3, Odds First 56.3–61.7 against 73.0–82.3; Bucket Sort, which needs the input's
order only, keeps 100.0 on the upper half and 92.1–97.8 on the lower), and dense spans (gaps 1–8, the spacing of
long test inputs) fall to or below the majority level. So past the training length the model must place T tokens,
L/T apart, in a range it learned at L/T ≥ 25 (Reverse String: T ≤ 80 in training): the resolution it needs grows
with the length.
"""

import sys

import torch

from benchmarks.algorithmic.arms import POSITION_RANGE, ModelSize, build_model
from benchmarks.algorithmic.run import CHECKPOINTS, test_batches
from benchmarks.algorithmic.tasks import get_task

GAPS = (1, 2, 4, 8, 16)
LENGTHS = (10, 20, 30, 40)
EXAMPLES = 64


@torch.no_grad()
def accuracy(model, task, length: int, start: int, span: int) -> float:
    """Per-token accuracy at the blanks with the k-th of T tokens at ⌊start + k·span/T⌋."""
    correct = []
    for batch in test_batches(task, length, EXAMPLES):
        tokens = batch.input_ids.shape[1]
        positions = (start + torch.arange(tokens) * span // tokens).unsqueeze(0)  # (1, T)
        logits = model(input_ids=batch.input_ids, position_ids=positions).logits  # (B, T, symbols)
        predicted = logits[:, -batch.targets.shape[1] :].argmax(-1)  # (B, m)
        correct.append((predicted == batch.targets).float().mean(dim=1))  # (B,)
    return 100 * torch.cat(correct).mean().item()


@torch.no_grad()
def accuracy_by_tenth(model, task, length: int, exact: bool) -> list[float]:
    """Past the training length, with the evenly spaced positions k·L/T (exact, or ⌊k·L/T⌋ as the config gives):
    per-token accuracy in each tenth of the output, to see whether the errors gather somewhere."""
    correct = []
    for batch in test_batches(task, length, EXAMPLES):
        tokens = batch.input_ids.shape[1]
        steps = torch.arange(tokens, dtype=torch.float64 if exact else torch.long) * POSITION_RANGE
        positions = (steps / tokens if exact else steps // tokens).unsqueeze(0)  # (1, T)
        logits = model(input_ids=batch.input_ids, position_ids=positions).logits  # (B, T, symbols)
        predicted = logits[:, -batch.targets.shape[1] :].argmax(-1)  # (B, m)
        correct.append((predicted == batch.targets).float())  # (B, m)
    by_output = torch.cat(correct).mean(dim=0)  # (m,)
    m = by_output.shape[0]
    return [100 * by_output[i * m // 10 : (i + 1) * m // 10].mean().item() for i in range(10)]


def main() -> None:
    torch.set_num_threads(1)
    task_name, arm, seeds = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3:]]
    task = get_task(task_name)
    half = POSITION_RANGE // 2
    columns = [f"gap {g}" for g in GAPS] + ["0…L/2", "L/2…L", "0…L"]
    print(f"{task_name} {arm}; L = {POSITION_RANGE}; mean per-token accuracy (%) over lengths {LENGTHS}")
    print("seed | " + " | ".join(columns), flush=True)
    for seed in seeds:
        state = torch.load(CHECKPOINTS / task_name / f"{arm}-seed{seed}" / "model.pt", weights_only=False)
        torch.manual_seed(seed)
        model = build_model(arm, task, ModelSize(), 40).eval()
        model.load_state_dict(state["model"])
        rows = {column: [] for column in columns}
        for n in LENGTHS:
            tokens = task.sequence_length(n)
            for g in GAPS:
                rows[f"gap {g}"].append(accuracy(model, task, n, 0, g * tokens))
            rows["0…L/2"].append(accuracy(model, task, n, 0, half))
            rows["L/2…L"].append(accuracy(model, task, n, half, half))
            rows["0…L"].append(accuracy(model, task, n, 0, POSITION_RANGE))
        means = [sum(values) / len(values) for values in rows.values()]
        print(f"{seed} | " + " | ".join(f"{m:.1f}" for m in means), flush=True)
        if seed == seeds[0]:
            for n in (120, 500):
                for exact in (False, True):
                    tenths = accuracy_by_tenth(model, task, n, exact)
                    label = "k·L/T exact" if exact else "⌊k·L/T⌋"
                    print(
                        f"  length {n}, {label}: mean {sum(tenths) / 10:.1f}; by tenth of the output "
                        + " ".join(f"{t:.0f}" for t in tenths),
                        flush=True,
                    )


if __name__ == "__main__":
    main()
