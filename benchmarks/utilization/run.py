"""How close the encoder runs to this machine's limit, in every precision, against BERT of the same shape.

    python -m benchmarks.utilization.run               # every cell; writes benchmarks/utilization/results.md and .json
    python -m benchmarks.utilization.run --profile     # also per-op tables of every cell (…-profiles.md)
    python -m benchmarks.utilization.run --paths train --precisions bf16 --modes eager --repeats 5   # one cell
    python -m benchmarks.utilization.run --position_encoding tupe --output outputs/utilization-tupe.md  # another
                                                                 # `position_encoding` of ours, against the same BERT

The measure is useful-work model-FLOPs utilisation (MFU): the FLOPs the job needs at the least, over the time it took
times this machine's GEMM peak in the same precision, measured in the same run. The least FLOPs count the matrix
products of the encoder on the real tokens only (padding is not useful work), attention at each sequence's own
length, and in training the masked-LM head at the masked tokens only; a training step is three forwards' worth.
Both models are charged the same FLOPs for the same job, so their MFU ratio is their speed ratio.

Three paths: an MLM training step (16 × 128, 15% masked, AdamW), dense inference (32 × 128) and padded inference
(32 sequences of 40-256 tokens padded to 256, about 40% padding). Two precisions: fp32, and bf16 (training under
`torch.autocast`, as `--mixed_precision bf16` trains; inference with bf16 weights, as `from_pretrained(...,
dtype=torch.bfloat16)` loads). Two modes: eager, and `torch.compile` (training as `--torch_compile` does; inference
with inductor's freezing). The shape is the main job's: the "small" preset, the shipped tokenizer's vocabulary,
pre-LN, no dropout, ReLU; BERT (`BertForMaskedLM` / `BertModel`, sdpa attention) gets the same dimensions,
vocabulary and activation. Both train with the training scripts' AdamW (`make_optimizer`); ours with sparse
prediction, as the pretraining script does. Each model runs in a
worker process of its own and the two are timed alternately (benchmarks/timing.py); each cell is a median. Nothing
here asserts a time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

if __package__ in (None, ""):  # a worker, run by path: the repository root is not on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks import timing
from benchmarks.batches import INFERENCE_BATCHES, mlm_batch
from benchmarks.machine import cpu_description, git_commit

PATHS = ("train", "dense", "padded")
PRECISIONS = ("fp32", "bf16")
MODES = ("eager", "compiled")
MODELS = ("ours", "bert")
PATH_NAMES = {
    "train": "training step (16 × 128)",
    "dense": "dense inference (32 × 128)",
    "padded": "padded inference (32 × 40–256 → 256)",
}
# issue 32's targets, eager mode: the fraction of the GEMM peak each path should reach
TARGETS = {("train", "fp32"): 0.7, ("dense", "fp32"): 0.7, ("padded", "fp32"): 0.7}
TARGETS |= {("train", "bf16"): 0.2, ("dense", "bf16"): 0.3, ("padded", "bf16"): 0.3}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Shape:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int
    hidden_act: str


def main_job_shape(size: str = "small") -> Shape:
    """The main job's model: a size preset of the pretraining script, the shipped tokenizer's vocabulary, the
    model's default activation."""
    from transformers import AutoTokenizer

    import sinusoidal_encoder as se
    from sinusoidal_encoder_training.configs import MODEL_SIZES
    from sinusoidal_encoder_training.data.pipeline import SHIPPED_TOKENIZER

    vocab_size = len(AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER))
    return Shape(**MODEL_SIZES[size], vocab_size=vocab_size, hidden_act=se.SinusoidalEncoderConfig().hidden_act)


# ----------------------------------------------------------------------------------------------------------------
# the inputs and the FLOPs they need


def inference_batch(path: str, vocab_size: int) -> dict[str, torch.Tensor]:
    """The model inputs of an inference path (benchmarks/batches.py): dense 32 × 128 ids alone (no mask: the dense
    path), or padded 32 × 40-256 → 256 with the attention mask."""
    ids, mask = INFERENCE_BATCHES[path](vocab_size)
    return {"input_ids": ids} if path == "dense" else {"input_ids": ids, "attention_mask": mask}


