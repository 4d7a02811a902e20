"""The training machinery shared by pretraining and fine-tuning: flags, optimizer, atomic checkpoints and exact
resume, metric logging, and publishing to the Hub."""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import shutil
import time
from itertools import islice
from typing import Any

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

CHECKPOINT_PATTERN = re.compile(r"^step_(\d+)$")
METRICS_FILE = "metrics.jsonl"


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("optimisation")
    group.add_argument("--per_device_train_batch_size", type=int, default=32, help="Sequences per process and step.")
    group.add_argument("--per_device_eval_batch_size", type=int, default=64, help="Sequences per process in eval.")
    group.add_argument("--learning_rate", type=float, default=5e-4, help="Peak learning rate of AdamW.")
    group.add_argument(
        "--weight_decay",
        type=float,
        default=0.01,
        help="AdamW weight decay, applied to matrices only (not to biases, LayerNorm weights or other 1-D tensors).",
    )
    group.add_argument("--adam_beta1", type=float, default=0.9, help="AdamW beta1.")
    group.add_argument("--adam_beta2", type=float, default=0.98, help="AdamW beta2 (0.98 as in the paper).")
    group.add_argument("--adam_epsilon", type=float, default=1e-6, help="AdamW epsilon.")
    group.add_argument(
        "--lr_scheduler_type",
        default="linear",
        choices=[
            "linear",
            "cosine",
            "cosine_with_restarts",
            "polynomial",
            "constant",
            "constant_with_warmup",
            "inverse_sqrt",
            "warmup_stable_decay",
        ],
        help="Schedule after warmup (transformers.get_scheduler).",
    )
    group.add_argument("--num_warmup_steps", type=int, default=None, help="Warmup steps (default: 6%% of training).")
    group.add_argument("--max_train_steps", type=int, default=None, help="Optimizer steps; overrides epochs.")
    group.add_argument("--num_train_epochs", type=int, default=1, help="Passes over the training data.")
    group.add_argument("--gradient_accumulation_steps", type=int, default=1, help="Micro-batches per optimizer step.")
    group.add_argument("--max_grad_norm", type=float, default=1.0, help="Gradient clipping norm (0 disables).")
    group.add_argument("--seed", type=int, default=42, help="Seed of initialisation, data order, masks, dropout.")
    group.add_argument("--dataloader_num_workers", type=int, default=0, help="DataLoader worker processes.")
    group.add_argument(
        "--mixed_precision",
        choices=["no", "bf16", "fp16"],
        default=None,
        help="Autocast precision (float32 master weights). Default: what `accelerate launch` or its config says, "
        "else 'no'. bf16 also runs on CPUs with bf16 instructions (AVX512-BF16, AMX), where it is faster.",
    )
    group.add_argument(
        "--torch_compile",
        action="store_true",
        help="Train and evaluate the model under torch.compile (through accelerate, dynamic shapes). Checkpoints and "
        "the exported folder hold the plain model's weights: a compiled run resumes an eager one and vice versa.",
    )
    group.add_argument(
        "--torch_compile_backend",
        default="inductor",
        help="The torch.compile backend of --torch_compile ('inductor', 'aot_eager', ...).",
    )
    group.add_argument(
        "--torch_compile_mode",
        default=None,
        choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"],
        help="The torch.compile mode of --torch_compile (default: torch's).",
    )

    group = parser.add_argument_group("output, evaluation, checkpoints")
    group.add_argument("--output_dir", required=True, help="Where the final Hub-ready model folder is written.")
    group.add_argument(
        "--eval_steps", type=int, default=None, help="Evaluate every N optimizer steps (and at the end)."
    )
    group.add_argument("--logging_steps", type=int, default=10, help="Log training metrics every N optimizer steps.")
    group.add_argument(
        "--checkpointing_steps", type=int, default=None, help="Save the full training state every N optimizer steps."
    )
    group.add_argument("--checkpoints_total_limit", type=int, default=None, help="Keep only the newest K checkpoints.")
    group.add_argument(
        "--resume_from_checkpoint",
        default=None,
        help="'latest' (the newest complete checkpoint in output_dir/checkpoints, or a fresh start if there is none) "
        "or the path of a checkpoint folder.",
    )
    group.add_argument("--with_tracking", action="store_true", help="Log metrics to the trackers of --report_to.")
    group.add_argument(
        "--report_to", default="all", help="Trackers for --with_tracking: 'tensorboard', 'wandb', ..., or 'all'."
    )
    group.add_argument("--push_to_hub", action="store_true", help="Upload the final folder (not checkpoints/).")
    group.add_argument("--hub_model_id", default=None, help="The Hub repository, e.g. 'user/my-encoder'.")
    group.add_argument("--hub_private_repo", action="store_true", help="Create the Hub repository as private.")


