"""Serving the sinusoidal encoder on a CPU, measured: PyTorch fp32 (the reference), PyTorch with bf16 weights, ONNX
Runtime fp32 (the project's export) and ONNX Runtime int8 (dynamic quantization of that export), each against
transformers' BERT of identical shape on the same path, and what each path costs our model in accuracy.

    python -m benchmarks.deployment.run         # outputs/small-builtin and outputs/library-classifier (scripts/*.sh)
    python -m benchmarks.deployment.run --pretrained P --classifier C --repeats 15
    python -m benchmarks.deployment.run --repeats 2 --max_eval_passages 32    # a quick look, not a measurement

Speed, in tokens/s (a padded batch counts its real tokens only), of the encoder (`--speed_head feature-extraction`,
the default: AutoModel against BertModel; `fill-mask`: the masked-LM models) on a dense batch of 32 × 128 tokens and
on 32 sequences of 40–256 tokens right-padded to 256 (about 40% padding), the batches of benchmarks/speed/run.py.
BERT has our hidden size, layers, heads, FFN size, vocabulary and activation, sdpa attention and random weights, and
goes through the same export and quantization. As in benchmarks/speed/run.py, each model runs in a worker process
of its own and the two are timed alternately (ours, BERT, ours, ...) after warm-up calls; each figure is the median
of `--repeats`. PyTorch and ONNX Runtime use the same number of intra-op threads: torch's, as the environment sets
it (OMP_NUM_THREADS).

Accuracy, of our model, each path against PyTorch fp32: the largest absolute difference of the masked-LM logits on
the real tokens of validation passages of the built-in corpus, with 15% of their tokens masked; the fill-mask top-1
agreement there (the share of masked positions whose top prediction is fp32's); and the accuracy of the fine-tuned
classifier on the validation split of the built-in fine-tuning task (`finetuning.load_task_data`).

int8 is what ONNX Runtime's documentation recommends for transformer models on CPUs: the pre-processing
`quant_pre_process` (symbolic shape inference, graph optimisation), then `quantize_dynamic` with int8 weights
(activations quantized to uint8 at run time, "U8S8"), per-tensor scales, no reduced range (that is for CPUs
without VNNI; the report lists the CPU's flags).

Writes a markdown report (default benchmarks/deployment/results.md) and, beside it, a JSON file with every figure, the
command line, date, commit, CPU, versions and threads (benchmarks/deployment/results.json), from which `python
docs/tables.py` writes the table of docs/deployment.md. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import torch
import transformers
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertForMaskedLM,
    BertModel,
)
from transformers.utils import logging

import sinusoidal_encoder  # noqa: F401  (registers the model with the Auto classes)
from benchmarks.batches import INFERENCE_BATCHES
from benchmarks.bert_reference import bert_config
from benchmarks.machine import cpu_description, git_commit
from sinusoidal_encoder_training.publishing.onnx_export import export_onnx
from sinusoidal_encoder_training.tasks.registry import TASKS

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATHS = ("pytorch-fp32", "pytorch-bf16", "onnxruntime-fp32", "onnxruntime-int8")
PATH_LABELS = {
    "pytorch-fp32": "PyTorch fp32 (reference)",
    "pytorch-bf16": "PyTorch bf16 weights",
    "onnxruntime-fp32": "ONNX Runtime fp32",
    "onnxruntime-int8": "ONNX Runtime int8 (dynamic)",
}
BATCHES = ("dense", "padded")
BATCH_LABELS = {"dense": "dense 32 × 128", "padded": "padded 32 × 40–256 → 256"}
QUANTIZATION = {
    "pre_processing": "onnxruntime.quantization.quant_pre_process(auto_merge=True)",
    "method": "onnxruntime.quantization.quantize_dynamic",
    "weight_type": "QInt8",
    "activation_type": "QUInt8, quantized at run time",
    "per_channel": False,
    "reduce_range": False,
}
MASK_FRACTION = 0.15
EVAL_BATCH = 16  # passages per forward in the accuracy measurements


# ----------------------------------------------------------------------------------------------------------------
# the inputs


# ----------------------------------------------------------------------------------------------------------------
# the serving paths


def auto_class(head: str):
    """The Auto class of an export task of `sinusoidal_encoder_training.tasks.registry.TASKS`, or of "classifier"."""
    return (
        AutoModelForSequenceClassification if head == "classifier" else getattr(transformers, TASKS[head].auto_class)
    )


def output_name(head: str) -> str:
    return "logits" if head == "classifier" else TASKS[head].outputs[0]


def load_pytorch(folder: str, head: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    return auto_class(head).from_pretrained(folder, dtype=dtype, attn_implementation="sdpa").eval()


def ort_session(path: str):
    """An ONNX Runtime CPU session with as many intra-op threads as torch uses."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


