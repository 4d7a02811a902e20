"""The training loop shared by pretraining and fine-tuning: the Accelerator and the loaders, what a task tells the
loop, where training stands, the loop itself (accumulation, scheduling, evaluation, logging, checkpoints, resume),
and what a stage returns."""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import signal
import sys
import threading
import time
from itertools import islice
from typing import Any

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm

from .checkpoints import complete_checkpoints, resolve_checkpoint, save_checkpoint
from .command_line import Interrupted, Terminated, UsageError
from .configs import TrainingConfig
from .metrics_log import MetricsLog, format_metrics


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


@dataclasses.dataclass(frozen=True)
class TrainingResult:
    """What `train()` returns: the final progress, the final evaluation, and the optimizer steps the run was set
    for (`max_train_steps`, derived from the epochs when the flag is unset)."""

    progress: TrainingProgress
    metrics: dict[str, float]
    max_train_steps: int


@dataclasses.dataclass(frozen=True)
class StageResult:
    """What a stage (`pretrain()`, `finetune()`) returns: the accelerator, the prepared model, the tokenizer, the
    final progress and evaluation, and the number of optimizer steps the run was set for (derived from the epochs
    without `--max_train_steps`)."""

    accelerator: Accelerator
    model: torch.nn.Module
    tokenizer: Any
    progress: TrainingProgress
    metrics: dict[str, float]
    max_train_steps: int


def make_loaders(
    config: TrainingConfig, train_set, eval_set, generator: torch.Generator, train_collate, eval_collate
) -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader]:
    """The training loader (its order drawn from `generator`, which the task reseeds every epoch, unless the set is
    a stream; the last partial batch dropped) and the evaluation loader (every example), of the config's batch
    sizes, with the workers and page-locked memory the device wants (`loader_settings`); `accelerator.prepare` them
    with the model."""
    settings = loader_settings(config)
    train_loader = torch.utils.data.DataLoader(
        train_set,
        batch_size=config.per_device_train_batch_size,
        shuffle=not isinstance(train_set, torch.utils.data.IterableDataset),
        generator=generator,
        collate_fn=train_collate,
        drop_last=True,
        **settings,
    )
    eval_loader = torch.utils.data.DataLoader(
        eval_set,
        batch_size=config.per_device_eval_batch_size,
        generator=torch.Generator(),
        collate_fn=eval_collate,
        **settings,
    )
    return train_loader, eval_loader


GPU_LOADER_WORKERS = 2  # per process, beside a GPU: batches are built while it steps


def loader_settings(config: TrainingConfig) -> dict[str, Any]:
    """The DataLoader's workers (`--dataloader_num_workers`, else by the device: none on a CPU, whose cores the step
    needs; `GPU_LOADER_WORKERS` beside a GPU) and page-locked memory (beside a GPU, so that the copy to it does not
    wait: accelerate copies with `non_blocking`, `make_accelerator`)."""
    gpu = torch.cuda.is_available()
    workers = config.dataloader_num_workers
    if workers is None:
        workers = GPU_LOADER_WORKERS if gpu else 0
    return {"num_workers": workers, "pin_memory": gpu}


def bf16_is_fast() -> bool:
    """Whether bf16 autocast pays here: a CUDA GPU, or a CPU with AVX512-BF16 or AMX instructions (elsewhere bf16 is
    emulated and slower than fp32)."""
    if torch.cuda.is_available():
        return True
    return any(
        getattr(torch.cpu, name, lambda: False)() for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    )


def compile_once_per_mode() -> None:
    """Settings under which a compiled run captures one graph per mode (training; evaluation with and without
    labels) whatever the lengths, batch sizes and masks of its batches: the masked-LM head's sparse prediction
    (`hidden[labels != -100]`, a size that depends on the data) is traced instead of breaking the graph at every
    forward, and sizes that happen to be equal (a batch of 32 rows of 32 tokens, under a sequence-length schedule)
    are not assumed equal in the next batch, which recompiled."""
    import torch._dynamo.config
    import torch.fx.experimental._config

    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    torch.fx.experimental._config.use_duck_shape = False


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # the torch.compile modes that replay graphs as CUDA graphs