def check_training_arguments(args: argparse.Namespace) -> None:
    positive = [
        "per_device_train_batch_size",
        "per_device_eval_batch_size",
        "gradient_accumulation_steps",
        "num_train_epochs",
        "logging_steps",
    ]
    optional_positive = ["max_train_steps", "eval_steps", "checkpointing_steps", "checkpoints_total_limit"]
    for name in positive + optional_positive:
        value = getattr(args, name)
        if (value is not None or name in positive) and (value is None or value <= 0):
            raise ValueError(f"--{name} must be a positive integer, got {value}.")
    if args.learning_rate <= 0:
        raise ValueError(f"--learning_rate must be positive, got {args.learning_rate}.")
    if args.weight_decay < 0 or args.max_grad_norm < 0:
        raise ValueError("--weight_decay and --max_grad_norm must not be negative.")
    if args.num_warmup_steps is not None and args.num_warmup_steps < 0:
        raise ValueError(f"--num_warmup_steps must not be negative, got {args.num_warmup_steps}.")
    if args.push_to_hub and not args.hub_model_id:
        raise ValueError("--push_to_hub needs --hub_model_id.")
    if args.resume_from_checkpoint not in (None, "latest") and not os.path.isdir(args.resume_from_checkpoint):
        raise ValueError(f"--resume_from_checkpoint {args.resume_from_checkpoint!r} is not a checkpoint folder.")


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay by tensor rank: matrices (embeddings, projections) decay; biases and norm weights do not.
    Tied parameters appear once."""
    decay, no_decay = [], []
    for parameter in model.parameters():  # named_parameters() would list a tied tensor once as well
        if parameter.requires_grad:
            (decay if parameter.dim() >= 2 else no_decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class TrainingProgress:
    """Where training stands; saved in every checkpoint through `accelerator.register_for_checkpointing`."""

    def __init__(self) -> None:
        self.completed_steps = 0
        self.epoch = 0
        self.batches_in_epoch = 0  # micro-batches of `epoch` already consumed (per process)
        self.tokens_seen = 0

    def state_dict(self) -> dict[str, int]:
        return dict(vars(self))

    def load_state_dict(self, state: dict[str, int]) -> None:
        for key, value in state.items():
            setattr(self, key, value)


def checkpoints_dir(output_dir: str) -> str:
    return os.path.join(output_dir, "checkpoints")


def complete_checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """(step, path) of every complete checkpoint, oldest first. Temporary folders never match `step_N`."""
    folder = checkpoints_dir(output_dir)
    if not os.path.isdir(folder):
        return []
    found = []
    for name in os.listdir(folder):
        match = CHECKPOINT_PATTERN.match(name)
        if match and os.path.isdir(os.path.join(folder, name)):
            found.append((int(match.group(1)), os.path.join(folder, name)))
    return sorted(found)


def resolve_checkpoint(output_dir: str, requested: str | None) -> str | None:
    if requested is None:
        return None
    if requested == "latest":
        found = complete_checkpoints(output_dir)
        return found[-1][1] if found else None
    return requested


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(accelerator: Accelerator, output_dir: str, step: int, total_limit: int | None) -> str:
    """`accelerator.save_state` into a temporary folder, renamed to `step_N` once every process has written its part:
    a kill during the save leaves the previous checkpoints as they were and no broken `step_N`."""
    folder = checkpoints_dir(output_dir)
    final = os.path.join(folder, f"step_{step}")
    temporary = os.path.join(folder, f".incomplete-step_{step}")
    if accelerator.is_main_process:
        os.makedirs(folder, exist_ok=True)
        shutil.rmtree(temporary, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(temporary)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        for directory, _, files in os.walk(temporary):
            for name in files:
                with open(os.path.join(directory, name), "rb") as handle:
                    os.fsync(handle.fileno())
        shutil.rmtree(final, ignore_errors=True)
        os.rename(temporary, final)
        _fsync_dir(folder)
        if total_limit is not None:
            for _, old in complete_checkpoints(output_dir)[:-total_limit]:
                shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


class MetricsLog:
    """Every logged metric as one JSON line in `output_dir/metrics.jsonl` (main process), and to the trackers.

    On resume, lines from steps after the checkpoint (logged by the killed run) are dropped, so the file reads as
    one uninterrupted run."""

    def __init__(self, accelerator: Accelerator, output_dir: str, resumed_step: int | None, tracking: bool):
        self.accelerator = accelerator
        self.tracking = tracking
        self.path = os.path.join(output_dir, METRICS_FILE)
        if accelerator.is_main_process:
            os.makedirs(output_dir, exist_ok=True)
            kept = []
            if resumed_step is not None and os.path.exists(self.path):
                with open(self.path) as handle:
                    kept = [line for line in handle if line.strip() and json.loads(line)["step"] <= resumed_step]
            with open(self.path, "w") as handle:
                handle.writelines(kept)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.tracking:
            self.accelerator.log(metrics, step=step)
        if self.accelerator.is_main_process:
            with open(self.path, "a") as handle:
                handle.write(json.dumps({"step": step, "time": time.time(), **metrics}) + "\n")


def read_metrics(output_dir: str) -> list[dict[str, Any]]:
    path = os.path.join(output_dir, METRICS_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def perplexity(loss: float) -> float:
    return math.exp(loss) if loss < 100 else float("inf")


def push_folder_to_hub(folder: str, repo_id: str, private: bool = False, api=None, commit_message: str | None = None):
    """Upload a finished model folder to the Hub with huggingface_hub, leaving out resumable checkpoints and logs of
    trackers. `api` is an `HfApi` (injectable for tests)."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    api.create_repo(repo_id=repo_id, private=private, exist_ok=True)
    return api.upload_folder(
        repo_id=repo_id,
        folder_path=folder,
        commit_message=commit_message or "Upload sinusoidal encoder",
        ignore_patterns=["checkpoints/*", "checkpoints/**", "runs/*", "runs/**", "*.pt", "*.pkl"],
    )