Predict = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def serving_path(path: str, folder: str, head: str, onnx_files: dict[str, str]) -> Predict:
    """(input_ids, attention_mask) -> the output of `head` (float32), through one serving path."""
    name = output_name(head)
    if path.startswith("pytorch"):
        model = load_pytorch(folder, head, torch.bfloat16 if path == "pytorch-bf16" else torch.float32)

        def predict(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            with torch.inference_mode():
                return getattr(model(input_ids=ids, attention_mask=mask), name).float()

        return predict
    session = ort_session(onnx_files[path])

    def predict(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        (output,) = session.run([name], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        return torch.from_numpy(output)

    return predict


def quantize(fp32_path: str, int8_path: str) -> str:
    """The documented dynamic quantization of an fp32 ONNX file (see QUANTIZATION), after its pre-processing."""
    from onnxruntime.quantization import QuantType, quant_pre_process, quantize_dynamic

    prepared = int8_path.replace(".onnx", "-prepared.onnx")
    # auto_merge: without it, BERT's position-table slice, min(512, sequence), stops symbolic shape inference
    quant_pre_process(fp32_path, prepared, auto_merge=True)
    quantize_dynamic(prepared, int8_path, weight_type=QuantType.QInt8, per_channel=False, reduce_range=False)
    return int8_path


def export_both(model: torch.nn.Module, head: str, stem: str) -> dict[str, str]:
    """`model` exported with the project's exporter (fp32), and its int8 quantization: {path: file}."""
    fp32 = export_onnx(model, f"{stem}.onnx", output_name(head))
    return {"onnxruntime-fp32": fp32, "onnxruntime-int8": quantize(fp32, f"{stem}-int8.onnx")}


def bert_folder(config, head: str, folder: str) -> str:
    """A randomly initialised BERT of our model's shape (BertModel, or BertForMaskedLM for fill-mask), saved."""
    settings = bert_config(config, max(512, config.max_position_embeddings))  # the padded batch has 256 tokens
    settings.hidden_dropout_prob = settings.attention_probs_dropout_prob = 0.0
    torch.manual_seed(0)
    (BertForMaskedLM if head == "fill-mask" else BertModel)(settings).save_pretrained(folder)
    return folder


# ----------------------------------------------------------------------------------------------------------------
# speed: one worker process per model, timed alternately


class Worker:
    """One model's serving paths in a process of its own, timing one call per request (as in
    benchmarks/speed/run.py, each model gets its own allocator heap). `load` builds a path on a batch (and drops
    the previous one); `seconds` times one call of it. Requests are sent and answered separately, so that two
    workers start and load at the same time."""

    def __init__(self, spec: dict):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.deployment.run", "--_worker", json.dumps(spec)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def receive(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"deployment worker exited with {self.proc.wait()}")
            if line.startswith("{"):
                return json.loads(line)

    def send(self, request: str) -> None:
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()

    def seconds(self) -> float:
        self.send("run")
        return self.receive()["seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def serve_worker(spec: dict) -> None:
    """Worker process: answer `load PATH BATCH` and `run` (one timed call) on stdin, one JSON line each."""
    logging.disable_progress_bar()
    print(json.dumps({"threads": torch.get_num_threads()}), flush=True)
    run = None
    for line in sys.stdin:
        command, *arguments = line.split()
        if command == "load":
            path, batch = arguments
            run = None
            gc.collect()
            predict = serving_path(path, spec["folder"], spec["head"], spec["onnx"])
            ids, mask = INFERENCE_BATCHES[batch](spec["vocab_size"])
            run = functools.partial(predict, ids, mask)
            print(json.dumps({"ready": True}), flush=True)
        elif command == "run":
            start = time.perf_counter()
            run()
            print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)


def interleaved(workers: tuple[Worker, Worker], repeats: int, warmup: int) -> tuple[float, float]:
    """Median seconds of the two workers' loaded calls, timed alternately so that machine noise hits both alike."""
    for _ in range(warmup):
        for worker in workers:
            worker.seconds()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for worker, series in zip(workers, times, strict=True):
            series.append(worker.seconds())
    return statistics.median(times[0]), statistics.median(times[1])


def measure_speed(specs: dict[str, dict], vocab_size: int, repeats: int, warmup: int) -> tuple[list[dict], int]:
    """A row per path and batch: tokens/s of ours and of BERT, and ours / BERT; and the workers' thread count."""
    tokens = {name: int(make(vocab_size)[1].sum()) for name, make in INFERENCE_BATCHES.items()}
    workers = Worker(specs["ours"]), Worker(specs["bert"])
    rows = []
    try:
        started = [worker.receive() for worker in workers]  # {"threads": N} once a worker has its libraries
        threads = started[0]["threads"]
        for path in PATHS:
            for batch in BATCHES:
                for worker in workers:
                    worker.send(f"load {path} {batch}")
                for worker in workers:
                    worker.receive()
                ours, bert = interleaved(workers, repeats, warmup)
                rows.append(
                    {
                        "path": path,
                        "batch": batch,
                        "tokens": tokens[batch],
                        "ours_seconds": ours,
                        "bert_seconds": bert,
                        "ours_tokens_per_s": tokens[batch] / ours,
                        "bert_tokens_per_s": tokens[batch] / bert,
                        "ratio": bert / ours,  # ours / BERT in tokens/s
                    }
                )
                print(f"{path:17} {batch:7} ours {tokens[batch] / ours:10,.0f} tokens/s, BERT ratio {bert / ours:.2f}")
        return rows, threads
    finally:
        for worker in workers:
            worker.close()


# ----------------------------------------------------------------------------------------------------------------
# accuracy: every path of our model against PyTorch fp32


def masked_chunks(tokenizer, texts: list[str], max_length: int, seed: int = 0) -> Iterator[dict[str, torch.Tensor]]:
    """The passages in padded batches of EVAL_BATCH with MASK_FRACTION of their real non-special tokens masked
    (seeded): input_ids, attention_mask, `masked` (bool) and `original` ids."""
    generator = torch.Generator().manual_seed(seed)
    for start in range(0, len(texts), EVAL_BATCH):
        encoded = tokenizer(
            texts[start : start + EVAL_BATCH],
            truncation=True,
            max_length=max_length,
            padding=True,
            return_special_tokens_mask=True,
            return_tensors="pt",
        )
        maskable = encoded["attention_mask"].bool() & ~encoded["special_tokens_mask"].bool()
        masked = maskable & (torch.rand(maskable.shape, generator=generator) < MASK_FRACTION)
        ids = encoded["input_ids"].masked_fill(masked, tokenizer.mask_token_id)
        yield {
            "input_ids": ids,
            "attention_mask": encoded["attention_mask"],
            "masked": masked,
            "original": encoded["input_ids"],
        }


def fill_mask_figures(predictors: dict[str, Predict], chunks: list[dict[str, torch.Tensor]]) -> dict[str, dict]:
    """Per path: the largest |logit - fp32 logit| on real tokens, the top-1 agreement with fp32 at masked positions,
    and the top-1 accuracy there (the masked token predicted)."""
    worst = dict.fromkeys(predictors, 0.0)
    agree = dict.fromkeys(predictors, 0)
    right = dict.fromkeys(predictors, 0)
    masked_total = 0
    for chunk in chunks:
        real, masked = chunk["attention_mask"].bool(), chunk["masked"]
        masked_total += int(masked.sum())
        reference = predictors["pytorch-fp32"](chunk["input_ids"], chunk["attention_mask"])
        reference_top = reference.argmax(-1)[masked]
        for path, predict in predictors.items():
            logits = reference if path == "pytorch-fp32" else predict(chunk["input_ids"], chunk["attention_mask"])
            worst[path] = max(worst[path], float((logits - reference)[real].abs().max()))
            top = logits.argmax(-1)[masked]
            agree[path] += int((top == reference_top).sum())
            right[path] += int((top == chunk["original"][masked]).sum())
    return {
        path: {
            "max_abs_logit_diff": worst[path],
            "fill_mask_top1_agreement": agree[path] / max(masked_total, 1),
            "fill_mask_top1_accuracy": right[path] / max(masked_total, 1),
            "masked_tokens": masked_total,
        }
        for path in predictors
    }


def classifier_figures(predictors: dict[str, Predict], tokenizer, texts, labels, max_length: int) -> dict[str, dict]:
    """Per path: accuracy on (texts, label ids), agreement of the predicted class with fp32's, and the largest
    |logit - fp32 logit|."""
    predictions: dict[str, list[torch.Tensor]] = {path: [] for path in predictors}
    worst = dict.fromkeys(predictors, 0.0)
    for start in range(0, len(texts), EVAL_BATCH):
        batch = tokenizer(
            texts[start : start + EVAL_BATCH],
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        )
        reference = predictors["pytorch-fp32"](batch["input_ids"], batch["attention_mask"])
        for path, predict in predictors.items():
            logits = reference if path == "pytorch-fp32" else predict(batch["input_ids"], batch["attention_mask"])
            worst[path] = max(worst[path], float((logits - reference).abs().max()))
            predictions[path].append(logits.argmax(-1))
    truth = torch.tensor(labels)
    reference = torch.cat(predictions["pytorch-fp32"])
    return {
        path: {
            "classifier_accuracy": float((torch.cat(found) == truth).float().mean()),
            "classifier_agreement": float((torch.cat(found) == reference).float().mean()),
            "classifier_max_abs_logit_diff": worst[path],
            "examples": len(labels),
        }
        for path, found in predictions.items()
    }


def validation_task(classifier: str, max_passages: int | None):
    """The validation split of the built-in fine-tuning task (`finetuning.load_task_data`: the corpus's own split,
    passages labelled with their library), at most `max_passages` of it, and the input length of fine-tuning."""
    from sinusoidal_encoder_training.stages.finetuning import FinetuningConfig, load_task_data

    unused = os.path.join(tempfile.gettempdir(), "unused")  # nothing is written: the config is only read
    config = FinetuningConfig(model_name_or_path=classifier, output_dir=unused, max_eval_samples=max_passages)
    return load_task_data(config)["validation"], config.max_length


def measure_accuracy(args, files: dict[str, dict[str, str]]) -> dict:
    """The accuracy figures of every path, from the masked-LM on masked validation passages and the classifier on
    the task's validation split."""
    validation, max_length = validation_task(args.classifier, args.max_eval_passages)
    tokenizer = AutoTokenizer.from_pretrained(args.pretrained)
    mlm_length = AutoConfig.from_pretrained(args.pretrained).max_position_embeddings  # the training length
    texts = list(validation["text"])
    chunks = list(masked_chunks(tokenizer, texts, mlm_length))
    predictors = {path: serving_path(path, args.pretrained, "fill-mask", files["fill-mask"]) for path in PATHS}
    mlm = fill_mask_figures(predictors, chunks)
    del predictors
    gc.collect()

    classifier_tokenizer = AutoTokenizer.from_pretrained(args.classifier)
    label2id = AutoConfig.from_pretrained(args.classifier).label2id
    labels = [label2id[label] for label in validation["label"]]
    predictors = {path: serving_path(path, args.classifier, "classifier", files["classifier"]) for path in PATHS}
    classified = classifier_figures(predictors, classifier_tokenizer, texts, labels, max_length)
    del predictors
    gc.collect()
    return {
        "passages": len(validation),
        "masked_lm_max_length": mlm_length,
        "classifier_max_length": max_length,
        "classifier_reported_eval_accuracy": reported_accuracy(args.classifier),
        "paths": {path: {**mlm[path], **classified[path]} for path in PATHS},
    }


def reported_accuracy(folder: str) -> float | None:
    """The eval_accuracy that fine-tuning wrote (eval_results.json), on the whole validation split."""
    path = os.path.join(folder, "eval_results.json")
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        return json.load(handle).get("eval_accuracy")


# ----------------------------------------------------------------------------------------------------------------
# the machine and the run


def versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "onnx": onnx.__version__,
        "transformers": transformers.__version__,
    }


# ----------------------------------------------------------------------------------------------------------------
# the report


def speed_table(rows: list[dict]) -> list[str]:
    fp32 = {row["batch"]: row["ours_tokens_per_s"] for row in rows if row["path"] == "pytorch-fp32"}
    lines = [
        "| path | batch | ours (tokens/s) | BERT (tokens/s) | ours / BERT | ours / ours in PyTorch fp32 |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {PATH_LABELS[row['path']]} | {BATCH_LABELS[row['batch']]} | {row['ours_tokens_per_s']:,.0f} | "
            f"{row['bert_tokens_per_s']:,.0f} | {row['ratio']:.2f}× | "
            f"{row['ours_tokens_per_s'] / fp32[row['batch']]:.2f}× |"
        )
    return lines


def accuracy_table(accuracy: dict) -> list[str]:
    lines = [
        "| path | max abs logit difference | fill-mask top-1 agreement | fill-mask top-1 accuracy | "
        "classifier accuracy | classifier agreement |",
        "|---|---|---|---|---|---|",
    ]
    for path, figures in accuracy["paths"].items():
        lines.append(
            f"| {PATH_LABELS[path]} | {figures['max_abs_logit_diff']:.2e} | "
            f"{figures['fill_mask_top1_agreement']:.4f} | {figures['fill_mask_top1_accuracy']:.4f} | "
            f"{figures['classifier_accuracy']:.4f} | {figures['classifier_agreement']:.4f} |"
        )
    return lines


def report(record: dict) -> str:
    machine, settings, accuracy = record["machine"], record["settings"], record["accuracy"]
    flags = ", ".join(f"{flag} {'yes' if present else 'no'}" for flag, present in machine["flags"].items())
    shape = record["models"]["shape"]
    paths = next(iter(accuracy["paths"].values()))
    lines = [
        "# Serving on a CPU: PyTorch, bf16, ONNX Runtime fp32 and int8, against BERT",
        "",
        f"`{record['command']}` on {record['date']}, commit {record['commit']}. CPU: {machine['model']} "
        f"({machine['logical_cores']} logical cores; {flags}). Threads: {record['threads']['torch']} (torch) and "
        f"{record['threads']['onnxruntime_intra_op']} (ONNX Runtime intra-op). Versions: "
        + ", ".join(f"{name} {version}" for name, version in record["versions"].items())
        + ".",
        "",
        f"Speed of the {settings['speed_head']} model of `{record['models']['pretrained']}` ({shape}) and of "
        "transformers' BERT of the same shape (random weights, sdpa attention), each path exported and quantized "
        f"alike; medians of {settings['repeats']} interleaved repetitions after {settings['warmup']} warm-up calls. "
        "A padded batch counts its real tokens only. int8: "
        + ", ".join(f"{key} {value}" for key, value in settings["quantization"].items())
        + ".",
        "",
        *speed_table(record["speed"]),
        "",
        "ONNX files (MB, fp32 → int8): "
        + "; ".join(
            f"{model} {sizes['onnxruntime-fp32']:.1f} → {sizes['onnxruntime-int8']:.1f}"
            for model, sizes in record["onnx_megabytes"].items()
        )
        + ".",
        "",
        f"Accuracy of our model through each path against PyTorch fp32: masked-LM logits on {accuracy['passages']} "
        f"validation passages of the built-in corpus (truncated to {accuracy['masked_lm_max_length']} tokens) with "
        f"{MASK_FRACTION:.0%} of their tokens masked ({paths['masked_tokens']:,} masked tokens); the classifier "
        f"`{record['models']['classifier']}` on the same {accuracy['passages']} passages, the validation split of the "
        f"built-in fine-tuning task (truncated to {accuracy['classifier_max_length']} tokens; fine-tuning reported "
        f"accuracy {fmt(accuracy['classifier_reported_eval_accuracy'])} on the whole split).",
        "",
        *accuracy_table(accuracy),
        "",
    ]
    return "\n".join(lines)


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def write(record: dict, output: str) -> str:
    """The report at `output` and the record as JSON beside it; returns the JSON file's path."""
    json_path = os.path.splitext(output)[0] + ".json"
    with open(output, "w") as handle:
        handle.write(report(record))
    with open(json_path, "w") as handle:
        json.dump(record, handle, indent=2)
        handle.write("\n")
    return json_path


# ----------------------------------------------------------------------------------------------------------------
# the command line


def folder_problem(folder: str, head: str) -> str | None:
    """Why `folder` is not a saved sinusoidal-encoder folder with the head class `head` and a tokenizer, or None."""
    if not os.path.isdir(folder):
        return f"{folder!r}: no such folder"
    try:
        with open(os.path.join(folder, "config.json")) as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        return f"{folder!r} has no readable config.json: not a saved model folder"
    if config.get("model_type") != "sinusoidal_encoder":
        return f"{folder!r} is a {config.get('model_type')!r} model, not a sinusoidal_encoder one"
    architectures = config.get("architectures") or []
    if not any(name.endswith(head) for name in architectures):
        return f"{folder!r} is not a {head} model (architectures: {architectures})"
    if not os.path.isfile(os.path.join(folder, "tokenizer.json")):
        return f"{folder!r} has no tokenizer.json"
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--pretrained", default="outputs/small-builtin", help="A masked-LM folder (what scripts/pretrain.sh writes)."
    )
    parser.add_argument(
        "--classifier",
        default="outputs/library-classifier",
        help="A sequence classifier fine-tuned on the built-in task (what scripts/finetune.sh writes).",
    )
    parser.add_argument("--repeats", type=int, default=10, help="Interleaved timed repetitions per row.")
    parser.add_argument("--warmup", type=int, default=3, help="Untimed calls of each model before a row's timing.")
    parser.add_argument(
        "--speed_head",
        default="feature-extraction",
        choices=("feature-extraction", "fill-mask"),
        help="What the speed rows serve: the encoder (AutoModel against BertModel) or the masked-LM models.",
    )
    parser.add_argument(
        "--max_eval_passages",
        type=int,
        default=None,
        help="At most this many validation passages for the accuracy figures (default: the whole split).",
    )
    parser.add_argument(
        "--output",
        default=os.path.join(REPO, "benchmarks", "deployment", "results.md"),
        help="The markdown report; the JSON record goes beside it (.json). Default: benchmarks/deployment/results.md.",
    )
    parser.add_argument("--work_dir", default=None, help="Keep the ONNX files here (default: a temporary folder).")
    parser.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._worker:
        return args
    for flag, value in (("--repeats", args.repeats), ("--max_eval_passages", args.max_eval_passages or 1)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}.")
    if args.warmup < 0:
        parser.error(f"--warmup must be at least 0, got {args.warmup}.")
    for flag, head in (("--pretrained", "ForMaskedLM"), ("--classifier", "ForSequenceClassification")):
        problem = folder_problem(getattr(args, flag[2:]), head)
        if problem:
            parser.error(f"{flag} {problem}.")
    for module in ("onnx", "onnxscript", "onnxruntime"):
        try:
            __import__(module)
        except ModuleNotFoundError:
            parser.error(f"needs {module} (the 'onnx' extra): pip install '.[onnx]'.")
    return args


def prepare(args, work: str) -> tuple[dict[str, dict[str, str]], dict[str, dict], object]:
    """Export and quantize every model the run serves: ours (speed head and masked-LM), our classifier, and BERT.
    Returns the ONNX files by head, the workers' specs, and our config."""
    config = AutoConfig.from_pretrained(args.pretrained)
    files = {}
    for head, folder in (("fill-mask", args.pretrained), (args.speed_head, args.pretrained)):
        if head not in files:
            files[head] = export_both(load_pytorch(folder, head), head, os.path.join(work, f"ours-{head}"))
    files["classifier"] = export_both(
        load_pytorch(args.classifier, "classifier"), "classifier", os.path.join(work, "classifier")
    )
    bert = bert_folder(config, args.speed_head, os.path.join(work, "bert"))
    bert_model = auto_class(args.speed_head).from_pretrained(bert, attn_implementation="sdpa").eval()
    bert_files = export_both(bert_model, args.speed_head, os.path.join(work, "bert"))
    specs = {
        "ours": {"folder": os.path.abspath(args.pretrained), "head": args.speed_head, "onnx": files[args.speed_head]},
        "bert": {"folder": bert, "head": args.speed_head, "onnx": bert_files},
    }
    for spec in specs.values():
        spec["vocab_size"] = config.vocab_size
    return files, specs, config


def megabytes(path: str) -> float:
    """The size of an ONNX file with its external data (`NAME.onnx.data`, where the exporter writes the weights)."""
    folder, name = os.path.split(path)
    sizes = [os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f == name or f == f"{name}.data"]
    return sum(sizes) / 1e6


def main(argv: list[str] | None = None) -> dict:
    """Measure, write the report and the JSON record, and return the record."""
    args = parse_args(argv)
    if args._worker:
        serve_worker(json.loads(args._worker))
        return {}
    logging.disable_progress_bar()
    command = "python -m benchmarks.deployment.run " + shlex.join(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="deployment-") as temporary:
        work = args.work_dir or temporary
        os.makedirs(work, exist_ok=True)
        print("exporting and quantizing ours, the classifier and BERT")
        files, specs, config = prepare(args, work)
        sizes = {f"ours {head}": paths for head, paths in files.items()} | {"BERT": specs["bert"]["onnx"]}
        sizes = {model: {path: megabytes(file) for path, file in paths.items()} for model, paths in sizes.items()}
        print("measuring the accuracy of each path")
        accuracy = measure_accuracy(args, files)
        print("measuring the speed of each path, ours and BERT in turn")
        rows, threads = measure_speed(specs, config.vocab_size, args.repeats, args.warmup)
    shape = (
        f"hidden {config.hidden_size}, {config.num_hidden_layers} layers, {config.num_attention_heads} heads, "
        f"FFN {config.intermediate_size}, vocabulary {config.vocab_size}, {config.hidden_act}"
    )
    record = {
        "command": command.strip(),
        "date": datetime.date.today().isoformat(),
        "commit": git_commit(),
        "machine": cpu_description(),
        "versions": versions(),
        "threads": {"torch": threads, "onnxruntime_intra_op": threads},
        "settings": {
            "repeats": args.repeats,
            "warmup": args.warmup,
            "speed_head": args.speed_head,
            "max_eval_passages": args.max_eval_passages,
            "quantization": QUANTIZATION,
        },
        "models": {"pretrained": args.pretrained, "classifier": args.classifier, "shape": shape},
        "onnx_megabytes": sizes,
        "speed": rows,
        "accuracy": accuracy,
    }
    json_path = write(record, args.output)
    print(report(record))
    print(f"wrote {args.output} and {json_path}")
    return record


if __name__ == "__main__":
    main()