def useful_flops(shape: Shape, lengths: list[int], head_tokens: int = 0, training: bool = False) -> float:
    """The least matmul FLOPs of a job: per real token and layer the Q/K/V/output projections and the FFN
    (2 · (4d² + 2·d·ff)), per sequence of length L and layer the scores and the mixing (4 · L² · d), the masked-LM
    head (transform and vocabulary projection) at `head_tokens`; a training step is three forwards."""
    d, ff = shape.hidden_size, shape.intermediate_size
    tokens = sum(lengths)
    per_layer = 2 * (4 * d * d + 2 * d * ff) * tokens + sum(4 * length * length * d for length in lengths)
    forward = shape.num_hidden_layers * per_layer + 2 * (d * d + d * shape.vocab_size) * head_tokens
    return 3 * forward if training else forward


def job(path: str, shape: Shape) -> tuple[float, int]:
    """(useful FLOPs, real tokens) of one call of a path."""
    if path == "train":
        ids, labels = mlm_batch(shape.vocab_size)
        masked = int((labels != -100).sum())
        return useful_flops(shape, [ids.shape[1]] * ids.shape[0], masked, training=True), ids.numel()
    batch = inference_batch(path, shape.vocab_size)
    mask = batch.get("attention_mask", torch.ones_like(batch["input_ids"]))
    lengths = mask.sum(1).tolist()
    return useful_flops(shape, lengths), sum(lengths)


# ----------------------------------------------------------------------------------------------------------------
# the machine


def gemm_peak(dtype: torch.dtype, sizes: tuple[int, ...] = (1024, 2048, 4096), seconds: float = 1.0) -> float:
    """The best FLOP/s of square matrix products in `dtype` on this machine, measured now."""
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds or count < 2:
            a @ b
            count += 1
        best = max(best, 2 * n**3 * count / (time.perf_counter() - start))
    return best


# ----------------------------------------------------------------------------------------------------------------
# the workloads (run in the worker processes)


def build_model(which: str, path: str, shape: Shape, position_encoding: str = "sinusoidal") -> torch.nn.Module:
    """Our model (with `position_encoding`) or BERT with the shape, seeded alike: the masked-LM model for training,
    the encoder otherwise."""
    from transformers import BertConfig, BertForMaskedLM, BertModel

    import sinusoidal_encoder as se

    torch.manual_seed(0)
    dims = {field: getattr(shape, field) for field in Shape.__dataclass_fields__}
    dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if which == "ours":
        config = se.SinusoidalEncoderConfig(
            **dims, **dropout, norm_first=True, sparse_prediction=path == "train", position_encoding=position_encoding
        )
        return se.SinusoidalEncoderForMaskedLM(config) if path == "train" else se.SinusoidalEncoderModel(config)
    config = BertConfig(**dims, **dropout, max_position_embeddings=512)
    config._attn_implementation = "sdpa"
    return BertForMaskedLM(config) if path == "train" else BertModel(config, add_pooling_layer=False)


def workload(
    which: str, path: str, precision: str, mode: str, shape: Shape, position_encoding: str = "sinusoidal"
) -> Callable[[], None]:
    """One call of a cell: a training step (forward, backward, AdamW) or an inference forward."""
    from sinusoidal_encoder_training.configs import TrainingConfig
    from sinusoidal_encoder_training.runs.optimization import make_optimizer

    model = build_model(which, path, shape, position_encoding)
    if path == "train":
        ids, labels = mlm_batch(shape.vocab_size)
        optimizer = make_optimizer(model, TrainingConfig(output_dir="unused"))  # the training scripts' AdamW
        model.train()
        forward = torch.compile(model, dynamic=True) if mode == "compiled" else model

        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = forward(input_ids=ids, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step
    model = model.to(DTYPES[precision]).eval()
    if mode == "compiled":
        model = torch.compile(model, dynamic=True)
    inputs = inference_batch(path, shape.vocab_size)
    from torch._inductor import config as inductor_config

    def run():
        # freezing: the weights folded in as constants and prepacked for the CPU (read when the first call compiles)
        with torch.inference_mode(), inductor_config.patch(freezing=mode == "compiled"):
            model(**inputs)

    return run


def profile_table(run: Callable[[], None], calls: int = 3, rows: int = 15) -> str:
    """torch.profiler's per-op table (self CPU time, largest first) of `calls` calls after two unprofiled ones."""
    from torch.profiler import ProfilerActivity, profile

    run()
    run()
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(calls):
            run()
    return profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=72)