def make_accelerator(args: argparse.Namespace) -> Accelerator:
    """An Accelerator whose gradient accumulation follows our step windows (never the end of a DataLoader), with
    trackers when asked, quiet library logs on non-main processes, and every RNG seeded."""
    from accelerate.utils import GradientAccumulationPlugin, TorchDynamoPlugin, set_seed

    compile_plugin = None  # without --torch_compile, accelerate's own configuration decides
    if args.torch_compile:
        compile_plugin = TorchDynamoPlugin(
            backend=args.torch_compile_backend, mode=args.torch_compile_mode, dynamic=True
        )
    accelerator = Accelerator(
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=args.gradient_accumulation_steps, sync_with_dataloader=False
        ),
        log_with=args.report_to if args.with_tracking else None,
        project_dir=args.output_dir,
        mixed_precision=args.mixed_precision,
        dynamo_plugin=compile_plugin,
    )
    from accelerate.utils import DistributedType

    fsdp_asked = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true")
    if fsdp_asked and accelerator.distributed_type != DistributedType.FSDP:
        # accelerate enables FSDP for GPU-like devices only; elsewhere it runs the processes as plain data parallel
        raise ValueError(
            f"The accelerate configuration asks for FSDP, but accelerate runs this job as "
            f"{accelerator.distributed_type.value} on {accelerator.device.type} (it enables FSDP on GPUs and similar "
            "devices only): the model would be replicated, not sharded. Launch with a data-parallel configuration "
            "(training/accelerate_configs/multi_gpu_ddp.yaml, or `--multi_gpu` with ACCELERATE_USE_CPU=1 on a CPU)."
        )
    import datasets
    import transformers

    if accelerator.is_main_process:
        datasets.utils.logging.set_verbosity_warning()
        transformers.utils.logging.set_verbosity_warning()
    else:
        datasets.utils.logging.set_verbosity_error()
        transformers.utils.logging.set_verbosity_error()
        datasets.disable_progress_bars()
    set_seed(args.seed)
    return accelerator


