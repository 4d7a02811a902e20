"""The encoder against BERT of the same shape on one CUDA GPU: bf16 training and inference, eager and compiled.

    python -m benchmarks.gpu.run --output results/gpu   # every cell; writes gpu-benchmark.md and .json in results/gpu
    python -m benchmarks.gpu.run --output results/x --sizes base --paths train --modes eager --repeats 50   # one cell
    python -m benchmarks.gpu.run --output results/x --device cpu --sizes tiny --modes eager   # the same code on a CPU

Three paths at the pretraining script's size presets (`base` and `small` by default): a masked-LM training step (256 ×
128 tokens, BERT's pretraining batch at that length, 15% masked; the forward under `torch.autocast` in bf16 with fp32
master weights, as `accelerate --mixed_precision bf16` trains, the backward, the training scripts' AdamW), dense
inference (128 × 128, no mask) and padded inference (128 sequences of 40–256 tokens right-padded to 256, about 44%
padding), both with bf16 weights under `torch.inference_mode()`. Two modes: eager, and `torch.compile(model)` with
static shapes (inductor's default mode: no CUDA graphs, no autotuning). Eager, ours runs a padded batch on its real
tokens only (`unpad_inputs`); a compiled graph takes the padded layout (its shapes cannot depend on the data). Ours is
the main job's model (pre-LN, no dropout, ReLU, the shipped tokenizer's vocabulary; sparse prediction in training, as
the pretraining script trains); BERT is `BertForMaskedLM` (training) or `BertModel` without the pooler (inference) with
sdpa attention and the same dimensions, vocabulary and activation (both built by benchmarks/utilization/run.py).

The measures are benchmarks/utilization/run.py's: tokens/s (a padded batch counts its real tokens), the ratio of the
two models' speeds (BERT's seconds over ours), and useful-work model-FLOPs utilisation (MFU): the least FLOPs of the
job (the encoder's matrix products on the real tokens only, attention at each sequence's own length, the masked-LM head
at the masked tokens; a training step is three forwards) over the seconds taken times the bf16 GEMM peak measured in
the same run (square products of 4096 and 8192 on a GPU). Both models of a cell live in this one process, on the
device, and are timed alternately (ours, BERT, ours, BERT, ...) after warm-up calls (the first compiles), each timed
call between two `torch.cuda.synchronize()`; a cell reports the median and the range of its repetitions, and its
models are freed before the next cell's are built.

Made to run unattended on a borrowed GPU. A cell that fails (a compiler error, out of memory) is recorded with its
error and the stage it was in, and the run goes on. Both files are rewritten after every cell and every stage of one
(building, compiling, timing), so a run stopped by a timeout keeps what it measured and says where it stopped. A
cell starts only if it is expected to end within `--time_budget` seconds of the start (210 by default; a rough guess
of each cell's time, dominated by compilation, corrected by the compiled cells already run); the others are recorded
as skipped. The cells run the most telling first, whatever the order of the arguments: eager before compiled, the
largest size first, training and padded inference (the paths with targets) before dense. The issue's targets, at
`base`: training ≥ 1.3× BERT's tokens/s and ≥ 0.40 of the peak, padded inference ≥ 1.5× BERT's tokens/s; judged on
the eager cells' medians, with the compiled cell beside where it does better. Nothing here asserts a time; `--device
cpu` runs the same code on a CPU (tests/lab/test_gpu_benchmark.py). `render` (or `markdown`) writes the report of a
saved JSON record again.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import shlex
import signal
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch

if __package__ in (None, ""):  # `python benchmarks/gpu/run.py`: the repository root is not on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.batches import INFERENCE_BATCHES, mlm_batch
from benchmarks.machine import cpu_description, git_commit
from benchmarks.utilization.run import Shape, build_model, main_job_shape, useful_flops

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the Hub, and a borrowed GPU machine has no network

SIZES = ("base", "small")
PATHS = ("train", "padded", "dense")  # in the order they run: the paths with targets first
MODES = ("eager", "compiled")
MODELS = ("ours", "bert")
LABELS = {"ours": "ours", "bert": "BERT"}
TRAIN_BATCH, TRAIN_LENGTH = 256, 128  # BERT's pretraining batch at 128 tokens: one that fills a GPU
INFERENCE_BATCH = 128  # dense: 128 × 128; padded: 128 × 40–256 → 256
PATH_NAMES = {"train": "training step", "dense": "dense inference", "padded": "padded inference"}
WARMUP = 3  # untimed calls of each model before the timed ones; the first one compiles
COMPILE_OPTIONS: dict = {"dynamic": False}  # static shapes: every call of a cell has the same inputs
PEAK_SIZES = {"cuda": (4096, 8192), "cpu": (1024, 2048)}
PEAK_SECONDS = {"cuda": 0.5, "cpu": 0.25}
JSON_NAME, MARKDOWN_NAME = "gpu-benchmark.json", "gpu-benchmark.md"


@dataclass(frozen=True)
class Target:
    text: str
    size: str
    path: str
    measure: str  # "ratio": BERT's seconds over ours; "mfu": ours, against the measured peak
    least: float


TARGETS = (
    Target("training at base: ≥ 1.3× BERT's tokens/s", "base", "train", "ratio", 1.3),
    Target("training at base: ≥ 0.40 of the measured bf16 GEMM peak (MFU)", "base", "train", "mfu", 0.40),
    Target("padded inference at base: ≥ 1.5× BERT's tokens/s", "base", "padded", "ratio", 1.5),
)


class Stopped(BaseException):
    """SIGTERM while the cells run (a timeout): not an `Exception`, so that no cell records it as its failure."""


# ----------------------------------------------------------------------------------------------------------------
# the inputs and the FLOPs they need


def inputs(path: str, vocab_size: int) -> dict[str, torch.Tensor]:
    """The model inputs of a path, on the CPU (benchmarks/batches.py at GPU sizes): the training batch (256 × 128 ids,
    15% of them masked, and the labels), dense 128 × 128 ids alone (no mask: the dense path), or padded 128 ×
    40–256 → 256 ids with the attention mask."""
    if path == "train":
        ids, labels = mlm_batch(vocab_size, batch=TRAIN_BATCH, length=TRAIN_LENGTH)  # (256, 128) each
        return {"input_ids": ids, "labels": labels}
    ids, mask = INFERENCE_BATCHES[path](vocab_size, batch=INFERENCE_BATCH)  # (128, 128) or (128, 256) each
    return {"input_ids": ids} if path == "dense" else {"input_ids": ids, "attention_mask": mask}


def job(path: str, shape: Shape) -> tuple[float, int]:
    """(useful FLOPs, real tokens) of one call of a path, counted as benchmarks/utilization/run.py counts them."""
    batch = inputs(path, shape.vocab_size)
    ids = batch["input_ids"]  # (B, T)
    if path == "train":
        masked = int((batch["labels"] != -100).sum())
        return useful_flops(shape, [ids.shape[1]] * ids.shape[0], masked, training=True), ids.numel()
    lengths = batch.get("attention_mask", torch.ones_like(ids)).sum(1).tolist()  # (B,): real tokens per sequence
    return useful_flops(shape, lengths), sum(lengths)


def batch_description(vocab_size: int) -> dict[str, str]:
    """Each path's batch in words, with its masked tokens or its padding."""
    masked = int((inputs("train", vocab_size)["labels"] != -100).sum())
    mask = inputs("padded", vocab_size)["attention_mask"]  # (B, 256)
    return {
        "train": f"{TRAIN_BATCH} × {TRAIN_LENGTH}, 15% masked ({masked:,} masked tokens)",
        "dense": f"{INFERENCE_BATCH} × 128",
        "padded": f"{INFERENCE_BATCH} × 40–256 → 256 ({1 - mask.float().mean().item():.0%} padding)",
    }


