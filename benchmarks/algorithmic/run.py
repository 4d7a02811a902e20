"""Train and evaluate (task, arm, seed) runs of the algorithmic length-generalisation benchmark.

Training follows Ruoss et al. (2023) at a CPU budget: batches of 128 inputs, a fresh input length drawn uniformly
from 1…40 for each batch, one blank query token per output symbol, cross-entropy at the blanks. Evaluation is
per-token accuracy at the blanks (the papers' measure) on fixed test inputs: a few lengths in each bucket (1–40 in
distribution; 41–100, 101–250, 251–500 out of distribution), the same inputs for every arm and seed. Every arm of a
seed trains on the same batches (a data generator of its own, seeded by the seed) from the same initial RNG state.

A run appends its record, one line, to `benchmarks/algorithmic/runs/results.jsonl` (`records.py`) when it ends
and writes a checkpoint under `outputs/algorithmic/` every `--checkpoint_every` steps, so a killed benchmark resumes
where it stopped: runs whose (task, arm, seed) is in the file are skipped, unfinished ones continue from their
checkpoint with the same RNG states. A finished run leaves
its trained weights there (`model.pt`), from which an evaluation-only arm added later is evaluated.

    python -m benchmarks.algorithmic.run --tasks reverse_string --seeds 0 1 2 --jobs 2
    python -m benchmarks.algorithmic.report          # the table and plot of every finished run
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import get_scheduler

from sinusoidal_encoder_training.runs.optimization import parameter_groups

from .arms import ARMS, EVALUATED_FROM, ModelSize, build_model, inference_overrides
from .records import append_run, load_runs, results_file
from .tasks import TASKS, Task, get_task, majority_accuracy, make_batch

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "algorithmic" / "runs"  # the benchmark's runs: RESULTS / "results.jsonl"
CHECKPOINTS = REPO / "outputs" / "algorithmic"
BUCKETS = ((1, 40), (41, 100), (101, 250), (251, 500))  # Ruoss et al.: train on 1–40, test on 41–500
TEST_SEED = 1_234_567  # test inputs depend on the task and length only
LOSS_REDUCTIONS = ("mean", "sum")
# settings added after runs had been written, at the value those runs were trained with
ADDED_SETTINGS = {"loss_reduction": "mean"}


def stored_settings(settings: dict) -> dict:
    """The settings a run's record or kept weights hold, completed with `ADDED_SETTINGS` where they predate them."""
    return {**ADDED_SETTINGS, **settings}


@dataclass(frozen=True)
class RunSettings:
    task: str
    arm: str
    seed: int
    steps: int = 6000
    batch_size: int = 128
    learning_rate: float = 1e-3
    warmup_steps: int = 500
    lr_scheduler_type: str = "cosine"
    max_grad_norm: float = 1.0
    loss_reduction: str = "mean"  # "mean" over every blank of the batch; "sum" over each input's blanks (see loss_of)
    train_length: int = 40
    size: ModelSize = field(default_factory=ModelSize)
    buckets: tuple[tuple[int, int], ...] = BUCKETS
    lengths_per_bucket: int = 4
    test_examples: int = 32
    eval_every: int = 500
    checkpoint_every: int = 500

    def check(self) -> None:
        get_task(self.task)
        if self.arm not in ARMS:
            raise ValueError(f"`arm` must be one of {list(ARMS)}, got {self.arm!r}.")
        for name in ("steps", "batch_size", "train_length", "lengths_per_bucket", "test_examples", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be positive, got {getattr(self, name)}.")
        if self.loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"`loss_reduction` must be one of {list(LOSS_REDUCTIONS)}, got {self.loss_reduction!r}.")
        if self.buckets[0][1] != self.train_length:
            raise ValueError(
                f"The first bucket {self.buckets[0]} must end at `train_length` ({self.train_length}): it is the "
                f"in-distribution bucket."
            )

    @property
    def name(self) -> str:
        return f"{self.arm}-seed{self.seed}"


def finished_run(results: Path, settings: RunSettings) -> dict | None:
    """The record in `results`' file of the run of `settings`' task, arm and seed (the last if several); None if it
    has not finished."""
    key = (settings.task, settings.arm, settings.seed)
    found = [run for run in load_runs(results_file(results)) if _key(run["settings"]) == key]
    return found[-1] if found else None


def _key(settings: dict) -> tuple[str, str, int]:
    return settings["task"], settings["arm"], settings["seed"]