def uses_cuda_graphs(config: TrainingConfig) -> bool:
    """Whether the run is compiled in a mode that replays its graphs as CUDA graphs (on a CUDA GPU; elsewhere
    inductor runs them as the default mode does)."""
    return bool(config.torch_compile) and config.torch_compile_mode in CUDA_GRAPH_MODES


def mark_cuda_graph_step() -> None:
    """Before each forward under CUDA graphs: a new step begins, whose replay may reuse the memory of the outputs of
    the step before (the loop has read what it keeps of them). Without it, torch starts a new step at a forward only
    when no backward is pending, a guess that any output kept a step longer would break."""
    torch.compiler.cudagraph_mark_step_begin()


def keep_gradients(model: torch.nn.Module) -> None:
    """Under CUDA graphs, after the first backward of an optimizer step that accumulates several micro-batches: the
    gradients it left in `.grad` live in the graphs' memory, which the next forward's replay reuses; copied out of it,
    they are ordinary tensors that the next backwards add to (torch stops such a run otherwise). Parameters without a
    gradient keep none."""
    for parameter in model.parameters():
        if parameter.grad is not None:
            parameter.grad = parameter.grad.clone()


def compile_line(config: TrainingConfig) -> str | None:
    """How the run is compiled, for the run's header (None: eager), and what the mode does on this machine."""
    if not config.torch_compile:
        return None
    line = f"torch.compile = {config.torch_compile_backend}, mode {config.torch_compile_mode or 'default'}"
    if uses_cuda_graphs(config):
        if torch.cuda.is_available():
            line += " (CUDA graphs: one recording per shape, replayed)"
        else:
            line += " (CUDA graphs need a CUDA GPU: here the graphs run as in the default mode)"
    return line