def make_optimizer(model: torch.nn.Module, args: argparse.Namespace) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        parameter_groups(model, args.weight_decay),
        lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
    )


class TrainingTask:
    """What the shared loop needs to know about a task. Subclasses implement the three methods."""

    name = "training"

    def loss_sums(self, model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-example loss sums and the number of loss units (masked tokens, labelled tokens, examples) in each."""
        raise NotImplementedError

    def loss_units(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The loss units of a batch, known before the forward pass (the loss is normalised by their global sum)."""
        raise NotImplementedError

    def evaluate(self, model, loader, accelerator: Accelerator) -> dict[str, float]:
        raise NotImplementedError

    def start_epoch(self, epoch: int) -> None:
        """Called before the batches of each epoch are drawn (seed the data order, the masks)."""

    def begin_step(self, step: int) -> None:
        """Called before the micro-batches of optimizer step `step` (0-based) are computed."""

    def summary(self, metrics: dict[str, float]) -> str | None:
        """A sentence on what an evaluation shows, printed after it (None: the figures speak for themselves)."""
        return None

    def tokens(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Real tokens in a batch, for tokens/s and tokens seen."""
        mask = batch.get("attention_mask")
        return mask.sum() if mask is not None else torch.tensor(batch["input_ids"].numel())


def train(
    accelerator: Accelerator,
    args: argparse.Namespace,
    model,
    optimizer,
    train_loader,
    eval_loader,
    task: TrainingTask,
    header: list[str],
    streaming: bool = False,
) -> tuple[TrainingProgress, dict[str, float]]:
    """The training loop shared by pretraining and fine-tuning; model, optimizer and loaders are prepared already.

    One optimizer step = `gradient_accumulation_steps` micro-batches on every process. The loss is normalised by the
    loss units of the whole global batch, so every unit weighs the same whatever the number of processes and
    micro-batches. Creates the scheduler, resumes from a checkpoint, logs, evaluates, checkpoints; returns the final
    progress and evaluation."""
    from transformers import get_scheduler

    steps_per_epoch = None if streaming else len(train_loader) // args.gradient_accumulation_steps
    if steps_per_epoch == 0:
        raise ValueError("One epoch holds fewer batches than --gradient_accumulation_steps: lower the batch size.")
    if args.max_train_steps is None:
        args.max_train_steps = steps_per_epoch * args.num_train_epochs
    num_epochs = math.ceil(args.max_train_steps / steps_per_epoch) if steps_per_epoch else 1
    warmup = args.num_warmup_steps if args.num_warmup_steps is not None else int(0.06 * args.max_train_steps)
    # a prepared scheduler advances once per process at every optimizer step: count its steps the same way
    scheduler = get_scheduler(
        args.lr_scheduler_type,
        optimizer,
        num_warmup_steps=warmup * accelerator.num_processes,
        num_training_steps=args.max_train_steps * accelerator.num_processes,
    )
    scheduler = accelerator.prepare(scheduler)
    progress = TrainingProgress()
    accelerator.register_for_checkpointing(progress)

    checkpoint = resolve_checkpoint(args.output_dir, args.resume_from_checkpoint)
    if checkpoint is not None:
        accelerator.print(f"Resuming from {checkpoint}")
        accelerator.load_state(checkpoint)
    elif args.resume_from_checkpoint == "latest":
        accelerator.print(f"No checkpoint in {args.output_dir}/checkpoints yet: starting from scratch")
    if args.with_tracking:
        # trackers take scalars and strings (tensorboard's hparams rejects anything else): parsed values as text
        config = {
            k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in vars(args).items() if v is not None
        }
        accelerator.init_trackers(task.name, config=config)
    metrics_log = MetricsLog(
        accelerator, args.output_dir, progress.completed_steps if checkpoint else None, args.with_tracking
    )

    world = accelerator.num_processes
    unwrapped = accelerator.unwrap_model(model)
    accelerator.print("***** Running training *****")
    accelerator.print(
        f"  Model = {unwrapped.config.model_type}, {unwrapped.num_parameters():,} parameters, "
        f"attention = {unwrapped.config._attn_implementation}"
    )
    for line in header:
        accelerator.print(f"  {line}")
    accelerator.print(f"  Processes = {world}, mixed precision = {accelerator.mixed_precision}")
    accelerator.print(
        f"  Batch per device = {args.per_device_train_batch_size}, gradient accumulation = "
        f"{args.gradient_accumulation_steps}, global batch = "
        f"{args.per_device_train_batch_size * world * args.gradient_accumulation_steps}"
    )
    accelerator.print(f"  Optimizer steps = {args.max_train_steps} ({num_epochs} epoch(s)), warmup = {warmup}")

    bar = tqdm(
        total=args.max_train_steps,
        initial=progress.completed_steps,
        disable=not accelerator.is_local_main_process,
        desc=task.name,
        dynamic_ncols=True,
    )
    model.train()
    device = accelerator.device
    window_loss = torch.zeros((), dtype=torch.float64, device=device)
    window_units = torch.zeros((), dtype=torch.float64, device=device)
    window_time, window_tokens = 0.0, 0  # tokens/s counts training steps only, not evaluation or checkpoints
    while progress.completed_steps < args.max_train_steps:
        task.start_epoch(progress.epoch)
        loader = train_loader
        if progress.batches_in_epoch:
            loader = accelerator.skip_first_batches(train_loader, progress.batches_in_epoch)
        batches = iter(loader)
        while progress.completed_steps < args.max_train_steps:
            step_start = time.perf_counter()
            window = list(islice(batches, args.gradient_accumulation_steps))
            if len(window) < args.gradient_accumulation_steps:  # end of the epoch: a partial window is not a step
                break
            task.begin_step(progress.completed_steps)
            local = torch.stack(
                [sum(task.loss_units(b) for b in window).double(), sum(task.tokens(b) for b in window).double()]
            ).to(device)
            units, tokens = accelerator.reduce(local, reduction="sum").tolist()
            # DDP averages gradients over processes and accelerator.backward divides by the accumulation steps
            scale = world * args.gradient_accumulation_steps / max(units, 1.0)
            for batch in window:
                with accelerator.accumulate(model):
                    sums, counts = task.loss_sums(model, batch)
                    loss_sum = sums.sum()
                    accelerator.backward(loss_sum * scale)
                    if accelerator.sync_gradients and args.max_grad_norm > 0:
                        accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                window_loss += loss_sum.detach().double()
                window_units += counts.sum().double()
            progress.completed_steps += 1
            progress.batches_in_epoch += args.gradient_accumulation_steps
            progress.tokens_seen += int(tokens)
            window_tokens += int(tokens)
            window_time += time.perf_counter() - step_start
            bar.update(1)

            step = progress.completed_steps
            if step % args.logging_steps == 0 or step == args.max_train_steps:
                loss = (accelerator.reduce(window_loss, "sum") / accelerator.reduce(window_units, "sum")).item()
                metrics = {
                    "train_loss": loss,
                    "learning_rate": scheduler.get_last_lr()[0],
                    "tokens_per_second": window_tokens / window_time,
                    "tokens_seen": progress.tokens_seen,
                    "epoch": progress.epoch,
                }
                bar.set_postfix(
                    loss=f"{loss:.3f}",
                    lr=f"{metrics['learning_rate']:.2e}",
                    tok_s=f"{window_tokens / window_time:,.0f}",
                )
                metrics_log.log(metrics, step)
                window_loss.zero_()
                window_units.zero_()
                window_time, window_tokens = 0.0, 0
            if args.eval_steps and step % args.eval_steps == 0 and step < args.max_train_steps:
                evaluation = task.evaluate(model, eval_loader, accelerator)
                metrics_log.log(evaluation, step)
                if accelerator.is_local_main_process:
                    bar.write(f"step {step} evaluation: {format_metrics(evaluation)}")
            if args.checkpointing_steps and step % args.checkpointing_steps == 0:
                save_checkpoint(accelerator, args.output_dir, step, args.checkpoints_total_limit)
        if progress.completed_steps >= args.max_train_steps:
            break
        if streaming:
            accelerator.print(f"The stream ended after {progress.completed_steps} steps, before --max_train_steps.")
            break
        progress.epoch += 1
        progress.batches_in_epoch = 0
    bar.close()

    final = task.evaluate(model, eval_loader, accelerator)
    metrics_log.log(final, progress.completed_steps)
    accelerator.print(f"final evaluation: {format_metrics(final)}")
    summary = task.summary(final)
    if summary:
        accelerator.print(summary)
    return progress, final


def format_metrics(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())


def save_tokenizer(tokenizer, folder: str) -> None:
    """`save_pretrained`, then name the class `PreTrainedTokenizerFast`: transformers 5 writes its own class name
    (`TokenizersBackend`), which transformers 4.x does not know; the alias loads on both. A tokenizer without a
    length cap is written without `model_max_length` (rather than as the number 10**30), which loads as no cap."""
    tokenizer.save_pretrained(folder)
    path = os.path.join(folder, "tokenizer_config.json")
    with open(path) as handle:
        config = json.load(handle)
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    if config.get("model_max_length", 0) >= VERY_LARGE_INTEGER:
        del config["model_max_length"]
    with open(path, "w") as handle:
        json.dump(config, handle, indent=2)


def write_sentence_transformers_files(folder: str, config) -> None:
    """The files with which `SentenceTransformer(folder)` loads an exported folder as transformer + mean pooling,
    in the long-standing format every sentence-transformers release reads. Sentences are truncated at the length
    the model was trained at (`config.max_position_embeddings`): the model runs longer, but embeddings past that
    length are unmeasured, and sentence-transformers users expect a cap."""
    hidden_size, max_seq_length = config.hidden_size, config.max_position_embeddings
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    pooling = {
        "word_embedding_dimension": hidden_size,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    }
    files = {
        "modules.json": modules,
        "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False},
        os.path.join("1_Pooling", "config.json"): pooling,
    }
    os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
    for name, content in files.items():
        with open(os.path.join(folder, name), "w") as handle:
            json.dump(content, handle, indent=2)


def describe_data(args: argparse.Namespace) -> str:
    """The training data of a run as the model card states it (Hub dataset or local files)."""
    source = f"`{args.dataset_name or args.train_file}`"
    return source + (f" (configuration `{args.dataset_config_name}`)" if args.dataset_config_name else "")


def published_config(config):
    """The config an exported folder carries: the trained one, with `sparse_prediction` (an option that speeds up
    training) at its default, so that users of the folder get logits at every position."""
    published = copy.deepcopy(config)
    if hasattr(published, "sparse_prediction"):
        published.sparse_prediction = False
    return published


def export_model(accelerator: Accelerator, args: argparse.Namespace, model, auto_class, tokenizer, write_card) -> None:
    """Write the Hub-ready folder: weights of a fresh model of the plain class (under FSDP2 the wrapped class is not
    the one users should load) with the gathered state dict, config with auto_map, code, tokenizer; then
    `write_card(model)` on the main process (model card, pictures, results), then the optional upload."""
    accelerator.wait_for_everyone()
    # torch.compile's wrapper off (its keys carry an `_orig_mod.` prefix), DDP's and FSDP's kept: on every process,
    # FSDP gathers the full state on the main one
    state_dict = accelerator.get_state_dict(getattr(model, "_orig_mod", model))
    if accelerator.is_main_process:
        fresh = auto_class.from_config(published_config(accelerator.unwrap_model(model).config))
        fresh.load_state_dict(state_dict)
        fresh.save_pretrained(args.output_dir)
        save_tokenizer(tokenizer, args.output_dir)
        write_sentence_transformers_files(args.output_dir, fresh.config)
        write_card(fresh)
        accelerator.print(f"saved the model to {args.output_dir}")
        if args.push_to_hub:
            push_folder_to_hub(args.output_dir, args.hub_model_id, private=args.hub_private_repo)
            accelerator.print(f"uploaded {args.output_dir} to the Hub as {args.hub_model_id}")
    accelerator.wait_for_everyone()