# ----------------------------------------------------------------------------------------------------------------
# the device


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously; on a CPU the work is done when a call returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_peak(device: torch.device, sizes: tuple[int, ...], seconds: float) -> float:
    """The best FLOP/s of square bf16 matrix products on the device, measured now (benchmarks/utilization/run.py's
    `gemm_peak`, the device's queue drained every few products and before each reading of the clock). Each size
    runs a quarter of `seconds` first, untimed (cuBLAS's setup, the clocks ramping up)."""

    def rate(a: torch.Tensor, b: torch.Tensor, duration: float) -> float:
        synchronize(device)
        count, start = 0, time.perf_counter()
        while count < 2 or time.perf_counter() - start < duration:
            for _ in range(8):
                a @ b
            count += 8
            synchronize(device)  # the clock reads what ran, not what is queued
        return 2 * a.shape[0] ** 3 * count / (time.perf_counter() - start)

    best = 0.0
    for n in sizes:
        a, b = (torch.randn(n, n, dtype=torch.bfloat16, device=device) for _ in range(2))
        rate(a, b, seconds / 4)
        best = max(best, rate(a, b, seconds))
    return best


def device_description(device: torch.device) -> dict:
    """The device's name and size (never raises: a record without them still holds the figures)."""
    try:
        if device.type == "cuda":
            properties = torch.cuda.get_device_properties(device)
            return {
                "type": "cuda",
                "name": torch.cuda.get_device_name(device),
                "memory_gib": round(properties.total_memory / 2**30, 1),
                "capability": f"{properties.major}.{properties.minor}",
                "gpus_visible": torch.cuda.device_count(),
            }
        cpu = cpu_description()
        return {"type": "cpu", "name": cpu["model"], "threads": cpu["threads"]}
    except Exception as error:
        return {"type": device.type, "name": f"unknown ({error_line(error)})"}