def test_lengths(bucket: tuple[int, int], count: int) -> list[int]:
    """`count` lengths spread evenly over the bucket, both ends included."""
    low, high = bucket
    if count == 1 or low == high:
        return [high]
    return sorted({round(low + i * (high - low) / (count - 1)) for i in range(count)})


def test_batches(task: Task, length: int, examples: int) -> list:
    """The fixed test inputs of one length, in batches of at most ~16k tokens."""
    generator = torch.Generator().manual_seed(TEST_SEED + 1000 * length + sorted(TASKS).index(task.name))
    per_batch = max(1, min(examples, 16_384 // task.sequence_length(length)))
    sizes = [min(per_batch, examples - start) for start in range(0, examples, per_batch)]
    return [make_batch(task, size, length, generator) for size in sizes]


@torch.no_grad()
def accuracy_at(model, task: Task, length: int, examples: int) -> dict[str, float]:
    """Mean per-token accuracy at the blanks over the fixed test inputs of `length`, and the majority level."""
    was_training = model.training
    model.eval()
    correct, majority = [], []
    for batch in test_batches(task, length, examples):
        logits = model(input_ids=batch.input_ids.to(model.device)).logits  # (B, n + m, symbols)
        predicted = logits[:, -batch.targets.shape[1] :].argmax(-1).cpu()  # (B, m)
        correct.append((predicted == batch.targets).float().mean(dim=1))  # (B,)
        majority.append(majority_accuracy(batch.targets))
    model.train(was_training)
    return {"accuracy": torch.cat(correct).mean().item(), "majority": torch.cat(majority).mean().item()}


def evaluate(model, task: Task, settings: RunSettings) -> dict:
    lengths = {}
    buckets = []
    for bucket in settings.buckets:
        scores = {
            n: accuracy_at(model, task, n, settings.test_examples)
            for n in test_lengths(bucket, settings.lengths_per_bucket)
        }
        lengths.update({str(n): score for n, score in scores.items()})
        buckets.append(
            {
                "bucket": f"{bucket[0]}-{bucket[1]}",
                "accuracy": sum(s["accuracy"] for s in scores.values()) / len(scores),
                "majority": sum(s["majority"] for s in scores.values()) / len(scores),
            }
        )
    return {"lengths": lengths, "buckets": buckets}


def loss_of(model, batch, position_ids: torch.Tensor | None = None, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy at the blanks; `position_ids` (B, n + m) replace the model's own positions when given.
    `reduction="mean"`: the mean over every blank of the batch, so each step weighs the same whatever the length;
    `"sum"`: summed over each input's m blanks, then averaged over the batch (the reference code's loss), so a step's
    gradient grows with the length it drew."""
    if position_ids is not None:
        position_ids = position_ids.to(model.device)
    logits = model(input_ids=batch.input_ids.to(model.device), position_ids=position_ids).logits  # (B, n + m, symbols)
    labels = batch.labels.to(model.device)  # (B, n + m)
    if reduction == "sum":
        summed = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="sum")
        return summed / labels.shape[0]
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())  # mean over the blanks


def build_optimizer(
    model, settings: RunSettings
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW (β = 0.9, 0.98, ε = 1e-8; weight decay 0.01 on matrices, none on vectors: the training library's
    `parameter_groups`), then `settings.warmup_steps` of linear warmup and `settings.lr_scheduler_type` decay over
    `settings.steps`."""
    optimizer = torch.optim.AdamW(parameter_groups(model, 0.01), lr=settings.learning_rate, betas=(0.9, 0.98))
    return optimizer, get_scheduler(settings.lr_scheduler_type, optimizer, settings.warmup_steps, settings.steps)


def _save(state: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save(state, partial)
    os.replace(partial, path)  # a kill leaves the old checkpoint or the new one, never half of one


def train_run(
    settings: RunSettings, results: Path = RESULTS, checkpoints: Path = CHECKPOINTS, device: str = "cpu"
) -> dict:
    """Train one run to `settings.steps` on `device`, resuming from its checkpoint if there is one; evaluate; append
    the result to `results`' file (see `records.py`). The data and the initial weights come from CPU generators
    whatever the device; on a GPU the randomized arm's position draws use the GPU's generator (seeded and
    checkpointed as well)."""
    settings.check()
    task = get_task(settings.task)
    done = finished_run(results, settings)
    if done is not None:
        for derived in (arm for arm, base in EVALUATED_FROM.items() if base == settings.arm):
            if finished_run(results, replace(settings, arm=derived)) is None:
                _evaluate_saved(replace(settings, arm=derived), results, checkpoints, device)  # added later
        return done
    base = EVALUATED_FROM.get(settings.arm)
    if base is not None:
        if finished_run(results, replace(settings, arm=base)) is None:
            train_run(replace(settings, arm=base), results, checkpoints, device)  # writes this arm's result too
            return finished_run(results, settings)
        if _evaluate_saved(settings, results, checkpoints, device):
            return finished_run(results, settings)
        # the base run's weights are gone: train this arm on its own, which trains exactly as the base arm
    checkpoint = checkpoints / settings.task / settings.name / "checkpoint.pt"
    torch.manual_seed(settings.seed)
    model = build_model(settings.arm, task, settings.size, settings.train_length).to(device)
    data = torch.Generator().manual_seed(settings.seed)
    optimizer, scheduler = build_optimizer(model, settings)
    step, curve, window, seconds = 0, [], [], 0.0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        data.set_state(state["data_rng"].cpu())
        torch.set_rng_state(state["torch_rng"].cpu())
        if "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"].cpu())
        step, curve, window, seconds = state["step"], state["curve"], state.get("window", []), state["seconds"]
    model.train()
    started = time.perf_counter() - seconds
    while step < settings.steps:
        length = int(torch.randint(1, settings.train_length + 1, (1,), generator=data))
        loss = loss_of(model, make_batch(task, settings.batch_size, length, data), reduction=settings.loss_reduction)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        optimizer.step()
        scheduler.step()
        step += 1
        window.append(loss.item())
        if step % settings.eval_every == 0 or step == settings.steps:
            in_distribution = [accuracy_at(model, task, n, 32)["accuracy"] for n in (10, 20, 30, 40)]
            curve.append(
                {
                    "step": step,
                    "train_loss": sum(window) / len(window),
                    "accuracy_10_to_40": sum(in_distribution) / len(in_distribution),
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
            window = []
        if step % settings.checkpoint_every == 0 and step < settings.steps:
            _save(
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "data_rng": data.get_state(),
                    "torch_rng": torch.get_rng_state(),
                    **({"cuda_rng": torch.cuda.get_rng_state()} if model.device.type == "cuda" else {}),
                    "step": step,
                    "curve": curve,
                    "window": window,  # training losses since the last curve point
                    "seconds": time.perf_counter() - started,
                },
                checkpoint,
            )
    train_seconds = time.perf_counter() - started
    evaluation = evaluate(model, task, settings)
    result = {
        "settings": asdict(settings),
        "train_seconds": round(train_seconds, 1),
        "eval_seconds": round(time.perf_counter() - started - train_seconds, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "device": torch.cuda.get_device_name(model.device) if model.device.type == "cuda" else model.device.type,
        "curve": curve,
        **evaluation,
    }
    append_run(results_file(results), result)
    for derived in (arm for arm, base in EVALUATED_FROM.items() if base == settings.arm):
        _evaluate_derived(model, task, replace(settings, arm=derived), result, results)
    weights = {name: tensor.cpu() for name, tensor in model.state_dict().items()}  # loadable without a GPU
    _save({"model": weights, "settings": asdict(settings)}, checkpoint.with_name("model.pt"))
    checkpoint.unlink(missing_ok=True)  # the trained weights stay, for evaluations added later
    return result


def _evaluate_derived(model, task: Task, settings: RunSettings, trained: dict, results: Path) -> None:
    """The result of an arm that trains exactly as `model`'s (see `arms.EVALUATED_FROM`): `model` evaluated with
    the arm's inference settings, beside the same training record."""
    started = time.perf_counter()
    for name, value in inference_overrides(settings.arm, task, settings.train_length).items():
        setattr(model.config, name, value)
    result = {
        **trained,
        "settings": asdict(settings),
        "trained_as": trained["settings"]["arm"],
        **evaluate(model, task, settings),
    }
    result["eval_seconds"] = round(time.perf_counter() - started, 1)
    append_run(results_file(results), result)


def _evaluate_saved(settings: RunSettings, results: Path, checkpoints: Path, device: str = "cpu") -> bool:
    """Evaluate the derived arm `settings.arm` from its base run's kept weights (`model.pt`) if they are there and
    were trained with the same settings; returns whether it did."""
    base = replace(settings, arm=EVALUATED_FROM[settings.arm])
    saved = checkpoints / settings.task / base.name / "model.pt"
    if not saved.exists():
        return False
    state = torch.load(saved, weights_only=False, map_location=device)
    if stored_settings(state["settings"]) != asdict(base):
        return False
    task = get_task(settings.task)
    torch.manual_seed(settings.seed)
    model = build_model(base.arm, task, settings.size, settings.train_length).to(device)
    model.load_state_dict(state["model"])
    _evaluate_derived(model, task, settings, finished_run(results, base), results)
    return True


def _worker(settings: RunSettings, results: str, checkpoints: str, device: str) -> dict:
    torch.set_num_threads(1)  # two one-thread runs beat one two-thread run on this machine's 2 cores
    return train_run(settings, Path(results), Path(checkpoints), device)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["reverse_string"], choices=sorted(TASKS), help="Tasks to run.")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS, help="Models to compare.")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="Seeds (model init and data).")
    parser.add_argument("--steps", type=int, default=RunSettings.steps, help="Training steps per run.")
    parser.add_argument("--batch_size", type=int, default=RunSettings.batch_size, help="Inputs per batch.")
    parser.add_argument("--learning_rate", type=float, default=RunSettings.learning_rate, help="Peak learning rate.")
    parser.add_argument("--warmup_steps", type=int, default=RunSettings.warmup_steps, help="Linear warmup steps.")
    parser.add_argument(
        "--lr_scheduler_type", default=RunSettings.lr_scheduler_type, help="transformers.get_scheduler name."
    )
    parser.add_argument(
        "--loss_reduction",
        default=RunSettings.loss_reduction,
        choices=LOSS_REDUCTIONS,
        help="Cross-entropy averaged over every blank of a batch ('mean'), or summed over each input's blanks and "
        "averaged over the batch ('sum', the reference code's loss: longer inputs weigh more).",
    )
    parser.add_argument("--train_length", type=int, default=RunSettings.train_length, help="Longest training input.")
    parser.add_argument("--dropout", type=float, default=ModelSize.dropout, help="Dropout of every arm.")
    parser.add_argument("--test_examples", type=int, default=RunSettings.test_examples, help="Test inputs per length.")
    parser.add_argument(
        "--lengths_per_bucket", type=int, default=RunSettings.lengths_per_bucket, help="Test lengths per bucket."
    )
    parser.add_argument("--jobs", type=int, default=2, help="Runs in parallel, one thread each.")
    parser.add_argument(
        "--device", default="cpu", help="Where runs train and evaluate ('cuda': several jobs share the GPU)."
    )
    parser.add_argument(
        "--results_dir", default=str(RESULTS), help="The study's folder: finished runs go to its results.jsonl."
    )
    parser.add_argument("--checkpoint_dir", default=str(CHECKPOINTS), help="Where unfinished runs keep their state.")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}.")
    return args