# ----------------------------------------------------------------------------------------------------------------
# the run


def worker_command(which: str, path: str, precision: str, mode: str, args: argparse.Namespace) -> list[str]:
    return [
        *(sys.executable, os.path.abspath(__file__), "--size", args.size),
        *("--position_encoding", args.position_encoding, "--_worker", which, path, precision, mode),
    ]


def measure(args: argparse.Namespace, shape: Shape, peaks: dict[str, float]) -> list[dict]:
    cells = []
    for path in args.paths:
        flops, tokens = job(path, shape)
        for precision in args.precisions:
            for mode in args.modes:
                commands = [worker_command(which, path, precision, mode, args) for which in MODELS]
                warmup = 3 if mode == "compiled" else 2
                series = timing.interleaved_series(commands, args.repeats, warmup)
                cell = {"path": path, "precision": precision, "mode": mode, "flops": flops, "tokens": tokens}
                for which, times in zip(MODELS, series, strict=True):
                    value = statistics.median(times)
                    cell[which] = {
                        "seconds": value,
                        "tokens_per_second": tokens / value,
                        "mfu": flops / value / peaks[precision],
                        # the slowest and the fastest repetition: how far this machine's noise moves the cell
                        "mfu_range": [flops / max(times) / peaks[precision], flops / min(times) / peaks[precision]],
                    }
                cell["ratio"] = cell["bert"]["seconds"] / cell["ours"]["seconds"]
                cell["target"] = TARGETS.get((path, precision)) if mode == "eager" else None
                cells.append(cell)
                print(format_row(cell), flush=True)
    return cells


def verdict(cell: dict) -> str:
    """The eager cells' target, met or missed by the median; "—" for cells without one."""
    target = cell["target"]
    return "—" if target is None else f"≥ {target:.1f}: {'met' if cell['ours']['mfu'] >= target else 'missed'}"


def format_mfu(result: dict, digits: int = 3) -> str:
    """The median MFU, and the range of the repetitions where the record has it: `0.674 (0.62–0.71)`."""
    text = f"{result['mfu']:.{digits}f}"
    if "mfu_range" in result:
        low, high = result["mfu_range"]
        text += f" ({low:.2f}–{high:.2f})"
    return text


def format_row(cell: dict) -> str:
    return (
        f"| {PATH_NAMES[cell['path']]} | {cell['precision']} | {cell['mode']} | {format_mfu(cell['ours'])} | "
        f"{format_mfu(cell['bert'])} | {cell['ratio']:.2f}× | {cell['ours']['tokens_per_second']:,.0f} | "
        f"{cell['bert']['tokens_per_second']:,.0f} | {verdict(cell)} |"
    )