def release(device: torch.device) -> None:
    """Free what the last cell left: compiled graphs, collectable models, the allocator's cached blocks."""
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def commit() -> str | None:
    """SINUSOIDAL_ENCODER_COMMIT where it is set (a copy of the tree without .git, as a borrowed GPU machine gets),
    else the checkout's commit; None where neither is known."""
    try:
        return os.environ.get("SINUSOIDAL_ENCODER_COMMIT") or git_commit()
    except OSError:  # no git on the machine
        return None


# ----------------------------------------------------------------------------------------------------------------
# the workloads and the cells


def workload(which: str, path: str, mode: str, shape: Shape, device: torch.device) -> Callable[[], None]:
    """One call of a cell on the device: a bf16 mixed-precision training step (forward under autocast, backward,
    AdamW on fp32 weights) or a forward of the model in bf16."""
    from sinusoidal_encoder_training.configs import TrainingConfig
    from sinusoidal_encoder_training.runs.optimization import make_optimizer

    model = build_model(which, path, shape)  # seeded, on the CPU
    batch = {name: tensor.to(device) for name, tensor in inputs(path, shape.vocab_size).items()}
    if path == "train":
        model = model.to(device).train()
        optimizer = make_optimizer(model, TrainingConfig(output_dir="unused"))  # the training scripts' (fused) AdamW
        forward = torch.compile(model, **COMPILE_OPTIONS) if mode == "compiled" else model

        def step():
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = forward(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step
    model = model.to(device, torch.bfloat16).eval()
    forward = torch.compile(model, **COMPILE_OPTIONS) if mode == "compiled" else model

    def run():
        with torch.inference_mode():
            forward(**batch)

    return run


def timed(run: Callable[[], None], device: torch.device) -> float:
    """Seconds of one call, the device's queue drained before and after."""
    synchronize(device)
    start = time.perf_counter()
    run()
    synchronize(device)
    return time.perf_counter() - start


def figures(times: list[float], flops: float, tokens: int, peak: float | None) -> dict:
    """The median of a model's timed calls, their range, tokens/s and MFU (None without a peak)."""
    seconds = statistics.median(times)
    result = {"seconds": seconds, "seconds_range": [min(times), max(times)], "tokens_per_second": tokens / seconds}
    # the slowest and the fastest repetition: how far the noise moves the cell
    result["mfu"] = flops / seconds / peak if peak else None
    result["mfu_range"] = [flops / max(times) / peak, flops / min(times) / peak] if peak else None
    return result


def measure_cell(
    cell: dict, shape: Shape, device: torch.device, repeats: int, peak: float | None, stage: Callable[[str], None]
) -> dict:
    """Both models of a cell built on the device, warmed up (compiled), then timed alternately: the cell's figures.
    `stage` is told what starts (a run stopped midway says where it was)."""
    flops, tokens = job(cell["path"], shape)
    runs, first = {}, {}
    for which in MODELS:
        stage(f"building {LABELS[which]}")
        runs[which] = workload(which, cell["path"], cell["mode"], shape, device)
    for which, run in runs.items():
        stage(f"{'compiling' if cell['mode'] == 'compiled' else 'the first call of'} {LABELS[which]}")
        first[which] = timed(run, device)
    stage("warming up")
    for _ in range(WARMUP - 1):
        for run in runs.values():
            run()
    stage("timing")
    series: dict[str, list[float]] = {which: [] for which in MODELS}
    for _ in range(repeats):
        for which, run in runs.items():
            series[which].append(timed(run, device))
    result = {"flops": flops, "tokens": tokens}
    for which in MODELS:
        result[which] = {**figures(series[which], flops, tokens, peak), "first_call_seconds": first[which]}
    result["ratio"] = result["bert"]["seconds"] / result["ours"]["seconds"]
    return result


def expected_seconds(path: str, mode: str, shape: Shape) -> float:
    """A rough guess of a cell's wall time on an H100, for the time budget: an eager cell is a few seconds (two models
    built, a few dozen calls); a compiled one is two compilations (cold caches), which grow with the layers the graph
    holds, a training graph (forward and backward) twice an inference one: at `base` (12 layers) 60 s a model for
    training, the middle of the 30–90 s that inductor is seen to take, and 30 s for inference."""
    if mode == "eager":
        return 5.0
    layers = shape.num_hidden_layers
    per_model = 12 + 4 * layers if path == "train" else 6 + 2 * layers
    return 5.0 + 2 * per_model


def error_line(error: BaseException) -> str:
    """An exception in one line: its type and the first lines of its message (torch.compile's wrap the compiler's
    own error in their second line)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = f"{type(error).__name__}: {' '.join(lines[:3])}" if lines else type(error).__name__
    return text if len(text) <= 400 else text[:399] + "…"


def plan(args: argparse.Namespace, shapes: dict[str, Shape]) -> list[dict]:
    """The cells, pending, in the order they run: eager first, the largest size first, the paths with targets
    first."""
    sizes = sorted(args.sizes, key=lambda size: -parameters(shapes[size]))
    return [
        {"size": size, "path": path, "mode": mode, "status": "pending"}
        for mode in MODES
        if mode in args.modes
        for size in sizes
        for path in PATHS
        if path in args.paths
    ]


def parameters(shape: Shape) -> int:
    """The encoder's matrix parameters and the embeddings: to order the sizes."""
    d = shape.hidden_size
    return shape.num_hidden_layers * (4 * d * d + 2 * d * shape.intermediate_size) + d * shape.vocab_size


def run_cells(
    record: dict, shapes: dict[str, Shape], device: torch.device, args: argparse.Namespace, start: float, save
) -> None:
    """Every planned cell that fits in the time budget, each on its own: its figures, its error, or why it was
    skipped; `save()` after each."""
    peak = record["gemm_peak_flops"]
    calibration = 1.0  # measured over expected seconds of the last compiled cell: the guesses of the later ones
    for cell in record["cells"]:
        guess = expected_seconds(cell["path"], cell["mode"], shapes[cell["size"]])
        expected = guess * (calibration if cell["mode"] == "compiled" else 1.0)
        spent = time.monotonic() - start
        if spent + expected > args.time_budget:
            cell.update(
                status="skipped",
                reason=f"time budget: {spent:.0f} s of {args.time_budget:.0f} s spent, the cell expected to take "
                f"about {expected:.0f} s",
            )
            print(f"[{spent:4.0f} s] {cell_name(cell)}: skipped ({cell['reason']})", flush=True)
            save()
            continue
        cell.update(status="running", expected_seconds=round(expected, 1))
        print(f"[{spent:4.0f} s] {cell_name(cell)}: running (expected about {expected:.0f} s)", flush=True)
        save()
        began = time.monotonic()

        def stage(name: str, cell: dict = cell) -> None:
            cell["stage"] = name
            save()

        try:
            cell.update(measure_cell(cell, shapes[cell["size"]], device, args.repeats, peak, stage), status="done")
            del cell["stage"]
        except Exception as error:  # a compiler error, out of memory, ...: recorded, and on to the next cell
            traceback.print_exc()
            cell.update(status="failed", error=error_line(error))
        cell["seconds_spent"] = time.monotonic() - began
        release(device)
        if cell["mode"] == "compiled" and cell["status"] == "done":
            calibration = min(4.0, max(0.25, cell["seconds_spent"] / guess))
        print(f"[{time.monotonic() - start:4.0f} s] {format_row(cell)}", flush=True)
        save()


# ----------------------------------------------------------------------------------------------------------------
# the verdicts and the report


def cell_name(cell: dict) -> str:
    return f"{cell['size']} / {PATH_NAMES[cell['path']]} / {cell['mode']}"


def measured(cell: dict | None, measure: str) -> float | None:
    """The figure a target judges in a cell (its median), None where the cell has no figures."""
    if cell is None or cell.get("status") != "done":
        return None
    return cell["ratio"] if measure == "ratio" else cell["ours"]["mfu"]


def verdicts(cells: list[dict]) -> list[dict]:
    """Each target of the issue judged on its eager cell's median ("met", "missed", or "not measured" and why);
    the compiled cell's figure and verdict beside it where that cell did better (or the eager cell has none)."""
    by_key = {(cell["size"], cell["path"], cell["mode"]): cell for cell in cells}
    result = []
    for target in TARGETS:
        eager = by_key.get((target.size, target.path, "eager"))
        value = measured(eager, target.measure)
        name = cell_name({"size": target.size, "path": target.path, "mode": "eager"})
        entry = {"target": target.text, "measure": target.measure, "least": target.least, "cell": name}
        entry["value"] = value
        entry["verdict"] = "not measured" if value is None else "met" if value >= target.least else "missed"
        if value is None:
            entry["why"] = not_measured_reason(eager)
        compiled = by_key.get((target.size, target.path, "compiled"))
        compiled_value = measured(compiled, target.measure)
        if compiled_value is not None and (value is None or compiled_value > value):
            entry["compiled"] = {
                "cell": cell_name(compiled),
                "value": compiled_value,
                "verdict": "met" if compiled_value >= target.least else "missed",
            }
        result.append(entry)
    return result


def not_measured_reason(cell: dict | None) -> str:
    if cell is None:
        return "the cell is not in this run"
    if cell["status"] == "done":  # done without a peak: the MFU is unknown
        return "no GEMM peak was measured"
    detail = cell.get("error") or cell.get("reason")
    return f"the cell is {cell['status']}" + (f": {detail}" if detail else "")


def format_flops(rate: float) -> str:
    return f"{rate / 1e12:,.1f} TFLOP/s" if rate >= 1e12 else f"{rate / 1e9:,.0f} GFLOP/s"


def format_seconds(seconds: float) -> str:
    milliseconds = seconds * 1e3
    return f"{milliseconds:,.1f}" if milliseconds >= 10 else f"{milliseconds:.2f}"


def format_model(result: dict) -> tuple[str, str, str]:
    """(milliseconds with their range, tokens/s, MFU with its range) of one model in a cell."""
    low, high = result["seconds_range"]
    seconds = f"{format_seconds(result['seconds'])} ({format_seconds(low)}–{format_seconds(high)})"
    mfu = "—"
    if result.get("mfu") is not None:
        low, high = result["mfu_range"]
        mfu = f"{result['mfu']:.3f} ({low:.2f}–{high:.2f})"
    return seconds, f"{result['tokens_per_second']:,.0f}", mfu


def status_text(cell: dict) -> str:
    """What became of a cell without figures, in one line: where it failed or stopped, and why."""
    where = f" while {cell['stage']}" if cell.get("stage") else ""
    if cell["status"] == "pending":
        return "not run: the run stopped before it"
    if cell["status"] == "running":
        return f"the run was killed{where or ' while it ran'}"
    detail = cell.get("error") or cell.get("reason")
    return f"{cell['status']}{where}" + (f": {detail}" if detail else "")


def format_row(cell: dict) -> str:
    head = f"| {cell['size']} | {PATH_NAMES[cell['path']]} | {cell['mode']} |"
    if cell["status"] != "done":
        return f"{head} {escape(status_text(cell))} |" + " — |" * 7
    ours, bert = format_model(cell["ours"]), format_model(cell["bert"])
    first = f"{cell['ours']['first_call_seconds']:.1f} / {cell['bert']['first_call_seconds']:.1f}"
    return (
        f"{head} {ours[0]} | {bert[0]} | {ours[1]} | {bert[1]} | {cell['ratio']:.2f}× | {ours[2]} | {bert[2]} | "
        f"{first} |"
    )


def format_value(measure: str, value: float) -> str:
    return f"{value:.2f}×" if measure == "ratio" else f"{value:.3f}"


def format_verdict(entry: dict) -> str:
    text = f"- {entry['target']}: **{entry['verdict']}**"
    if entry["value"] is not None:
        text += f", {format_value(entry['measure'], entry['value'])} ({entry['cell']})"
    else:
        text += f" ({entry['cell']}: {entry['why']})"
    if "compiled" in entry:
        compiled = entry["compiled"]
        text += (
            f"; compiled: {format_value(entry['measure'], compiled['value'])}, {compiled['verdict']} "
            f"({compiled['cell']})"
        )
    return escape(text)


def escape(text: str) -> str:
    """Text for a markdown table cell or list item: its pipes escaped."""
    return text.replace("|", "\\|")


def markdown(record: dict) -> str:
    """The report of a record (as written to gpu-benchmark.json): a header, one table, the targets."""
    device = record["device"]
    where = device["name"]
    if "memory_gib" in device:
        where += f" ({device['memory_gib']} GiB, compute capability {device['capability']})"
    elif "threads" in device:
        where += f" (CPU, {device['threads']} threads)"
    peak = record["gemm_peak_flops"]
    peak_text = (
        f"{format_flops(peak)} (square products of {' and '.join(map(str, record['gemm_peak_sizes']))})"
        if peak
        else f"not measured ({record.get('gemm_peak_error', 'no peak')})"
    )
    shapes = "; ".join(
        f"{size}: {shape['num_hidden_layers']} layers, hidden {shape['hidden_size']}, FFN "
        f"{shape['intermediate_size']}, {shape['num_attention_heads']} heads"
        for size, shape in record["shapes"].items()
    )
    vocabulary = next(iter(record["shapes"].values()))["vocab_size"] if record["shapes"] else 0
    counts = {}
    for cell in record["cells"]:
        counts[cell["status"]] = counts.get(cell["status"], 0) + 1
    state = "finished" if record["finished"] else "did not finish (stopped, or still running)"
    lines = [
        "# GPU benchmark: ours against BERT of the same shape",
        "",
        f"`{record['command']}` at commit {record['commit']} on {record['date']}: {where}; torch {record['torch']} "
        f"(CUDA {record['cuda']}), transformers {record['transformers']}. bf16 GEMM peak measured in the run: "
        f"{peak_text}.",
        "",
        f"Batches: training step {record['batches']['train']}; dense inference {record['batches']['dense']}; "
        f"padded inference {record['batches']['padded']}. Shapes: {shapes}; vocabulary {vocabulary:,}. Training in "
        "bf16 autocast with fp32 weights and AdamW, inference with bf16 weights; compiled: "
        f"`torch.compile(model, {', '.join(f'{k}={v!r}' for k, v in record['compile_options'].items())})`.",
        "",
        f"Medians of {record['repeats']} alternate repetitions (ours, BERT, ...) after {record['warmup']} warm-up "
        "calls, in brackets the fastest and the slowest; ours / BERT is BERT's time over ours. MFU = the least "
        "FLOPs of the job (encoder on real tokens, attention at each sequence's own length, the masked-LM head at "
        "masked tokens; training three forwards) / (seconds × the bf16 GEMM peak), in brackets the slowest and the "
        "fastest repetition's. The first call compiles in the compiled cells. "
        f"The run {state} after {record['elapsed_seconds']:.0f} s of a {record['time_budget_seconds']:.0f} s "
        f"budget; cells: {', '.join(f'{count} {status}' for status, count in counts.items())}.",
        "",
        "| size | path | mode | ms ours | ms BERT | tokens/s ours | tokens/s BERT | ours / BERT | MFU ours | MFU BERT "
        "| first call s (ours / BERT) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(format_row(cell) for cell in record["cells"]),
        "",
        "## Targets",
        "",
        "Judged on the eager cells' medians; the compiled cell beside where it did better.",
        "",
        *(format_verdict(entry) for entry in record["targets"]),
    ]
    return "\n".join(lines) + "\n"


def save(record: dict, folder: str) -> None:
    """Both files, each replaced whole (a run stopped while writing leaves the previous version). The JSON comes
    first, and a report that fails to render says so in the markdown file instead: the figures are never lost to a
    slip of the report."""
    record["targets"] = verdicts(record["cells"])
    write_file(os.path.join(folder, JSON_NAME), json.dumps(record, indent=1) + "\n")
    try:
        text = markdown(record)
    except Exception as error:
        traceback.print_exc()
        text = f"# GPU benchmark\n\nThe report did not render ({error_line(error)}); the figures are in {JSON_NAME}.\n"
    write_file(os.path.join(folder, MARKDOWN_NAME), text)


def write_file(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(path + ".tmp", path)


def render(json_path: str, markdown_path: str | None = None) -> str:
    """The report of a saved record, written beside it (or to `markdown_path`); returns its text."""
    with open(json_path) as handle:
        text = markdown(json.load(handle))
    with open(markdown_path or os.path.splitext(json_path)[0] + ".md", "w") as handle:
        handle.write(text)
    return text


# ----------------------------------------------------------------------------------------------------------------
# the run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output", required=True, help=f"Folder for {JSON_NAME} and {MARKDOWN_NAME} (created).")
    parser.add_argument(
        "--sizes", nargs="+", default=list(SIZES), help="Size presets of the pretraining script (default: base small)."
    )
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS, help="Which paths to measure.")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="Eager, compiled, or both.")
    parser.add_argument("--repeats", type=int, default=30, help="Timed calls of each model per cell (the median).")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="Where the models run.")
    parser.add_argument(
        "--time_budget",
        type=float,
        default=210.0,
        help="Seconds from the start within which every cell started is expected to end; the cells that would not "
        "fit are skipped (default 210: a 4-minute slot, with room for a compilation slower than guessed).",
    )
    args = parser.parse_args(argv)
    from sinusoidal_encoder_training.configs import MODEL_SIZES

    for size in args.sizes:
        if size not in MODEL_SIZES:
            parser.error(f"--sizes: {size!r} is not a preset; choose from {', '.join(MODEL_SIZES)}.")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}.")
    if not args.time_budget >= 0:
        parser.error(f"--time_budget must be at least 0 seconds, got {args.time_budget}.")
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        parser.error(f"--output {args.output!r} is a file, not a folder.")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error(
            f"no CUDA GPU visible to torch {torch.__version__} (built for CUDA {torch.version.cuda}): run this on a "
            "machine with one, or pass --device cpu."
        )
    args.sizes, args.paths, args.modes = (
        list(dict.fromkeys(values)) for values in (args.sizes, args.paths, args.modes)
    )
    return args