def planned_runs(args: argparse.Namespace) -> list[RunSettings]:
    runs = []
    for task in args.tasks:
        for seed in args.seeds:
            for arm in args.arms:
                if EVALUATED_FROM.get(arm) in args.arms:
                    continue  # its base arm's run evaluates it
                settings = RunSettings(
                    task=task,
                    arm=arm,
                    seed=seed,
                    steps=args.steps,
                    batch_size=args.batch_size,
                    learning_rate=args.learning_rate,
                    warmup_steps=args.warmup_steps,
                    lr_scheduler_type=args.lr_scheduler_type,
                    loss_reduction=args.loss_reduction,
                    train_length=args.train_length,
                    size=ModelSize(dropout=args.dropout),
                    buckets=((1, args.train_length), *BUCKETS[1:]),
                    test_examples=args.test_examples,
                    lengths_per_bucket=args.lengths_per_bucket,
                )
                settings.check()
                runs.append(settings)
    return runs


def describe(settings: RunSettings, result: dict) -> str:
    buckets = "  ".join(f"{b['bucket']}: {b['accuracy']:.3f}" for b in result["buckets"])
    if result["train_seconds"] is None:  # a recorded run whose training record was lost (its "record" says so)
        return f"{settings.task} {settings.name}: {buckets}  (time not recorded)"
    minutes = (result["train_seconds"] + result["eval_seconds"]) / 60
    return f"{settings.task} {settings.name}: {buckets}  ({minutes:.1f} min)"


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    runs = planned_runs(args)
    results = []
    if args.jobs == 1:
        for settings in runs:
            results.append(train_run(settings, Path(args.results_dir), Path(args.checkpoint_dir), args.device))
            print(describe(settings, results[-1]), flush=True)
        return results
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_worker, s, args.results_dir, args.checkpoint_dir, args.device): s for s in runs}
        for future in as_completed(futures):
            results.append(future.result())
            print(describe(futures[future], results[-1]), flush=True)
    return results


if __name__ == "__main__":
    main()