def report(args: argparse.Namespace, shape: Shape, peaks: dict[str, float], cells: list[dict]) -> dict:
    import transformers

    return {
        "command": "python -m benchmarks.utilization.run " + " ".join(sys.argv[1:]),
        "date": datetime.date.today().isoformat(),
        "commit": git_commit(),
        "cpu": cpu_description(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "shape": shape.__dict__,
        "position_encoding": args.position_encoding,
        "repeats": args.repeats,
        "gemm_peak_flops": peaks,
        "cells": cells,
    }


def markdown(record: dict) -> str:
    cpu = record["cpu"]
    has = ", ".join(flag for flag, present in cpu["flags"].items() if present) or "none of them"
    lacks = ", ".join(flag for flag, present in cpu["flags"].items() if not present) or "none"
    peaks = record["gemm_peak_flops"]
    chosen = record.get("position_encoding", "sinusoidal")
    encoding = "" if chosen == "sinusoidal" else f"; ours with `position_encoding={chosen!r}`"
    lines = [
        "# Model-FLOPs utilisation: ours against BERT of the same shape",
        "",
        f"`{record['command']}` at commit {record['commit']} on {record['date']}: {cpu['model']}, "
        f"{cpu['threads']} threads; CPU flags present: {has}; absent: {lacks}. torch {record['torch']}, "
        f"transformers {record['transformers']}. Shape: {record['shape']}{encoding}. Medians of {record['repeats']} "
        "interleaved repetitions (benchmarks/timing.py).",
        "",
        f"GEMM peak measured in the run: fp32 {peaks['fp32'] / 1e9:,.0f} GFLOP/s, bf16 "
        f"{peaks['bf16'] / 1e9:,.0f} GFLOP/s ({peaks['bf16'] / peaks['fp32']:.1f}× fp32).",
        "",
        "MFU = the least FLOPs of the job (encoder on real tokens, attention at each sequence's own length, the "
        "masked-LM head at masked tokens; training three forwards) / (seconds × the GEMM peak of the precision): "
        "the median, and in brackets the slowest and the fastest repetition. The targets (issue 32) are for eager "
        "mode, judged on the median.",
        "",
        "| path | precision | mode | MFU ours | MFU BERT | ours / BERT | tokens/s ours | tokens/s BERT | target |",
        "|---|---|---|---|---|---|---|---|---|",
        *(format_row(cell) for cell in record["cells"]),
    ]
    return "\n".join(lines) + "\n"


def profiles(args: argparse.Namespace, shape: Shape) -> str:
    """Per-op tables of every cell, ours and BERT, in this process (one model at a time). In the compiled cells
    inductor's generated kernels appear by name (`cpp_fused_...`) beside the library calls they leave in place."""
    from torch._inductor import config as inductor_config

    sections = ["# Where the time goes: per-op tables of every cell", ""]
    sections.append(
        f"`python -m benchmarks.utilization.run {' '.join(sys.argv[1:])}`; {torch.get_num_threads()} threads."
    )
    for path in args.paths:
        for precision in args.precisions:
            for mode in args.modes:
                for which in MODELS:
                    torch._dynamo.reset()  # each compiled cell compiles afresh, as in its own benchmark worker
                    # each generated kernel timed by name, not only the compiled graph around them; compiled
                    # afresh, no cache read: a cached graph of an unprofiled compile has no named kernels
                    with inductor_config.patch({"cpp.enable_kernel_profile": True, "force_disable_caches": True}):
                        table = profile_table(workload(which, path, precision, mode, shape, args.position_encoding))
                    title = f"## {PATH_NAMES[path]}, {precision}, {mode}, {'ours' if which == 'ours' else 'BERT'}"
                    sections += ["", title, "", "```text", table.strip(), "```"]
    return "\n".join(sections) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", help="The pretraining script's size preset (default: small).")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS, help="Which paths to measure.")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--repeats", type=int, default=7, help="Interleaved repetitions per cell (the median).")
    parser.add_argument("--profile", action="store_true", help="Also write per-op tables of every cell.")
    parser.add_argument(
        "--position_encoding",
        default="sinusoidal",
        help="The `position_encoding` of our model (default: the paper's, added to the input); BERT is unchanged.",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="Markdown report (default benchmarks/utilization/results.md; the JSON beside it).",
    )
    parser.add_argument("--_worker", nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from sinusoidal_encoder_training.configs import MODEL_SIZES

    if args.size not in MODEL_SIZES:
        parser.error(f"--size: {args.size!r} is not a preset; choose one of {', '.join(MODEL_SIZES)}.")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}.")
    from sinusoidal_encoder.positions import POSITION_ENCODINGS

    if args.position_encoding not in POSITION_ENCODINGS:
        choices = ", ".join(POSITION_ENCODINGS)
        parser.error(f"--position_encoding: {args.position_encoding!r} is not one; choose one of {choices}.")
    return args


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    shape = main_job_shape(args.size)
    if args._worker:
        timing.serve(workload(*args._worker, shape, args.position_encoding))
        return None
    peaks = {name: gemm_peak(DTYPES[name]) for name in PRECISIONS}
    print(f"GEMM peak: fp32 {peaks['fp32'] / 1e9:,.0f} GFLOP/s, bf16 {peaks['bf16'] / 1e9:,.0f} GFLOP/s", flush=True)
    record = report(args, shape, peaks, measure(args, shape, peaks))
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.md")
    with open(output, "w") as handle:
        handle.write(markdown(record))
    with open(os.path.splitext(output)[0] + ".json", "w") as handle:
        json.dump(record, handle, indent=1)
    if args.profile:
        with open(os.path.splitext(output)[0] + "-profiles.md", "w") as handle:
            handle.write(profiles(args, shape))
    print(markdown(record))
    return record


if __name__ == "__main__":
    main()
