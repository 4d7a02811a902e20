"""Probe (one seed): does a model trained with the randomized encoding (`position_sampling="ordered_subset"`) score
higher at test with evenly spaced positions than with a random draw?

Trains the benchmark's randomized arm (same model, data, optimizer and schedule as `run.train_run`, no curve) for
STEPS steps, then scores the fixed test inputs of each test length with five choices of positions:
    fixed     the model's own evaluation-mode draw (one seeded draw per length, `position_sampling_inference="draw"`)
    grid      ⌊k·L/n⌋ (what `position_sampling_inference="evenly_spaced"` gives)
    cgrid     ⌊(2k+1)·L/2n⌋ (evenly spaced, centred)
    perinput  a fresh draw for every input
    ens       probabilities averaged over 5 draws

    python -m benchmarks.algorithmic.probes.inference_positions reverse_string 6000 0   # log: inference_positions.log
"""

import os
import sys
import time

import torch
from transformers import get_scheduler

from benchmarks.algorithmic.arms import POSITION_RANGE, ModelSize, build_model
from benchmarks.algorithmic.run import BUCKETS, loss_of, test_batches, test_lengths
from benchmarks.algorithmic.tasks import get_task, make_batch

torch.set_num_threads(1)
task_name, steps, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
task = get_task(task_name)
out = f"outputs/algorithmic-probes/{task_name}-{steps}-seed{seed}.pt"
torch.manual_seed(seed)
model = build_model("randomized", task, ModelSize(), 40)
try:
    model.load_state_dict(torch.load(out))
    print("loaded", out)
except FileNotFoundError:
    data = torch.Generator().manual_seed(seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-3,
        betas=(0.9, 0.98),
    )
    sch = get_scheduler("cosine", opt, 200, steps)
    t = time.time()
    for step in range(steps):
        length = int(torch.randint(1, 41, (1,), generator=data))
        loss = loss_of(model, make_batch(task, 32, length, data))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sch.step()
        if (step + 1) % 1000 == 0:
            print(step + 1, round(loss.item(), 4), round(time.time() - t), flush=True)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    torch.save(model.state_dict(), out)
model.eval()


def grid(T):  # evenly spaced over 0..L-1
    return (torch.arange(T) * POSITION_RANGE // T).unsqueeze(0)


def centered_grid(T):
    return ((torch.arange(T) * 2 + 1) * POSITION_RANGE // (2 * T)).unsqueeze(0)


def draw(T, g):
    return torch.randperm(POSITION_RANGE, generator=g)[:T].sort().values.unsqueeze(0)


@torch.no_grad()
def acc(n, mode, k=5):
    correct = []
    for batch in test_batches(task, n, 64):
        B, T = batch.input_ids.shape
        m = batch.targets.shape[1]
        if mode == "fixed":
            logits = model(input_ids=batch.input_ids).logits
        elif mode == "grid":
            logits = model(input_ids=batch.input_ids, position_ids=grid(T).expand(B, T)).logits
        elif mode == "cgrid":
            logits = model(input_ids=batch.input_ids, position_ids=centered_grid(T).expand(B, T)).logits
        elif mode == "ens":
            g = torch.Generator().manual_seed(n)
            logits = sum(
                model(input_ids=batch.input_ids, position_ids=draw(T, g).expand(B, T)).logits.softmax(-1)
                for _ in range(k)
            )
        elif mode == "perinput":
            g = torch.Generator().manual_seed(n)
            pos = torch.cat([draw(T, g) for _ in range(B)])
            logits = model(input_ids=batch.input_ids, position_ids=pos).logits
        correct.append((logits[:, -m:].argmax(-1) == batch.targets).float().mean(1))
    return torch.cat(correct).mean().item()


res = {}
for bucket in BUCKETS:
    for n in test_lengths(bucket, 4):
        res[n] = {mode: round(100 * acc(n, mode), 1) for mode in ("fixed", "grid", "cgrid", "perinput", "ens")}
        print(n, res[n], flush=True)
for mode in ("fixed", "grid", "cgrid", "perinput", "ens"):
    ood = [res[n][mode] for n in res if n > 40]
    print(mode, "in", sum(res[n][mode] for n in res if n <= 40) / 4, "ood(simple mean)", round(sum(ood) / len(ood), 1))
