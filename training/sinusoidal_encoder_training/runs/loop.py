"""The training loop shared by pretraining and fine-tuning: what a task tells the loop, the loop in its phases
(start the run, one optimizer step, after the step, finish), and what a stage returns. Beside it: `progress` (where
training stands), `step_plan`, `best_model` (the best evaluation, early stopping), `accelerator` (the Accelerator,
the loaders), `compilation`, `stopping` (on a signal), `divergence`, `disk_space`, `run_folder` (the output folder
claimed, emptied with --overwrite_output_dir)."""

from __future__ import annotations

import dataclasses
import time
from itertools import islice
from typing import Any

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm

from sinusoidal_encoder_training.cli.command_line import Interrupted, Terminated
from sinusoidal_encoder_training.configs import TrainingConfig
from sinusoidal_encoder_training.runs.best_model import end_with_best, patience_spent, see_evaluation
from sinusoidal_encoder_training.runs.checkpoints import complete_checkpoints, resume, save_checkpoint
from sinusoidal_encoder_training.runs.compilation import (
    compile_line,
    keep_gradients,
    mark_cuda_graph_step,
    uses_cuda_graphs,
)
from sinusoidal_encoder_training.runs.disk_space import check_free_space
from sinusoidal_encoder_training.runs.divergence import LossWatch
from sinusoidal_encoder_training.runs.metrics_log import MetricsLog, format_metrics
from sinusoidal_encoder_training.runs.optimization import make_scheduler
from sinusoidal_encoder_training.runs.progress import TrainingProgress
from sinusoidal_encoder_training.runs.run_folder import empty_claimed_folder
from sinusoidal_encoder_training.runs.step_plan import StepPlan, plan_steps
from sinusoidal_encoder_training.runs.stopping import StopAgreement, StopRequest, interruption_line
from sinusoidal_encoder_training.runs.trackers import init_trackers


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
    final progress and evaluation, the number of optimizer steps the run was set for (derived from the epochs
    without `--max_train_steps`), and the split of the data it was evaluated on (`data.pipeline.validation_split`:
    None for a share of the training split held out)."""

    accelerator: Accelerator
    model: torch.nn.Module
    tokenizer: Any
    progress: TrainingProgress
    metrics: dict[str, float]
    max_train_steps: int
    validation_split: str | None


def on_device(value: float, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A number the host knows as a scalar tensor on `device`, filled there (`torch.tensor(value, device=...)`
    would copy it from the host, a copy that waits for the device's queued work)."""
    return torch.full((), value, dtype=dtype, device=device)