def make_accelerator(config: TrainingConfig) -> Accelerator:
    """An Accelerator whose gradient accumulation follows our step windows (never the end of a DataLoader), with
    trackers when asked, quiet library logs on non-main processes, and every RNG seeded."""
    from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin, TorchDynamoPlugin, set_seed

    compile_plugin = None  # without --torch_compile, accelerate's own configuration decides
    if config.torch_compile:
        compile_plugin = TorchDynamoPlugin(
            backend=config.torch_compile_backend, mode=config.torch_compile_mode, dynamic=True
        )
        compile_once_per_mode()
    accelerator = Accelerator(
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=config.gradient_accumulation_steps, sync_with_dataloader=False
        ),
        log_with=config.report_to if config.with_tracking else None,
        project_dir=config.output_dir,
        mixed_precision=config.mixed_precision,
        dynamo_plugin=compile_plugin,
        dataloader_config=DataLoaderConfiguration(non_blocking=torch.cuda.is_available()),  # with pinned batches
    )
    from accelerate.utils import DistributedType

    fsdp_asked = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true")
    launched = max(accelerator.num_processes, int(os.environ.get("WORLD_SIZE", "1")))  # processes started
    if fsdp_asked and launched > 1 and accelerator.distributed_type != DistributedType.FSDP:
        # accelerate enables FSDP for GPU-like devices only; elsewhere it runs the processes as plain data parallel
        raise UsageError(
            f"The accelerate configuration asks for FSDP, but accelerate runs this job as "
            f"{accelerator.distributed_type.value} on {accelerator.device.type} (it enables FSDP on GPUs and similar "
            "devices only): the model would be replicated, not sharded. Launch with a data-parallel configuration "
            "(training/accelerate_configs/multi_gpu_ddp.yaml, or `--multi_gpu` with ACCELERATE_USE_CPU=1 on a CPU)."
        )
    alone = accelerator.num_processes == 1 and "WORLD_SIZE" not in os.environ
    if alone and "ACCELERATE_USE_CPU" in os.environ and "MASTER_ADDR" in os.environ:
        # accelerate's plain launcher sets MASTER_ADDR only when asked for several processes or machines
        raise UsageError(
            "accelerate launch was asked for several processes or machines, but this process runs alone (no process "
            "group: each would train alone and all write one --output_dir). `accelerate launch --cpu` starts one "
            "plain process whatever --num_machines says: on CPUs launch with --multi_gpu and ACCELERATE_USE_CPU=1 "
            "(docs/pretraining.md, 'Several machines')."
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
    set_seed(config.seed)
    return accelerator


class TrainingTask:
    """What the shared loop needs to know about a task. Subclasses implement the three methods."""

    name = "training"

    def loss(self, model, batch: dict[str, torch.Tensor], num_items_in_batch: float | torch.Tensor) -> torch.Tensor:
        """The model's own loss of a batch, from one forward pass with its labels: the loss summed over its units
        divided by `num_items_in_batch`, transformers' convention (the models of this package, and any that
        transformers' Trainer trains under gradient accumulation, honour it)."""
        raise NotImplementedError

    def loss_units(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The loss units of a batch as the model counts them (masked tokens, labelled tokens, examples, label
        values), known before the forward pass: the step's loss is the sum over the units of every micro-batch of
        every process, divided by their number. A scalar on the batch's device."""
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
        """Real tokens in a batch, for tokens/s and tokens seen: a scalar on the batch's device."""
        mask = batch.get("attention_mask")
        ids = batch["input_ids"]
        return mask.sum() if mask is not None else torch.tensor(ids.numel(), device=ids.device)


def train(
    accelerator: Accelerator,
    config: TrainingConfig,
    model,
    optimizer,
    train_loader,
    eval_loader,
    task: TrainingTask,
    header: list[str],
    streaming: bool = False,
) -> TrainingResult:
    """The training loop shared by pretraining and fine-tuning; model, optimizer and loaders are prepared already.

    One optimizer step = `gradient_accumulation_steps` micro-batches on every process. The loss is normalised by the
    loss units of the whole global batch, so every unit weighs the same whatever the number of processes and
    micro-batches. Creates the scheduler, resumes from a checkpoint, logs, evaluates, checkpoints; returns the final
    progress and evaluation, with the optimizer steps it was set for (the config is left as it is)."""
    from transformers import get_scheduler

    steps_per_epoch = None if streaming else len(train_loader) // config.gradient_accumulation_steps
    if steps_per_epoch == 0:
        raise UsageError("One epoch holds fewer batches than --gradient_accumulation_steps: lower the batch size.")
    max_train_steps = config.max_train_steps
    if max_train_steps is None:
        max_train_steps = steps_per_epoch * config.num_train_epochs
    num_epochs = math.ceil(max_train_steps / steps_per_epoch) if steps_per_epoch else 1
    warmup = config.num_warmup_steps if config.num_warmup_steps is not None else int(0.06 * max_train_steps)
    # a prepared scheduler advances once per process at every optimizer step: count its steps the same way
    scheduler = get_scheduler(
        config.lr_scheduler_type,
        optimizer,
        num_warmup_steps=warmup * accelerator.num_processes,
        num_training_steps=max_train_steps * accelerator.num_processes,
    )
    scheduler = accelerator.prepare(scheduler)
    progress = TrainingProgress()
    accelerator.register_for_checkpointing(progress)

    checkpoint = resolve_checkpoint(
        config.output_dir,
        config.resume_from_checkpoint,
        report=lambda path, damage: accelerator.print(f"Skipping the damaged checkpoint {path}: {damage}"),
    )
    if checkpoint is not None:
        accelerator.print(f"Resuming from {checkpoint}")
        accelerator.load_state(checkpoint)
    elif config.resume_from_checkpoint == "latest":
        accelerator.print(f"No checkpoint in {config.output_dir}/checkpoints yet: starting from scratch")
    if config.with_tracking:
        # trackers take scalars and strings (tensorboard's hparams rejects anything else): parsed values as text
        flags = {**dataclasses.asdict(config), "max_train_steps": max_train_steps}
        hparams = {
            k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in flags.items() if v is not None
        }
        accelerator.init_trackers(task.name, config=hparams)
    metrics_log = MetricsLog(
        accelerator, config.output_dir, progress.completed_steps if checkpoint else None, config.with_tracking
    )
    watch = LossWatch(config, accelerator.mixed_precision, progress.completed_steps)

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
    compiled = compile_line(config)
    if compiled:
        accelerator.print(f"  {compiled}")
    accelerator.print(
        f"  Batch per device = {config.per_device_train_batch_size}, gradient accumulation = "
        f"{config.gradient_accumulation_steps}, global batch = {config.global_batch_size(world)}"
    )
    accelerator.print(f"  Optimizer steps = {max_train_steps} ({num_epochs} epoch(s)), warmup = {warmup}")
    check_free_space(config, unwrapped.num_parameters(), max_train_steps - progress.completed_steps)

    bar = tqdm(
        total=max_train_steps,
        initial=progress.completed_steps,
        disable=not accelerator.is_local_main_process,
        desc=task.name,
        dynamic_ncols=True,
    )
    model.train()
    device = accelerator.device
    window_loss = torch.zeros((), dtype=torch.float64, device=device)
    window_units = torch.zeros((), dtype=torch.float64, device=device)
    step_loss = torch.zeros((), dtype=torch.float64, device=device)  # this process's share of the newest step's loss
    window_time = 0.0  # tokens/s counts training steps only, not evaluation or checkpoints
    window_tokens = torch.zeros((), dtype=torch.float64, device=device)  # the tokens since the last logging
    pending_tokens = torch.zeros((), dtype=torch.float64, device=device)  # not yet in progress.tokens_seen
    stop = StopRequest(accelerator.is_local_main_process, bool(config.checkpointing_steps), shared=world > 1)
    agreement = StopAgreement()  # several processes: the stop they agreed on, one step late
    cuda_graphs = uses_cuda_graphs(config)
    stopping = False
    try:
        stop.install()
        while progress.completed_steps < max_train_steps:
            task.start_epoch(progress.epoch)
            loader = train_loader
            if progress.batches_in_epoch:
                loader = accelerator.skip_first_batches(train_loader, progress.batches_in_epoch)
            batches = iter(loader)
            while progress.completed_steps < max_train_steps:
                step_start = time.perf_counter()
                window = list(islice(batches, config.gradient_accumulation_steps))
                if len(window) < config.gradient_accumulation_steps:  # end of the epoch: a partial window is no step
                    break
                task.begin_step(progress.completed_steps)
                if agreement.agreed() if world > 1 else stop.requested:
                    stopping = True
                    break
                local = torch.stack(
                    [
                        sum(task.loss_units(b) for b in window).to(device, torch.float64),
                        sum(task.tokens(b) for b in window).to(device, torch.float64),
                        torch.tensor(float(stop.requested), dtype=torch.float64, device=device),
                        step_loss,
                    ]
                )
                # one reduction gives the step's units and tokens, whether any process was asked to stop, and the
                # loss of the step before; it stays on the device (`LossWatch.track` keeps the first non-finite
                # loss there). The host reads none of it at this step: one process decides on a stop alone, and
                # several read their agreement at the next step (`StopAgreement`), when it is long computed, so
                # that a GPU step never waits for the one before
                reduced = accelerator.reduce(local, reduction="sum")
                units, tokens, previous_loss = reduced[0], reduced[1], reduced[3]
                watch.track(progress.completed_steps, previous_loss)
                step_loss.zero_()
                if world > 1:
                    agreement.post(reduced[2])
                # each micro-batch's loss is its sum over the step's units; DDP averages gradients over processes and
                # accelerator.backward divides by the accumulation steps: the gradient is that of the step's mean
                scale = world * config.gradient_accumulation_steps
                items = units.clamp(min=1.0).float()  # a tensor: no recompiles, no read
                for index, batch in enumerate(window):
                    with accelerator.accumulate(model):
                        if cuda_graphs:
                            mark_cuda_graph_step()
                        loss = task.loss(model, batch, items)
                        accelerator.backward(loss * scale)
                        if cuda_graphs and index == 0 and len(window) > 1:
                            keep_gradients(model)
                        if accelerator.sync_gradients and config.max_grad_norm > 0:
                            accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                        optimizer.step()
                        scheduler.step()
                        optimizer.zero_grad()
                    window_loss += loss.detach().double() * units  # this process's sum
                    step_loss += loss.detach().double()
                window_units += units
                window_tokens += tokens
                pending_tokens += tokens
                progress.completed_steps += 1
                progress.batches_in_epoch += config.gradient_accumulation_steps
                bar.update(1)

                step = progress.completed_steps
                logging = step % config.logging_steps == 0 or step == max_train_steps
                evaluating = config.eval_steps and step % config.eval_steps == 0 and step < max_train_steps
                saving = config.checkpointing_steps and step % config.checkpointing_steps == 0
                if logging or evaluating or saving:  # the host reads the device: the step's GPU time is in the window
                    progress.tokens_seen += int(pending_tokens.item())
                    pending_tokens.zero_()
                window_time += time.perf_counter() - step_start
                if logging:
                    # every process's sums over the steps' units (the same on every process: reduced already)
                    sums = accelerator.reduce(torch.stack([window_loss, step_loss]), "sum")
                    loss, latest, seen = torch.stack([sums[0] / window_units.clamp(min=1.0), sums[1], window_tokens])
                    loss, latest, seen = loss.item(), latest.item(), seen.item()
                    watch.see(step, latest)  # before the loss is logged
                    metrics = {
                        "train_loss": loss,
                        "learning_rate": scheduler.get_last_lr()[0],
                        "tokens_per_second": seen / window_time,
                        "tokens_seen": progress.tokens_seen,
                        "epoch": progress.epoch,
                    }
                    bar.set_postfix(
                        loss=f"{loss:.3f}",
                        lr=f"{metrics['learning_rate']:.2e}",
                        tok_s=f"{seen / window_time:,.0f}",
                    )
                    metrics_log.log(metrics, step)
                    window_loss.zero_()
                    window_units.zero_()
                    window_tokens.zero_()
                    window_time = 0.0
                if evaluating or saving:
                    watch.settle(accelerator, model, step, step_loss)
                if evaluating:
                    evaluation = task.evaluate(model, eval_loader, accelerator)
                    metrics_log.log(evaluation, step)
                    if accelerator.is_local_main_process:
                        bar.write(f"step {step} evaluation: {format_metrics(evaluation)}")
                if saving:
                    save_checkpoint(accelerator, config.output_dir, step, config.checkpoints_total_limit)
            if stopping or progress.completed_steps >= max_train_steps:
                break
            if streaming:
                steps = progress.completed_steps
                accelerator.print(f"The stream ended after {steps} steps, before --max_train_steps.")
                break
            progress.epoch += 1
            progress.batches_in_epoch = 0
        if not stopping:  # a request during the last step, after its reduction
            requests = torch.tensor(float(stop.requested), dtype=torch.float64, device=device)
            stopping = bool(accelerator.reduce(requests, reduction="sum").item())
        if stopping:  # every process agrees: the step is complete, save it unless it is saved already
            bar.close()
            step = progress.completed_steps
            if config.checkpointing_steps and step and step not in dict(complete_checkpoints(config.output_dir)):
                watch.settle(accelerator, model, step, step_loss)
                progress.tokens_seen += int(pending_tokens.item())
                save_checkpoint(accelerator, config.output_dir, step, config.checkpoints_total_limit)
            raise stop.kind(interruption_line(config, step))
    except KeyboardInterrupt as interruption:  # a second Ctrl-C or SIGTERM: at once, from where training stands
        if isinstance(interruption, Interrupted) and interruption.args:  # the agreed stop above, line and all
            raise
        bar.close()
        kind = Terminated if isinstance(interruption, Terminated) else Interrupted
        raise kind(interruption_line(config, progress.completed_steps)) from None
    finally:
        stop.uninstall()
        bar.close()
    watch.settle(accelerator, model, progress.completed_steps, step_loss)  # nothing evaluated or saved of NaNs
    progress.tokens_seen += int(pending_tokens.item())

    final = task.evaluate(model, eval_loader, accelerator)
    metrics_log.log(final, progress.completed_steps)
    accelerator.print(f"final evaluation: {format_metrics(final)}")
    summary = task.summary(final)
    if summary:
        accelerator.print(summary)
    return TrainingResult(progress, final, max_train_steps)


class LossWatch:
    """A training loss that is not finite (NaN, infinity) stops the run with one line (`diverged_line`), before
    anything is logged, evaluated or saved from it. The host does not wait for the device each step to learn it:
    every step's loss (summed over the processes, one step late, from the next step's reduction) is kept on the
    device (`track`: the first one that is not finite, and the newest finite one before it), and read where the loop
    reads values anyway: at a logging step (`see`), and before an evaluation, a checkpoint and the final evaluation,
    whose weights are saved (`settle`, with a count of the weights that are not finite)."""

    def __init__(self, config: TrainingConfig, mixed_precision: str, step: int):
        self.config, self.mixed_precision = config, mixed_precision
        self.seen = step  # the newest step whose loss the host has seen (a resumed run: the checkpoint's)
        self.last: tuple[int, float] | None = None  # (step, loss) of the newest finite loss seen
        # on the device: the first bad step (-1: none) and its loss, the newest good step before it and its loss
        self.tracked: torch.Tensor | None = None

    def track(self, step: int, loss: torch.Tensor) -> None:
        """Keep the loss of optimizer step `step` (a scalar tensor, summed over every process) on its device."""
        if step <= self.seen:
            return
        if self.tracked is None:
            self.tracked = torch.tensor([-1.0, 0.0, -1.0, 0.0], dtype=torch.float64, device=loss.device)
        finite, clean = torch.isfinite(loss), self.tracked[0] < 0  # clean: no bad step before this one
        first_bad, good = clean & ~finite, clean & finite
        self.tracked = torch.stack(
            [
                torch.where(first_bad, float(step), self.tracked[0]),
                torch.where(first_bad, loss.double(), self.tracked[1]),
                torch.where(good, float(step), self.tracked[2]),
                torch.where(good, loss.double(), self.tracked[3]),
            ]
        )

    def check(self) -> None:
        """Read what `track` kept: a `UsageError` when a tracked loss was not finite."""
        if self.tracked is None:
            return
        bad_step, bad_loss, good_step, good_loss = self.tracked.tolist()
        self.tracked = None
        if good_step >= 0 and (self.last is None or good_step > self.last[0]):
            self.last = (int(good_step), good_loss)
        if bad_step >= 0:
            what = f"The training loss is {bad_loss}"
            raise UsageError(diverged_line(self.config, self.mixed_precision, what, int(bad_step), self.last))
        self.seen = max(self.seen, int(good_step))

    def see(self, step: int, loss: float) -> None:
        """The loss of optimizer step `step` (summed over every process), read by the host: a `UsageError` when it,
        or a loss tracked before it, is not finite."""
        self.check()
        if step <= self.seen:
            return
        if not math.isfinite(loss):
            raise UsageError(
                diverged_line(self.config, self.mixed_precision, f"The training loss is {loss}", step, self.last)
            )
        self.seen, self.last = step, (step, loss)

    def settle(self, accelerator: Accelerator, model, step: int, step_loss: torch.Tensor) -> None:
        """Before evaluating or saving after step `step`: its loss seen, and a `UsageError` when a weight of `model`
        (this process's part, on every process) is not finite."""
        bad = non_finite_weights(model).to(step_loss)
        loss, bad = accelerator.reduce(torch.stack([step_loss, bad]), "sum").tolist()
        self.see(step, loss)
        if bad:
            what = f"The weights hold {int(bad):,} NaN or infinite value(s)"
            raise UsageError(diverged_line(self.config, self.mixed_precision, what, step, self.last))


def non_finite_weights(model: torch.nn.Module) -> torch.Tensor:
    """How many values of the weights of `model` (this process's part) are NaN or infinite: a scalar on their device,
    read by the caller (one pass over the weights, before a save)."""
    counts = [(~torch.isfinite(p.detach())).sum() for p in model.parameters()]
    return torch.stack(counts).sum() if counts else torch.zeros((), dtype=torch.int64)


def diverged_line(config, mixed_precision: str | None, what: str, step: int, last: tuple[int, float] | None) -> str:
    """The line that stops a run in which `what` happened ("The training loss is nan") at optimizer step `step`:
    the last finite loss, that nothing of it is saved, what to try. `config` has `learning_rate` and `max_grad_norm`
    (the training loop's, distillation's)."""
    before = f"the last finite loss was {last[1]:.4f}, at step {last[0]}" if last else "no finite loss before it"
    tries = [f"a lower --learning_rate (now {config.learning_rate:g})"]
    if config.max_grad_norm > 0:
        tries.append(f"a lower --max_grad_norm (now {config.max_grad_norm:g})")
    else:
        tries.append("clip gradients with --max_grad_norm 1.0")
    if mixed_precision == "fp16":
        tries.append("--mixed_precision bf16 or no instead of fp16")
    return (
        f"{what} at step {step} ({before}): stopped, nothing saved from it; try "
        f"{', '.join(tries[:-1])} or {tries[-1]}."
    )


CHECKPOINT_BYTES_PER_PARAMETER = 12  # float32 weights and AdamW's two float32 moments (accelerate's save_state)
EXPORT_BYTES_PER_PARAMETER = 4  # the exported float32 weights


def space_needed(config: TrainingConfig, parameters: int, steps_left: int) -> tuple[int, str]:
    """About how many bytes the rest of a run writes, and how: the checkpoints it keeps at once (one more while a
    new one is written before the oldest goes), and the exported model."""
    checkpoints = 0
    if config.checkpointing_steps:
        checkpoints = steps_left // config.checkpointing_steps
        if config.checkpoints_total_limit is not None:
            checkpoints = min(checkpoints, config.checkpoints_total_limit + 1)
    each = parameters * CHECKPOINT_BYTES_PER_PARAMETER
    export = parameters * EXPORT_BYTES_PER_PARAMETER
    how = f"{checkpoints} checkpoint(s) of {each / 1e9:.2f} GB and the model of {export / 1e9:.2f} GB"
    return checkpoints * each + export, how


def check_free_space(config: TrainingConfig, parameters: int, steps_left: int) -> None:
    """Before training: the free space of the output folder's disk against what the run will write."""
    import shutil

    needed, how = space_needed(config, parameters, steps_left)
    free = shutil.disk_usage(config.output_dir).free
    if free < needed:
        raise UsageError(
            f"--output_dir {config.output_dir} has {free / 1e9:.2f} GB free, and this run writes about "
            f"{needed / 1e9:.2f} GB ({how}): free space, keep fewer checkpoints (--checkpoints_total_limit), or "
            "choose a folder on another disk."
        )


class StopAgreement:
    """Whether the processes of a run agreed to stop, read one step late so that the host never waits for the
    device: each step's reduction sums every process's stop request (`post`), which the next step reads (`agreed`),
    when the device has long computed it (on a CUDA device, copied to the host behind the step and waited for by an
    event, not by the step in progress). Every process reads the same sum at the same step: all stop after the same
    step."""

    def __init__(self) -> None:
        self.pending: tuple[torch.Tensor, Any] | None = None  # the newest sum, and the event its copy waits for

    def post(self, requests: torch.Tensor) -> None:
        """The sum of the processes' stop requests at this step's reduction (a scalar on the device)."""
        if requests.device.type == "cuda":
            host = torch.empty((), dtype=requests.dtype, pin_memory=True)
            host.copy_(requests, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
            self.pending = (host, copied)
        else:
            self.pending = (requests, None)

    def agreed(self) -> bool:
        """Whether a process had asked to stop by the newest posted reduction."""
        if self.pending is None:
            return False
        requests, copied = self.pending
        if copied is not None:
            copied.synchronize()
        return bool(requests.item())


class StopRequest:
    """Ctrl-C (SIGINT) and SIGTERM (Slurm's, Kubernetes', `docker stop`'s) while training: the first one asks the
    loop to stop after the optimizer step in progress; with several processes (`shared`), every one learns it from
    the next step's reduction, read a step later (`StopAgreement`), so that they stop after the same step, the one in
    progress or the next, and save its checkpoint together (when the run saves checkpoints); a second one stops at
    once (`Interrupted`, status 130, or `Terminated`, 143, raised from the handler). Handlers are installed
    on the main thread only (Python cannot install them elsewhere) and the previous ones put back by `uninstall`;
    forked DataLoader workers inherit them and leave the stopping to the training process."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, announce: bool, checkpoints: bool, shared: bool = False):
        self.announce, self.checkpoints, self.shared = announce, checkpoints, shared
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}
        self.pid = os.getpid()

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def kind(self) -> type[Interrupted]:
        return Terminated if self.signum == signal.SIGTERM else Interrupted

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.SIGNALS:
            if signal.getsignal(signum) is signal.SIG_IGN:  # e.g. SIGINT of a command started with `&`: leave it
                continue
            self.previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous.clear()

    def _handle(self, signum, frame) -> None:
        if os.getpid() != self.pid:  # a forked DataLoader worker: its process stops it
            return
        if self.requested:
            raise (Terminated if signum == signal.SIGTERM else Interrupted)()
        self.signum = signum
        if self.announce:
            saving = "saving a checkpoint of it, " if self.checkpoints else ""
            name = signal.Signals(signum).name
            when = "the step in progress or the next, with every process" if self.shared else "the step in progress"
            line = f"{name}: stopping after {when} ({saving}a second {name} stops at once)"
            sys.stderr.write(f"\n{line}\n")
            sys.stderr.flush()


def interruption_line(config: TrainingConfig, step: int) -> str:
    """What a run interrupted at optimizer step `step` tells its user: the newest complete checkpoint and the
    command that resumes from it (this command, with `--resume_from_checkpoint latest`)."""
    newest = resolve_checkpoint(config.output_dir, "latest")
    if newest is None:
        return f"interrupted at step {step}, before the first checkpoint (--checkpointing_steps): nothing to resume."
    script, *args = sys.argv
    command = ["python", script] if script.endswith(".py") else [os.path.basename(script)]
    if "--resume_from_checkpoint" not in args:
        args += ["--resume_from_checkpoint", "latest"]
    return f"interrupted at step {step}; the newest checkpoint is {newest}; resume with: {shlex.join(command + args)}"


def real_examples(accelerator: Accelerator, local: int) -> int:
    """How many of the `local` examples of this process's current evaluation batch are real: all but on the last
    batch of a prepared loader, where accelerate repeats examples to even it out across processes
    (`gradient_state.remainder` r > 0, the real examples of the gathered batch). The example in local row i of
    process p is row p × local + i of the gathered batch, real if that is below r: the real ones are a prefix."""
    state = accelerator.gradient_state
    if not state.end_of_dataloader or state.remainder <= 0:
        return local
    return max(0, min(local, state.remainder - accelerator.process_index * local))


def unlabel_repeated_examples(labels: torch.Tensor, accelerator: Accelerator) -> torch.Tensor:
    """`labels` (one row per example) with -100 in the rows of the examples accelerate repeats to even out the last
    batch of a prepared evaluation loader across processes, so that summing over every process counts each example
    once, while every process still runs the same forwards. On that batch (`gradient_state.remainder` r > 0, the
    number of real examples in the gathered batch), the example in local row i of process p is row
    p × local batch + i of the gathered batch: kept if that is below r. Elsewhere `labels` is returned as it is."""
    state = accelerator.gradient_state
    if not state.end_of_dataloader or state.remainder <= 0:
        return labels
    local = labels.shape[0]
    rows = accelerator.process_index * local + torch.arange(local, device=labels.device)  # (B,)
    repeated = (rows >= state.remainder).reshape(-1, *[1] * (labels.dim() - 1))
    return labels.masked_fill(repeated, -100)
