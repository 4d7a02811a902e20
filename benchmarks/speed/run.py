"""Speed of the sinusoidal encoder against transformers' BERT of identical size, measured side by side in one run.

    python -m benchmarks.speed.run                      # "small" dimensions, writes benchmarks/speed/results-small.md
    python -m benchmarks.speed.run --size base          # BERT-base dimensions
    python -m benchmarks.speed.run --compile            # adds torch.compile rows (training: both models compiled)

Every row is a median over interleaved repetitions (ours, BERT, ours, BERT, ...) on this machine, with the ratio ours
/ BERT. Each model runs in a worker process of its own (its own allocator heap, as in a user's program); the parent
asks the two workers for one timed call in turn. Both models have the same hidden size, layers, heads, FFN size,
vocabulary (30522) and activation (GELU); BERT uses sdpa attention like ours. Nothing here asserts a time: the tests
check that every optimisation computes the same thing.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
from transformers import BertConfig, BertForMaskedLM, BertModel

import sinusoidal_encoder as se

if __package__ in (None, ""):  # a worker, run by path: the repository root is not on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks import timing
from benchmarks.batches import dense_batch, mlm_batch, padded_batch

SIZES = {
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}
VOCAB = 30522


def configs(size: str, dropout: float = 0.1):
    dims = SIZES[size]
    ours = se.SinusoidalEncoderConfig(
        vocab_size=VOCAB,
        hidden_act="gelu",
        max_position_embeddings=512,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        **dims,
    )
    bert = BertConfig(
        vocab_size=VOCAB,
        hidden_act="gelu",
        max_position_embeddings=512,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        **dims,
    )
    bert._attn_implementation = "sdpa"
    return ours, bert


def interleaved(size: str, ours: str, bert: str, repeats: int, warmup: int = 2) -> tuple[float, float]:
    """Median seconds of our workload and BERT's, each in a worker process of its own, measured alternately."""
    command = [sys.executable, os.path.abspath(__file__), "--size", size, "--_worker"]
    t_ours, t_bert = timing.interleaved(
        [[*command, "ours", "--_workload", ours], [*command, "bert", "--_workload", bert]], repeats, warmup
    )
    return t_ours, t_bert


def train_step_fn(model, ids, labels):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step():
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def inference_fn(model, **inputs):
    model.eval()

    def run():
        with torch.inference_mode():
            model(**inputs)

    return run


def workload_fn(which: str, workload: str, size: str) -> Callable[[], None]:
    """The timed call of one row: the same seeded weights and inputs in every process."""
    torch.manual_seed(0)
    ours_config, bert_config = configs(size)
    if workload in ("train", "train_compiled"):
        ids, labels = mlm_batch(VOCAB)
        if which == "ours":
            ours_config.sparse_prediction = True  # the vocabulary projection at masked positions only
            model = se.SinusoidalEncoderForMaskedLM(ours_config)
        else:
            model = BertForMaskedLM(bert_config)
        if workload == "train_compiled":  # what --torch_compile does in the training scripts (inductor)
            model = torch.compile(model, dynamic=True)
        return train_step_fn(model, ids, labels)
    if workload == "relu":  # the paper's FFN, our default: what ships, not a like-for-like size
        ours_config.hidden_act = "relu"
    model = se.SinusoidalEncoderModel(ours_config) if which == "ours" else BertModel(bert_config)
    if workload == "compiled":
        from torch._inductor import config as inductor_config

        inductor_config.freezing = True  # inference: fold the weights in as constants, prepack them for CPU
        model = torch.compile(model.eval(), dynamic=True)
    if workload == "padded":
        ids, mask = padded_batch(VOCAB)
        return inference_fn(model, input_ids=ids, attention_mask=mask)
    return inference_fn(model, input_ids=dense_batch(VOCAB)[0])


def serve_workload(which: str, workload: str, size: str) -> None:
    """Worker process: build the workload, then time one call per line read from stdin."""
    timing.serve(workload_fn(which, workload, size))


def forward_flops(config, tokens: int, seq_len: int, head_tokens: int, vocab_projection: bool) -> float:
    """Matmul FLOPs of one forward pass: projections and FFN (2·params·tokens), attention scores and mixing
    (4·T·d per token per layer), and the MLM head at `head_tokens` positions."""
    d, ff, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_token_layer = 2 * (4 * d * d + 2 * d * ff) + 4 * seq_len * d
    head = 2 * (d * d + (d * VOCAB if vocab_projection else 0)) * head_tokens
    return layers * per_token_layer * tokens + head