def new_record(args: argparse.Namespace, argv: list[str], shapes: dict[str, Shape], device: torch.device) -> dict:
    import transformers

    return {
        "command": "python -m benchmarks.gpu.run " + shlex.join(argv),
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "device": device_description(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "repeats": args.repeats,
        "warmup": WARMUP,
        "compile_options": {key: as_json(value) for key, value in COMPILE_OPTIONS.items()},
        "time_budget_seconds": args.time_budget,
        "batches": batch_description(next(iter(shapes.values())).vocab_size),
        "shapes": {size: shape.__dict__ for size, shape in shapes.items()},
        "gemm_peak_flops": None,
        "gemm_peak_sizes": list(PEAK_SIZES[device.type]),
        "elapsed_seconds": 0.0,
        "finished": False,
        "cells": [],
        "targets": [],
    }


def as_json(value):
    """A value as the JSON record can hold it: itself, or its repr (a compiler backend given as a callable)."""
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def main(argv: list[str] | None = None) -> dict:
    """Measure every cell, rewriting both files after each; returns the record."""
    start = time.monotonic()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    device = torch.device(args.device)
    os.makedirs(args.output, exist_ok=True)
    shapes = {size: main_job_shape(size) for size in args.sizes}
    record = new_record(args, argv, shapes, device)
    record["cells"] = plan(args, shapes)

    def write():
        record["elapsed_seconds"] = time.monotonic() - start
        save(record, args.output)

    def stop(signum, frame):
        raise Stopped(signal.Signals(signum).name)

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if in_main_thread else None
    try:
        write()
        try:
            record["gemm_peak_flops"] = gemm_peak(device, PEAK_SIZES[device.type], PEAK_SECONDS[device.type])
            print(f"bf16 GEMM peak: {format_flops(record['gemm_peak_flops'])}", flush=True)
        except Exception as error:  # the cells still give seconds and ratios
            traceback.print_exc()
            record["gemm_peak_error"] = error_line(error)
        write()
        run_cells(record, shapes, device, args, start, write)
    except (Stopped, KeyboardInterrupt) as error:
        why = str(error) or type(error).__name__
        for cell in record["cells"]:
            if cell["status"] == "running":
                cell.update(status="stopped", reason=why)
            elif cell["status"] == "pending":
                cell.update(status="skipped", reason=f"the run was stopped ({why}) before it started")
        write()
        raise SystemExit(143 if isinstance(error, Stopped) else 130) from None
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
    record["finished"] = True
    write()
    print(markdown(record), flush=True)
    return record


if __name__ == "__main__":
    main()
