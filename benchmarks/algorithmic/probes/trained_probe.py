"""What the probes that train their own model share: training the randomized arm with the benchmark's recipe (model,
data, optimizer and schedule of `run.train_run`; no curve, no checkpoint), optionally with positions of the probe's
own, and scoring the fixed test inputs with five choices of test positions:

    fixed     the model's own evaluation-mode draw (one seeded draw per length, `position_inference="draw"`)
    grid      ⌊k·L/n⌋ (what `position_inference="evenly_spaced"` gives)
    cgrid     ⌊(2k+1)·L/2n⌋ (evenly spaced, centred)
    perinput  a fresh draw for every input
    ens       probabilities averaged over 5 draws
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.algorithmic.arms import POSITION_RANGE, ModelSize, build_model
from benchmarks.algorithmic.run import BUCKETS, RunSettings, build_optimizer, loss_of, test_batches, test_lengths
from benchmarks.algorithmic.tasks import Task, make_batch

PROBES = Path("outputs/algorithmic-probes")
CHOICES = ("fixed", "grid", "cgrid", "perinput", "ens")

# (sequence length T, batch size B) -> the training positions (B, T), drawn from torch's global generator
TrainingPositions = Callable[[int, int], torch.Tensor]


def trained_model(task: Task, steps: int, seed: int, out: Path, positions: TrainingPositions | None = None):
    """The randomized arm trained for `steps` steps of 32 inputs (lengths 1–40) from `seed`: loaded from `out` if a
    former call saved it there, else trained and saved. `positions` replaces the arm's own draws in training."""
    torch.manual_seed(seed)
    model = build_model("randomized", task, ModelSize(), 40)
    if out.exists():
        model.load_state_dict(torch.load(out))
        print("loaded", out)
        return model.eval()
    settings = RunSettings(task=task.name, arm="randomized", seed=seed, steps=steps, batch_size=32, warmup_steps=200)
    optimizer, scheduler = build_optimizer(model, settings)
    data = torch.Generator().manual_seed(seed)
    started = time.time()
    for step in range(steps):
        length = int(torch.randint(1, settings.train_length + 1, (1,), generator=data))
        batch = make_batch(task, settings.batch_size, length, data)
        position_ids = None if positions is None else positions(batch.input_ids.shape[1], settings.batch_size)
        loss = loss_of(model, batch, position_ids)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        optimizer.step()
        scheduler.step()
        if (step + 1) % 1000 == 0:
            print(step + 1, round(loss.item(), 4), round(time.time() - started), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out)
    return model.eval()


def grid(length: int) -> torch.Tensor:
    return (torch.arange(length) * POSITION_RANGE // length).unsqueeze(0)  # (1, T), evenly spaced over 0…L-1


def centered_grid(length: int) -> torch.Tensor:
    return ((torch.arange(length) * 2 + 1) * POSITION_RANGE // (2 * length)).unsqueeze(0)  # (1, T)


def draw(length: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randperm(POSITION_RANGE, generator=generator)[:length].sort().values.unsqueeze(0)  # (1, T)


@torch.no_grad()
def accuracy(model, task: Task, n: int, choice: str, draws: int = 5) -> float:
    """Per-token accuracy at the blanks on the fixed test inputs of length `n`, positions chosen by `choice`."""
    correct = []
    for batch in test_batches(task, n, 64):
        B, T = batch.input_ids.shape
        m = batch.targets.shape[1]
        generator = torch.Generator().manual_seed(n)
        if choice == "fixed":
            logits = model(input_ids=batch.input_ids).logits
        elif choice == "grid":
            logits = model(input_ids=batch.input_ids, position_ids=grid(T).expand(B, T)).logits
        elif choice == "cgrid":
            logits = model(input_ids=batch.input_ids, position_ids=centered_grid(T).expand(B, T)).logits
        elif choice == "ens":
            logits = sum(
                model(input_ids=batch.input_ids, position_ids=draw(T, generator).expand(B, T)).logits.softmax(-1)
                for _ in range(draws)
            )
        elif choice == "perinput":
            positions = torch.cat([draw(T, generator) for _ in range(B)])  # (B, T)
            logits = model(input_ids=batch.input_ids, position_ids=positions).logits
        else:
            raise ValueError(f"choice must be one of {CHOICES}, got {choice!r}.")
        correct.append((logits[:, -m:].argmax(-1) == batch.targets).float().mean(1))  # (B,)
    return torch.cat(correct).mean().item()


def score_choices(model, task: Task) -> dict[int, dict[str, float]]:
    """Print and return the accuracy (%) of every choice at 4 lengths per bucket, then each choice's mean in
    distribution and past training (a plain mean over the lengths scored)."""
    scores = {}
    for bucket in BUCKETS:
        for n in test_lengths(bucket, 4):
            scores[n] = {choice: round(100 * accuracy(model, task, n, choice), 1) for choice in CHOICES}
            print(n, scores[n], flush=True)
    for choice in CHOICES:
        inside = [scores[n][choice] for n in scores if n <= 40]
        past = [scores[n][choice] for n in scores if n > 40]
        print(choice, "in", sum(inside) / len(inside), "ood(simple mean)", round(sum(past) / len(past), 1))
    return scores