def matmul_peak(seconds: float = 2.0, n: int = 2048) -> float:
    """fp32 matmul FLOP/s of this machine, measured now."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    return 2 * n**3 * count / (time.perf_counter() - start)


class PeakRSS:
    """Samples this process's resident memory (from /proc/self/statm) every millisecond while active: the peak of a
    forward pass, its activations included (large CPU tensors are mapped and unmapped, so RSS follows them)."""

    def __init__(self):
        import threading

        self.page = os.sysconf("SC_PAGE_SIZE")
        self.peak = self.baseline = self.current()
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def current(self) -> int:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * self.page

    def _sample(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.current())
            time.sleep(0.001)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, self.current())


def memory_child(which: str, size: str, length: int) -> None:
    """Run in a subprocess: seconds (median of 3) and peak resident memory added by one forward at `length` tokens
    (batch 1), over the memory of the loaded model."""
    ours_config, bert_config = configs(size, dropout=0.0)
    model = (se.SinusoidalEncoderModel(ours_config) if which == "ours" else BertModel(bert_config)).eval()
    ids = torch.randint(5, VOCAB, (1, length))
    try:
        with torch.inference_mode():
            model(input_ids=ids[:, :64])
            ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed memory back, so that RSS measures this forward
            with PeakRSS() as rss:  # first, before timing runs leave freed memory in the allocator
                model(input_ids=ids)
            times = []
            for _ in range(3):
                start = time.perf_counter()
                model(input_ids=ids)
                times.append(time.perf_counter() - start)
        peak_mib = (rss.peak - rss.baseline) / 2**20
        print(json.dumps({"seconds": statistics.median(times), "peak_mib": peak_mib}))
    except Exception as error:  # BERT past its position table
        print(json.dumps({"error": f"{type(error).__name__}: {str(error).splitlines()[0][:90]}"}))


def measure_memory(which: str, size: str, length: int) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--_memory_child", which, "--size", size, "--_length", str(length)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": proc.stderr.strip().splitlines()[-1][:120]}


def data_pipeline_tokens_per_second(limit_docs: int = 3000) -> float:
    """Tokenise and pack documents of the built-in corpus (no cache), in tokens per second."""
    import datasets
    from transformers import AutoTokenizer

    from sinusoidal_encoder_training.data.corpus import load_builtin_corpus
    from sinusoidal_encoder_training.data.pipeline import SHIPPED_TOKENIZER, tokenize_and_pack

    datasets.disable_caching()
    datasets.disable_progress_bars()
    texts = load_builtin_corpus()["train"].select(range(limit_docs))
    raw = datasets.DatasetDict({"train": texts, "validation": texts.select(range(10))})
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)
    start = time.perf_counter()
    packed = tokenize_and_pack(raw, tokenizer, 128)
    seconds = time.perf_counter() - start
    return len(packed["train"]) * 128 / seconds


def row(name: str, ours: float, bert: float | None, unit: str, higher_is_better: bool = True) -> dict:
    ratio = None
    if bert:
        ratio = ours / bert if higher_is_better else bert / ours
    return {"row": name, "ours": ours, "bert": bert, "unit": unit, "ratio": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", choices=sorted(SIZES), help="Model dimensions.")
    parser.add_argument("--repeats", type=int, default=7, help="Interleaved repetitions per row.")
    parser.add_argument("--max_length", type=int, default=16384, help="Longest sequence of the length sweep.")
    parser.add_argument("--compile", action="store_true", help="Also measure our model under torch.compile.")
    parser.add_argument("--output", default=None, help="Markdown file for the table (default: benchmarks/).")
    parser.add_argument("--_memory_child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_length", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_workload", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._memory_child:
        memory_child(args._memory_child, args.size, args._length)
        return
    if args._worker:
        serve_workload(args._worker, args._workload, args.size)
        return
    ours_config, bert_config = configs(args.size)
    rows = []

    # 1. MLM training step: forward, backward, AdamW; ours projects to the vocabulary at masked positions only
    t_ours, t_bert = interleaved(args.size, "train", "train", args.repeats)
    ids, labels = mlm_batch(VOCAB)
    tokens = tokens_train = ids.numel()
    rows.append(row("MLM training step, 16 × 128 (tokens/s)", tokens / t_ours, tokens / t_bert, "tokens/s"))
    train_tokens_per_second = tokens / t_ours
    masked = int((labels != -100).sum())
    flops_ours = 3 * forward_flops(ours_config, tokens, 128, masked, True)
    flops_bert = 3 * forward_flops(bert_config, tokens, 128, tokens, True)
    peak = matmul_peak()
    rows.append(
        row(
            "MFU of the training step (model FLOPs / fp32 matmul peak)",
            flops_ours / t_ours / peak,
            flops_bert / t_bert / peak,
            "fraction",
        )
    )

    # 2. dense inference of the encoders (BERT always with GELU)
    tokens = dense_batch(VOCAB)[0].numel()
    for workload, name in (
        ("dense", "inference, dense 32 × 128 (tokens/s)"),
        ("relu", "inference, dense 32 × 128, ours with ReLU (the paper's default) (tokens/s)"),
    ):
        t_ours, t_bert = interleaved(args.size, workload, "dense", args.repeats)
        rows.append(row(name, tokens / t_ours, tokens / t_bert, "tokens/s"))

    # 3. padded inference: 32 sequences of 40–256 tokens padded to 256, counting real tokens
    real = int(padded_batch(VOCAB)[1].sum())
    t_ours, t_bert = interleaved(args.size, "padded", "padded", args.repeats)
    rows.append(
        row(
            f"inference, padded 32 × 40–256 → 256 ({real:,} real tokens; real tokens/s)",
            real / t_ours,
            real / t_bert,
            "tokens/s",
        )
    )

    # 4. optional torch.compile: training (ours compiled against BERT compiled and against BERT eager, as
    # --torch_compile trains), and inference of ours (eager BERT as the reference)
    if args.compile:
        for bert_workload, name in (("train_compiled", "BERT compiled"), ("train", "BERT eager")):
            t_ours, t_bert = interleaved(args.size, "train_compiled", bert_workload, args.repeats, warmup=3)
            rows.append(
                row(
                    f"MLM training step, 16 × 128, ours compiled against {name} (tokens/s)",
                    tokens_train / t_ours,
                    tokens_train / t_bert,
                    "tokens/s",
                )
            )
        t_compiled, t_bert = interleaved(args.size, "compiled", "dense", args.repeats, warmup=3)
        rows.append(
            row(
                "inference, dense 32 × 128, ours compiled (tokens/s)", tokens / t_compiled, tokens / t_bert, "tokens/s"
            )
        )

    # 5. the data pipeline against what training consumes
    pipeline_tps = data_pipeline_tokens_per_second()
    rows.append(
        row(
            "data pipeline (tokenise + pack) vs training consumption (tokens/s)",
            pipeline_tps,
            train_tokens_per_second,
            "tokens/s",
        )
    )

    # 6. time and peak memory against length (batch 1); BERT's position table stops at 512
    sweep = []
    length = 128
    while length <= args.max_length:
        ours_m = measure_memory("ours", args.size, length)
        bert_m = measure_memory("bert", args.size, length) if length <= 1024 else {"error": "not run (see 1024)"}
        sweep.append((length, ours_m, bert_m))
        length *= 2

    write_report(args, rows, sweep, peak)


def write_report(args, rows, sweep, peak) -> None:
    lines = [
        f"# Benchmark: sinusoidal encoder vs BertForMaskedLM/BertModel, size `{args.size}`",
        "",
        f"`python -m benchmarks.speed.run --size {args.size}{' --compile' if args.compile else ''}` on "
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"medians of {args.repeats} interleaved repetitions; fp32 matmul peak measured in the run: "
        f"{peak / 1e9:.1f} GFLOP/s. Dimensions: {SIZES[args.size]}, vocabulary {VOCAB}, GELU, sdpa attention.",
        "",
        "| measurement | ours | BERT | ours / BERT |",
        "|---|---|---|---|",
    ]
    for r in rows:
        fmt = "{:.3f}" if r["unit"] == "fraction" else "{:,.0f}"
        bert = fmt.format(r["bert"]) if r["bert"] is not None else "—"
        ratio = f"{r['ratio']:.2f}×" if r["ratio"] is not None else "—"
        lines.append(f"| {r['row']} | {fmt.format(r['ours'])} | {bert} | {ratio} |")
    lines += [
        "",
        "Length sweep, batch 1, one forward of the encoder (inference):",
        "",
        "| tokens | ours: seconds | ours: peak MiB | BERT: seconds | BERT: peak MiB |",
        "|---|---|---|---|---|",
    ]
    for length, ours_m, bert_m in sweep:

        def cells(m):
            if "error" in m:
                return m["error"], "—"
            return f"{m['seconds']:.3f}", f"{m['peak_mib']:.0f}"

        lines.append(f"| {length:,} | {' | '.join(cells(ours_m))} | {' | '.join(cells(bert_m))} |")
    by_length = {length: m for length, m, _ in sweep}
    if 8192 in by_length and 16384 in by_length and "peak_mib" in by_length[8192]:
        ratio = by_length[16384]["peak_mib"] / max(by_length[8192]["peak_mib"], 1e-9)
        lines += ["", f"Peak memory at 16,384 tokens / at 8,192 tokens: {ratio:.2f}×."]
    text = "\n".join(lines) + "\n"
    print(text)
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(__file__)), f"results-{args.size}.md")
    with open(output, "w") as handle:
        handle.write(text)


if __name__ == "__main__":
    main()