class TrainingTask:
    """What the shared loop needs to know about a task. Subclasses implement the three methods."""

    name = "training"
    # every example trained on in every epoch, as transformers' Trainer does: an epoch's last micro-batches, fewer
    # than a step's, are a step of their own (fine-tuning). False: whole steps only (pretraining, whose loader also
    # drops an epoch's last partial batch)
    every_example = True
    # the position in the evaluation split of each example the evaluation loader gives, in its order (None: the
    # split's order; fine-tuning's --group_by_length sorts it): for a task that maps predictions to rows by position
    evaluation_order: list[int] | None = None

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
        return mask.sum() if mask is not None else on_device(ids.numel(), ids.device)


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
    Returns the final progress and evaluation, with the optimizer steps it was set for (the config is left as it is).

    One optimizer step = `gradient_accumulation_steps` micro-batches on every process; the loss is normalised by the
    loss units of the whole global batch, so every unit weighs the same whatever the number of processes and
    micro-batches. The phases: `start_run` (scheduler, resume, trackers, header), for every step `optimizer_step` and
    `after_step` (logging, evaluation, checkpoints), then `finish_run` (the final evaluation). A first Ctrl-C or
    SIGTERM stops the run after a step that every process completes, saved (`stop_if_requested`); a second, at once."""
    run = start_run(accelerator, config, model, optimizer, train_loader, eval_loader, task, header, streaming)
    try:
        run.stop.install()
        agreed = False
        for started, batches in step_windows(run, train_loader, streaming):
            task.begin_step(run.progress.completed_steps)
            agreed = run.stop_agreed()
            if agreed:
                break
            optimizer_step(run, batches)
            after_step(run, started)
        stop_if_requested(run, agreed)
    except KeyboardInterrupt as interruption:  # a second Ctrl-C or SIGTERM: at once, from where training stands
        if isinstance(interruption, Interrupted) and interruption.args:  # the agreed stop, line and all
            raise
        run.bar.close()
        kind = Terminated if isinstance(interruption, Terminated) else Interrupted
        raise kind(interruption_line(config, run.progress.completed_steps)) from None
    finally:
        run.stop.uninstall()
        run.bar.close()
    return finish_run(run)


@dataclasses.dataclass
class LoggingWindow:
    """What the steps since the last logging add up to: this process's loss summed over the steps' units, the units
    and tokens of every process (tensors on the device, read at a logging step), and the seconds the steps took
    (training only: not evaluations or checkpoints)."""

    loss: torch.Tensor
    units: torch.Tensor
    tokens: torch.Tensor
    seconds: float = 0.0

    def reset(self) -> None:
        self.loss.zero_()
        self.units.zero_()
        self.tokens.zero_()
        self.seconds = 0.0


@dataclasses.dataclass
class Run:
    """A training run in progress, which every phase takes: what it trains, its plan and scheduler, where it stands
    (`progress`, saved in every checkpoint), where its figures go, what watches it (the loss, a stop), and what stays
    on the device between steps (`window`, the newest step's loss, the tokens not yet in `progress.tokens_seen`)."""

    accelerator: Accelerator
    config: TrainingConfig
    model: Any
    optimizer: Any
    scheduler: Any
    task: TrainingTask
    eval_loader: Any
    plan: StepPlan
    progress: TrainingProgress
    metrics_log: MetricsLog
    watch: LossWatch
    stop: StopRequest
    bar: Any
    agreement: StopAgreement = dataclasses.field(default_factory=StopAgreement)  # several processes: one step late
    evaluated: tuple[int, dict[str, float]] | None = None  # the newest evaluation during training, and its step
    window: LoggingWindow = dataclasses.field(init=False)
    step_loss: torch.Tensor = dataclasses.field(init=False)  # this process's share of the newest step's loss
    pending_tokens: torch.Tensor = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        def zero() -> torch.Tensor:
            return torch.zeros((), dtype=torch.float64, device=self.accelerator.device)

        self.window = LoggingWindow(zero(), zero(), zero())
        self.step_loss, self.pending_tokens = zero(), zero()

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    def training_left(self) -> bool:
        """Whether the run takes another step: fewer than it was set for, and --early_stopping_patience not spent."""
        return self.progress.completed_steps < self.plan.max_train_steps and not patience_spent(
            self.config, self.progress
        )

    def stop_agreed(self) -> bool:
        """Whether the run stops before its next step: on its own request, or with several processes on the one they
        agreed on at the step before (`StopAgreement`)."""
        return self.agreement.agreed() if self.world > 1 else self.stop.requested


def start_run(
    accelerator: Accelerator,
    config: TrainingConfig,
    model,
    optimizer,
    train_loader,
    eval_loader,
    task: TrainingTask,
    header: list[str],
    streaming: bool = False,
) -> Run:
    """Everything before the first step: the step plan and the learning-rate scheduler, the folder emptied with
    `--overwrite_output_dir` (after they and the disk's free space are checked: a run refused leaves it as it was), the
    progress (registered for checkpoints, loaded with the model's state from the checkpoint
    `--resume_from_checkpoint` names), the trackers, metrics.jsonl (a resumed run's lines after its checkpoint
    dropped), the run's header, the check of the disk's free space and the progress bar; the model in training
    mode."""
    plan = plan_steps(config, train_loader, streaming, task.every_example)
    scheduler = make_scheduler(accelerator, config, optimizer, plan.warmup, plan.max_train_steps)
    parameters = accelerator.unwrap_model(model).num_parameters()
    if config.overwrite_output_dir:  # the last checks of the run's input passed: only now is the folder emptied
        check_free_space(config, parameters, plan.max_train_steps, plan.steps_per_epoch)
        empty_claimed_folder(accelerator, config)
    progress = TrainingProgress()
    accelerator.register_for_checkpointing(progress)
    resumed = resume(accelerator, config)
    if config.with_tracking:
        init_trackers(accelerator, config, task.name, plan.max_train_steps)
    log = MetricsLog(
        accelerator, config.output_dir, progress.completed_steps if resumed else None, config.with_tracking
    )
    watch = LossWatch(config, accelerator.mixed_precision, progress.completed_steps)
    print_header(accelerator, config, model, header, plan)
    if not config.overwrite_output_dir:
        check_free_space(config, parameters, plan.max_train_steps - progress.completed_steps, plan.steps_per_epoch)
    bar = tqdm(
        total=plan.max_train_steps,
        initial=progress.completed_steps,
        disable=not accelerator.is_local_main_process,
        desc=task.name,
        dynamic_ncols=True,
    )
    model.train()
    stop = StopRequest(
        accelerator.is_local_main_process, bool(config.checkpointing_steps), accelerator.num_processes > 1
    )
    return Run(
        accelerator, config, model, optimizer, scheduler, task, eval_loader, plan, progress, log, watch, stop, bar
    )


def print_header(accelerator: Accelerator, config: TrainingConfig, model, header: list[str], plan: StepPlan) -> None:
    """The run's header: the model, the stage's `header` lines, processes and precision, compilation, batch sizes
    and the step plan."""
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
    if config.activation_checkpointing:
        accelerator.print("  Activation checkpointing = every layer's activations recomputed in the backward pass")
    accelerator.print(
        f"  Batch per device = {config.per_device_train_batch_size}, gradient accumulation = "
        f"{config.gradient_accumulation_steps}, global batch = {config.global_batch_size(world)}"
    )
    accelerator.print(f"  Optimizer steps = {plan.max_train_steps} ({plan.epochs} epoch(s)), warmup = {plan.warmup}")


def step_windows(run: Run, train_loader, streaming: bool):
    """The micro-batches of each step to come (`gradient_accumulation_steps` of them, a list), with the time their
    drawing began, epoch after epoch from where the run stands (a resumed epoch skips the micro-batches it consumed)
    until `max_train_steps` (or --early_stopping_patience is spent). Each epoch starts with `task.start_epoch`; a
    partial window at its end is a step if `task.every_example`, else none; a stream that ends before
    `max_train_steps` ends the run, with a line. The caller counts the steps."""
    accelerator, config, progress = run.accelerator, run.config, run.progress
    while run.training_left():
        run.task.start_epoch(progress.epoch)
        loader = train_loader
        if progress.batches_in_epoch:
            loader = accelerator.skip_first_batches(train_loader, progress.batches_in_epoch)
        batches = iter(loader)
        while run.training_left():
            started = time.perf_counter()
            window = list(islice(batches, config.gradient_accumulation_steps))
            if not window or (len(window) < config.gradient_accumulation_steps and not run.task.every_example):
                break
            yield started, window
        if not run.training_left():
            return
        if streaming:
            accelerator.print(f"The stream ended after {progress.completed_steps} steps, before --max_train_steps.")
            return
        progress.epoch += 1
        progress.batches_in_epoch = 0


def optimizer_step(run: Run, batches: list[dict[str, torch.Tensor]]) -> None:
    """One optimizer step over its micro-batches: each one's loss is its sum over the loss units of the whole
    global batch (every micro-batch of every process, `step_reduction`) divided by their number, so its gradient is
    that of the step's mean; gradients clipped to `--max_grad_norm` before the optimizer and the scheduler step. An
    epoch's last window may hold fewer micro-batches than `gradient_accumulation_steps`: its last one steps.
    Under CUDA graphs each forward starts a graph step, and the first micro-batch's gradients are kept out of the
    graphs' memory. The step's loss, units and tokens are added up on the device and the step is counted."""
    accelerator, config, model, window = run.accelerator, run.config, run.model, run.window
    units, tokens = step_reduction(run, batches)
    # each micro-batch's loss is its sum over the step's units; DDP averages gradients over processes and
    # accelerator.backward divides by the accumulation steps: the gradient is that of the step's mean
    scale = run.world * config.gradient_accumulation_steps
    items = units.clamp(min=1.0).float()  # a tensor: no recompiles, no read
    cuda_graphs = uses_cuda_graphs(config)
    # accelerate syncs (and steps) at the micro-batch that brings its count to a multiple of the accumulation
    # steps: counted from here, the window's last, however many it holds
    accelerator.step = config.gradient_accumulation_steps - len(batches)
    for index, batch in enumerate(batches):
        with accelerator.accumulate(model):
            if cuda_graphs:
                mark_cuda_graph_step()
            loss = run.task.loss(model, batch, items)
            accelerator.backward(loss * scale)
            if cuda_graphs and index == 0 and len(batches) > 1:
                keep_gradients(model)
            if accelerator.sync_gradients and config.max_grad_norm > 0:
                accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            run.optimizer.step()
            run.scheduler.step()
            run.optimizer.zero_grad()
        window.loss += loss.detach().double() * units  # this process's sum
        run.step_loss += loss.detach().double()
    window.units += units
    window.tokens += tokens
    run.pending_tokens += tokens
    run.progress.completed_steps += 1
    run.progress.batches_in_epoch += len(batches)
    run.bar.update(1)


def step_reduction(run: Run, batches: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's one reduction over the processes: its loss units and tokens (returned), whether any process was
    asked to stop (posted to `run.agreement` with several processes) and the loss of the step before (kept by
    `run.watch`). It stays on the device: the host reads none of it at this step, so that a GPU step never waits for
    the one before."""
    device = run.accelerator.device
    local = torch.stack(
        [
            sum(run.task.loss_units(b) for b in batches).to(device, torch.float64),
            sum(run.task.tokens(b) for b in batches).to(device, torch.float64),
            on_device(float(run.stop.requested), device, torch.float64),
            run.step_loss,
        ]
    )
    reduced = run.accelerator.reduce(local, reduction="sum")
    run.watch.track(run.progress.completed_steps, reduced[3])
    run.step_loss.zero_()
    if run.world > 1:
        run.agreement.post(reduced[2])
    return reduced[0], reduced[1]


def after_step(run: Run, started: float) -> None:
    """After the step just counted (its drawing began at `started`): every `--logging_steps` and at the last step
    the training figures logged (`log_training`), every `--eval_steps` before the last the model evaluated, every
    `--checkpointing_steps` the state saved (each a number of steps, or `epoch`: `StepPlan.due`); the loss and the
    weights checked finite before an evaluation or a save. The tokens seen are read from the device only at those
    steps, whose seconds then include the device's."""
    config, step = run.config, run.progress.completed_steps
    logging = step % config.logging_steps == 0 or step == run.plan.max_train_steps
    evaluating = run.plan.due(config.eval_steps, step) and step < run.plan.max_train_steps
    saving = run.plan.due(config.checkpointing_steps, step)
    if logging or evaluating or saving:
        count_tokens_seen(run)
    run.window.seconds += time.perf_counter() - started
    if logging:
        log_training(run, step)
    if evaluating or saving:
        run.watch.settle(run.accelerator, run.model, step, run.step_loss)
    if evaluating:
        evaluation = run.task.evaluate(run.model, run.eval_loader, run.accelerator)
        run.metrics_log.log(evaluation, step)
        see_evaluation(config, run.progress, step, evaluation)
        run.evaluated = (step, evaluation)
        if run.accelerator.is_local_main_process:
            run.bar.write(f"step {step} evaluation: {format_metrics(evaluation)}")
    if saving:
        save_checkpoint(
            run.accelerator, config.output_dir, step, config.checkpoints_total_limit, keep=run.progress.best_step
        )


def count_tokens_seen(run: Run) -> None:
    """The tokens of the steps since the last count added to `progress.tokens_seen` (a read of the device)."""
    run.progress.tokens_seen += int(run.pending_tokens.item())
    run.pending_tokens.zero_()


def log_training(run: Run, step: int) -> None:
    """The logging window's figures at step `step`, the same on every process: the training loss (every process's
    sum over the window's units), the learning rate, tokens/s, tokens seen and epoch, to metrics.jsonl, the trackers
    and the progress bar, once the step's loss is seen finite; the window starts anew."""
    window = run.window
    sums = run.accelerator.reduce(torch.stack([window.loss, run.step_loss]), "sum")
    loss, latest, seen = torch.stack([sums[0] / window.units.clamp(min=1.0), sums[1], window.tokens])
    loss, latest, seen = loss.item(), latest.item(), seen.item()
    run.watch.see(step, latest)  # before the loss is logged
    metrics = {
        "train_loss": loss,
        "learning_rate": run.scheduler.get_last_lr()[0],
        "tokens_per_second": seen / window.seconds,
        "tokens_seen": run.progress.tokens_seen,
        "epoch": run.progress.epoch,
    }
    run.bar.set_postfix(
        loss=f"{loss:.3f}", lr=f"{metrics['learning_rate']:.2e}", tok_s=f"{seen / window.seconds:,.0f}"
    )
    run.metrics_log.log(metrics, step)
    window.reset()


def stop_if_requested(run: Run, agreed: bool) -> None:
    """After the steps: when the processes agreed to stop before a step (`agreed`), or any was asked during the last
    step, the step completed is saved unless it is already (when the run saves checkpoints), and the run stops with
    `interruption_line` (`Interrupted`, or `Terminated` for SIGTERM). Otherwise nothing."""
    if not agreed:  # a request during the last step, after its reduction
        requests = on_device(float(run.stop.requested), run.accelerator.device, torch.float64)
        agreed = bool(run.accelerator.reduce(requests, reduction="sum").item())
    if not agreed:
        return
    run.bar.close()
    config, step = run.config, run.progress.completed_steps
    if config.checkpointing_steps and step and step not in dict(complete_checkpoints(config.output_dir)):
        run.watch.settle(run.accelerator, run.model, step, run.step_loss)
        count_tokens_seen(run)
        save_checkpoint(
            run.accelerator, config.output_dir, step, config.checkpoints_total_limit, keep=run.progress.best_step
        )
    raise run.stop.kind(interruption_line(config, step))


def finish_run(run: Run) -> TrainingResult:
    """After the last step: the loss and the weights checked finite (nothing evaluated of NaNs), the tokens seen
    counted, the last step's evaluation logged; with --load_best_model_at_end, an earlier evaluation's weights
    loaded when it was the best, and evaluated again. The final evaluation (of the weights the run ends with) printed
    with the task's summary of it; the run's `TrainingResult`."""
    step = run.progress.completed_steps
    run.watch.settle(run.accelerator, run.model, step, run.step_loss)
    count_tokens_seen(run)
    shown = run.evaluated is not None and run.evaluated[0] == step  # stopped early, at a step just evaluated
    if shown:
        final = run.evaluated[1]
    else:
        final = run.task.evaluate(run.model, run.eval_loader, run.accelerator)
        run.metrics_log.log(final, step)
    final = end_with_best(
        run.accelerator,
        run.config,
        run.progress,
        run.plan.max_train_steps,
        final,
        lambda: run.task.evaluate(run.model, run.eval_loader, run.accelerator),
        shown,
    )
    run.accelerator.print(f"final evaluation: {format_metrics(final)}")
    summary = run.task.summary(final)
    if summary:
        run.accelerator.print(summary)
    return TrainingResult(run.progress, final, run.plan.max_train_steps)
