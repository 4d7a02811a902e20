"""The phases of the training loop, each called alone on a tiny masked-LM model and a small in-memory loader, in
this process: `start_run` (plan, header, resume), `step_windows` (epochs, a resumed epoch, a stream's end),
`optimizer_step` (accumulation over the global batch), `after_step` (logging, evaluation, checkpoints, a loss
that is not finite), `stop_if_requested` (the agreed stop) and `finish_run` (the final evaluation)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import re
import signal
import sys
import time

import pytest
import torch
from conftest import HostReads, random_ids, tiny_config

import sinusoidal_encoder as se
from sinusoidal_encoder_training.cli.command_line import Terminated, UsageError
from sinusoidal_encoder_training.configs import TrainingConfig
from sinusoidal_encoder_training.runs import loop, step_plan
from sinusoidal_encoder_training.runs.accelerator import make_accelerator
from sinusoidal_encoder_training.runs.checkpoints import TiedWeightsNotice, complete_checkpoints, save_checkpoint
from sinusoidal_encoder_training.runs.disk_space import space_needed
from sinusoidal_encoder_training.runs.metrics_log import read_metrics

ROWS, LENGTH = 2, 8  # a micro-batch: 2 rows of 8 tokens, every other one a label (8 loss units)


class TinyTask(loop.TrainingTask):
    """The masked-LM loss of a batch with its labels; an evaluation that counts its calls."""

    name = "tiny"

    def __init__(self) -> None:
        self.epochs: list[int] = []
        self.evaluations = 0

    def loss(self, model, batch, num_items_in_batch):
        return model(input_ids=batch["input_ids"], labels=batch["labels"], num_items_in_batch=num_items_in_batch).loss

    def loss_units(self, batch):
        return (batch["labels"] != -100).sum()

    def start_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)

    def evaluate(self, model, loader, accelerator):
        self.evaluations += 1
        return {"eval_loss": 1.5}

    def summary(self, metrics):
        return f"the tiny task's summary of {metrics['eval_loss']}"


class WholeStepsTask(TinyTask):
    """The tiny task trained in whole steps only, as pretraining is."""

    every_example = False


def examples(n_batches: int) -> list[dict[str, torch.Tensor]]:
    """The rows of `n_batches` micro-batches, in order: row i holds the ids of seed i."""
    rows = []
    for index in range(n_batches * ROWS):
        ids = random_ids(1, LENGTH, seed=index)[0]
        rows.append({"input_ids": ids, "labels": ids.masked_fill(torch.arange(LENGTH) % 2 == 1, -100)})
    return rows


def start(
    tmp_path, n_batches: int = 6, header=("Tiny header line",), task=TinyTask, **settings
) -> tuple[loop.Run, object]:
    """`start_run` of a tiny model (SGD) in `tmp_path/out` on `n_batches` micro-batches for a `task` of that class;
    `settings` go to the config. Returns the run and its prepared training loader."""
    values = dict(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=ROWS, max_train_steps=3, logging_steps=100
    )
    config = TrainingConfig(**{**values, **settings})
    accelerator = make_accelerator(config)
    model = se.SinusoidalEncoderForMaskedLM(tiny_config(num_hidden_layers=1))
    optimizer = torch.optim.SGD(model.parameters(), lr=config.learning_rate)
    train_loader = torch.utils.data.DataLoader(examples(n_batches), batch_size=ROWS)
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    run = loop.start_run(accelerator, config, model, optimizer, train_loader, [], task(), list(header))
    return run, train_loader


def steps(run: loop.Run, train_loader, count: int) -> None:
    """`count` optimizer steps with what follows each, as `train()` runs them."""
    windows = loop.step_windows(run, train_loader, streaming=False)
    for _ in range(count):
        started, batches = next(windows)
        loop.optimizer_step(run, batches)
        loop.after_step(run, started)


def test_start_run_plans_the_steps_from_the_epochs_and_prints_the_header(tmp_path, capsys):
    run, _ = start(tmp_path, n_batches=5, max_train_steps=None, num_train_epochs=2, gradient_accumulation_steps=2)
    run.bar.close()
    # 5 micro-batches hold 2 steps of 2 and one of 1: 6 steps in 2 epochs, 6% of them warming up (none)
    assert run.plan == step_plan.StepPlan(max_train_steps=6, epochs=2, warmup=0, steps_per_epoch=3)
    fresh = {"completed_steps": 0, "epoch": 0, "batches_in_epoch": 0, "tokens_seen": 0}
    best = {"best_step": None, "best_metric": None, "evaluations_without_improvement": 0}
    assert vars(run.progress) == {**fresh, **best}
    assert run.model.training and run.scheduler.get_last_lr() == [run.config.learning_rate]
    out = capsys.readouterr().out
    assert "***** Running training *****\n  Model = sinusoidal_encoder, " in out
    assert "\n  Tiny header line\n  Processes = 1, mixed precision = no\n" in out
    assert "gradient accumulation = 2, global batch = 4\n  Optimizer steps = 6 (2 epoch(s)), warmup = 0\n" in out
    assert read_metrics(run.config.output_dir) == []

    config = TrainingConfig(output_dir=".", max_train_steps=50, num_warmup_steps=7)
    for every_example in (True, False):
        planned = step_plan.plan_steps(config, range(3), False, every_example)
        assert planned == step_plan.StepPlan(max_train_steps=50, epochs=17, warmup=7, steps_per_epoch=3)
    # whole steps only (pretraining): 5 micro-batches hold 2 steps of 2
    whole = TrainingConfig(output_dir=".", num_train_epochs=2, gradient_accumulation_steps=2)
    assert step_plan.plan_steps(whole, range(5), False, False) == step_plan.StepPlan(4, 2, 0, steps_per_epoch=2)
    three_batches = torch.utils.data.DataLoader(range(6), batch_size=2)
    accumulating = TrainingConfig(output_dir=".", gradient_accumulation_steps=4, num_train_epochs=3)
    planned = step_plan.plan_steps(accumulating, three_batches, False, True)
    assert planned == step_plan.StepPlan(3, 3, 0, steps_per_epoch=1)  # a step an epoch
    refusal = (
        "One epoch of 6 training examples holds 3 batch(es) of --per_device_train_batch_size=32 per process, "
        "fewer than one step's --gradient_accumulation_steps=4: lower the batch size."
    )
    with pytest.raises(UsageError, match=f"^{re.escape(refusal)}$"):
        step_plan.plan_steps(accumulating, three_batches, False, False)


def test_start_run_resumes_the_newest_checkpoint_and_drops_the_lines_logged_after_it(tmp_path, capsys):
    run, train_loader = start(tmp_path, max_train_steps=4, logging_steps=1, checkpointing_steps=2)
    steps(run, train_loader, 2)
    saved = {name: value.clone() for name, value in run.accelerator.unwrap_model(run.model).state_dict().items()}
    steps(run, train_loader, 1)
    run.bar.close()
    assert [m["step"] for m in read_metrics(run.config.output_dir)] == [1, 2, 3]

    resumed, _ = start(tmp_path, max_train_steps=4, logging_steps=1, resume_from_checkpoint="latest")
    resumed.bar.close()
    assert f"Resuming from {tmp_path / 'out' / 'checkpoints' / 'step_2'}\n" in capsys.readouterr().out
    where = {"completed_steps": 2, "epoch": 0, "batches_in_epoch": 2, "tokens_seen": 32}
    best = {"best_step": None, "best_metric": None, "evaluations_without_improvement": 0}
    assert vars(resumed.progress) == {**where, **best}
    assert [m["step"] for m in read_metrics(resumed.config.output_dir)] == [1, 2]
    weights = resumed.accelerator.unwrap_model(resumed.model).state_dict()
    assert all(torch.equal(weights[name], value) for name, value in saved.items())
    assert resumed.scheduler.get_last_lr() == pytest.approx([resumed.config.learning_rate / 2])  # 2 of 4 steps


@pytest.mark.parametrize("task", [TinyTask, WholeStepsTask])
def test_step_windows_walk_the_epochs_from_where_the_run_stands(tmp_path, capsys, task):
    run, train_loader = start(tmp_path, n_batches=5, max_train_steps=5, gradient_accumulation_steps=2, task=task)
    run.bar.close()
    first_ids = [batch["input_ids"][0, 0].item() for batch in train_loader]  # the 5 micro-batches, in order
    drawn = []
    for _, batches in loop.step_windows(run, train_loader, streaming=False):
        drawn.append([batch["input_ids"][0, 0].item() for batch in batches])
        run.progress.completed_steps += 1  # what optimizer_step counts
        run.progress.batches_in_epoch += len(batches)
    if task.every_example:  # 3 steps an epoch, the fifth micro-batch a step of its own: 5 steps in 2 epochs
        epoch = [first_ids[:2], first_ids[2:4], first_ids[4:]]
        assert drawn == epoch + epoch[:2]
        assert run.task.epochs == [0, 1] and run.progress.epoch == 1
    else:  # 2 steps an epoch (the fifth micro-batch is no step), 5 steps: 3 epochs, each started with the task
        assert drawn == [first_ids[:2], first_ids[2:4]] * 2 + [first_ids[:2]]
        assert run.task.epochs == [0, 1, 2] and run.progress.epoch == 2

    run.progress.completed_steps, run.progress.epoch, run.progress.batches_in_epoch = 1, 0, 2  # a resumed run
    started, batches = next(loop.step_windows(run, train_loader, streaming=False))
    assert [batch["input_ids"][0, 0].item() for batch in batches] == first_ids[2:4]
    assert started <= time.perf_counter()

    run.progress.completed_steps, run.progress.batches_in_epoch = 0, 0  # a stream of 2 or 3 steps, set for 5
    assert len(list(loop.step_windows(run, train_loader, streaming=True))) == (3 if task.every_example else 2)
    assert "The stream ended after 0 steps, before --max_train_steps." in capsys.readouterr().out


def test_optimizer_step_is_one_step_of_the_mean_over_every_micro_batch(tmp_path):
    run, train_loader = start(tmp_path, max_train_steps=4, gradient_accumulation_steps=2, max_grad_norm=0.0)
    model = run.accelerator.unwrap_model(run.model)
    reference = copy.deepcopy(model)
    _, batches = next(loop.step_windows(run, train_loader, streaming=False))
    loop.optimizer_step(run, batches)

    units = sum(int((batch["labels"] != -100).sum()) for batch in batches)  # the step's 16 units
    loss = sum(reference(**batch, num_items_in_batch=units).loss for batch in batches)
    loss.backward()
    for parameter, before in zip(model.parameters(), reference.parameters(), strict=True):
        assert parameter.grad is None or not parameter.grad.any()  # zeroed after the step
        expected = before.detach() - run.config.learning_rate * before.grad  # SGD's one step, at the full rate
        torch.testing.assert_close(parameter.detach(), expected)
    assert run.scheduler.get_last_lr() == pytest.approx([run.config.learning_rate * 3 / 4])  # one of 4 steps done
    assert (run.progress.completed_steps, run.progress.batches_in_epoch, run.bar.n) == (1, 2, 1)
    assert run.step_loss.item() == pytest.approx(loss.item())
    assert run.window.loss.item() == pytest.approx(loss.item() * units)  # summed over the units
    assert (run.window.units.item(), run.window.tokens.item(), run.pending_tokens.item()) == (units, 32, 32)
    assert run.progress.tokens_seen == 0  # the device is read at a logging, evaluation or checkpoint step only
    run.bar.close()


def test_an_epochs_last_window_of_fewer_micro_batches_is_one_step_of_their_mean(tmp_path):
    """3 micro-batches an epoch, 2 a step: the epoch's third is a step of its own, of the mean over its units alone,
    and the next epoch's first step is again of 2 (accelerate's count of micro-batches is set to each window)."""
    run, train_loader = start(
        tmp_path, n_batches=3, max_train_steps=3, gradient_accumulation_steps=2, max_grad_norm=0.0
    )
    model = run.accelerator.unwrap_model(run.model)
    windows = loop.step_windows(run, train_loader, streaming=False)
    for expected in [2, 1, 2]:  # the two windows of epoch 0, the first of epoch 1
        _, batches = next(windows)
        assert len(batches) == expected
        reference = copy.deepcopy(model)
        reference.zero_grad()
        units = sum(int((batch["labels"] != -100).sum()) for batch in batches)
        sum(reference(**batch, num_items_in_batch=units).loss for batch in batches).backward()
        rate = run.scheduler.get_last_lr()[0]
        loop.optimizer_step(run, batches)
        for parameter, before in zip(model.parameters(), reference.parameters(), strict=True):
            assert parameter.grad is None or not parameter.grad.any()  # the step was taken: gradients zeroed
            torch.testing.assert_close(parameter.detach(), before.detach() - rate * before.grad)
    assert (run.progress.completed_steps, run.progress.epoch, run.progress.batches_in_epoch) == (3, 1, 2)
    assert run.scheduler.get_last_lr() == pytest.approx([0.0])  # 3 of 3 steps
    run.bar.close()


def test_steps_between_logging_steps_never_wait_for_the_device(tmp_path, monkeypatch):
    """The loop's own work in a step (the step's reduction of its units, tokens, stop requests and loss; the loss
    kept for its finiteness check; accumulation, clipping, the optimizer and the scheduler) neither reads the device
    nor copies host values to it, so that on a GPU the host queues the next step while the device runs this one; a
    logging step reads what it logs. The model's forward and backward passes are left out (tests/model counts
    theirs)."""
    run, train_loader = start(
        tmp_path, n_batches=12, max_train_steps=6, logging_steps=3, gradient_accumulation_steps=2
    )
    watch = HostReads()

    def unwatched(function):
        def call(*args, **kwargs):
            watch.paused = True
            try:
                return function(*args, **kwargs)
            finally:
                watch.paused = False

        return call

    monkeypatch.setattr(run.task, "loss", unwatched(run.task.loss))
    monkeypatch.setattr(run.accelerator, "backward", unwatched(run.accelerator.backward))
    windows = loop.step_windows(run, train_loader, streaming=False)
    reads = []
    for _ in range(6):
        started, batches = next(windows)
        with watch:
            loop.optimizer_step(run, batches)
            loop.after_step(run, started)
        reads.append(watch.reads)
        watch.reads = []
    run.bar.close()
    assert run.config.max_grad_norm > 0  # clipping among the step's work
    assert [len(step) for step in reads][:2] == [0, 0] and reads[3:5] == [[], []], reads
    assert reads[2] and reads[5], reads  # logging steps: the loss, tokens and the finiteness check read


def every_task_and_a_batch():
    """One task of each kind the loop trains, a training batch of its shape (2 rows of 5 tokens, the second one
    padded after 3 where the task's collator pads), and the batch's loss units and real tokens."""
    from sinusoidal_encoder_training.stages.pretraining import MaskedLMTask
    from sinusoidal_encoder_training.tasks.classification.recipe import ClassificationTask
    from sinusoidal_encoder_training.tasks.multiple_choice.recipe import MultipleChoiceTask
    from sinusoidal_encoder_training.tasks.question_answering.recipe import QuestionAnsweringTask
    from sinusoidal_encoder_training.tasks.span_classification.recipe import SpanClassificationTask

    ids, mask = random_ids(2, 5), torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    tagged = torch.full((2, 5), -100).index_fill(1, torch.tensor([1, 2]), 1)  # 2 labelled tokens a row
    padded = {"input_ids": ids, "attention_mask": mask}
    generator = torch.Generator()
    yield MaskedLMTask(generator, None, 0, None), {"input_ids": ids, "labels": tagged}, 4, 10  # whole blocks
    for problem, labels, units in [
        ("single_label_classification", torch.tensor([0, 2]), 2),
        ("multi_label_classification", torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]), 6),
        ("regression", torch.tensor([0.5, -1.0]), 2),
        ("token_classification", tagged, 4),
    ]:
        yield ClassificationTask(0, problem, None, generator), {**padded, "labels": labels}, units, 8
    choices = {key: value[:, None].expand(2, 4, 5) for key, value in padded.items()}  # (B, 4 choices, T)
    yield MultipleChoiceTask(0, generator), {**choices, "labels": torch.tensor([3, 0])}, 2, 32
    positions = {"start_positions": torch.tensor([1, 0]), "end_positions": torch.tensor([2, 0])}
    yield QuestionAnsweringTask(0, generator, None, None), {**padded, **positions}, 2, 8
    yield SpanClassificationTask(0, generator), {**padded, "labels": tagged}, 4, 8


def test_every_tasks_units_and_tokens_are_counted_on_the_device():
    """What the loop asks of a task at every micro-batch, its loss units and real tokens, is computed where the
    batch is, never built from host values (on a GPU, a copy that waits for the device): for every task the loop
    trains."""
    for task, batch, units, tokens in every_task_and_a_batch():
        with HostReads() as watch:
            counted = task.loss_units(batch), task.tokens(batch)
        assert watch.reads == [], (type(task).__name__, watch.reads)
        assert [int(count) for count in counted] == [units, tokens] and counted[0].dim() == counted[1].dim() == 0


def test_after_step_logs_evaluates_and_saves_on_their_steps(tmp_path, capsys):
    run, _ = start(tmp_path, max_train_steps=4, logging_steps=2, eval_steps=2, checkpointing_steps=3)
    run.bar.close()
    output_dir = run.config.output_dir

    def after(step: int, loss: float, units: float, tokens: float) -> None:
        run.progress.completed_steps = step
        run.window.loss += loss * units
        run.window.units += units
        run.window.tokens += tokens
        run.pending_tokens += tokens
        run.step_loss.fill_(loss)
        loop.after_step(run, time.perf_counter())

    after(1, 3.0, 4, 16)
    assert read_metrics(output_dir) == [] and run.progress.tokens_seen == 0 and run.task.evaluations == 0
    after(2, 1.0, 2, 8)  # a logging step: the mean over the window's 6 units, 24 tokens
    logged = read_metrics(output_dir)
    assert [m["step"] for m in logged] == [2, 2] and logged[1] == {
        "step": 2,
        "time": logged[1]["time"],
        "eval_loss": 1.5,
    }
    assert logged[0]["train_loss"] == pytest.approx((3.0 * 4 + 1.0 * 2) / 6)
    assert (logged[0]["tokens_seen"], logged[0]["epoch"]) == (24, 0) and logged[0]["tokens_per_second"] > 0
    assert logged[0]["learning_rate"] == run.scheduler.get_last_lr()[0]
    assert "step 2 evaluation: eval_loss 1.5000" in capsys.readouterr().out
    assert [run.window.loss.item(), run.window.units.item(), run.window.tokens.item(), run.window.seconds] == [0] * 4
    assert complete_checkpoints(output_dir) == []
    after(3, 2.0, 2, 8)  # a checkpoint step: saved with the tokens seen so far, not logged
    assert [step for step, _ in complete_checkpoints(output_dir)] == [3] and run.progress.tokens_seen == 32
    assert len(read_metrics(output_dir)) == 2
    after(4, 2.0, 2, 8)  # the last step: logged, not evaluated (the final evaluation is finish_run's)
    assert [m["step"] for m in read_metrics(output_dir)] == [2, 2, 4] and run.task.evaluations == 1


def test_epoch_evaluates_and_saves_after_every_epochs_last_step(tmp_path):
    """`--eval_steps epoch` and `--checkpointing_steps epoch`: 3 micro-batches in steps of 2 are 2 steps an epoch,
    so steps 2 and 4 end epochs (4, the last, is saved and left to the final evaluation); the disk check counts a
    checkpoint an epoch."""
    every = {"eval_steps": "epoch", "checkpointing_steps": "epoch"}
    run, train_loader = start(tmp_path, n_batches=3, max_train_steps=4, gradient_accumulation_steps=2, **every)
    assert run.plan.steps_per_epoch == 2
    steps(run, train_loader, 4)
    run.bar.close()
    assert [step for step, _ in complete_checkpoints(run.config.output_dir)] == [2, 4]
    assert [m["step"] for m in read_metrics(run.config.output_dir) if "eval_loss" in m] == [2]
    due = [run.plan.due(setting, step) for setting in ("epoch", 3, None) for step in (3, 6)]
    assert due == [False, True, True, True, False, False]
    two_steps = dataclasses.replace(run.config, checkpointing_steps=2)
    assert space_needed(run.config, 1000, 4, 2) == space_needed(two_steps, 1000, 4, 2)
    assert space_needed(run.config, 1000, 4, 2)[1].startswith("2 checkpoint(s)")
    kept = dataclasses.replace(run.config, checkpointing_steps=1, checkpoints_total_limit=1)
    assert space_needed(kept, 1000, 4, 2)[1].startswith("2 checkpoint(s)")  # one more while a new one is written
    best = dataclasses.replace(kept, load_best_model_at_end=True, eval_steps=1)
    assert space_needed(best, 1000, 4, 2)[1].startswith("3 checkpoint(s)")  # and the best


def test_a_checkpoint_of_tied_weights_warns_of_no_shared_tensor_but_of_others(tmp_path, caplog, monkeypatch):
    """accelerate warns at every save that it stored tensors sharing memory once ("Removed shared tensor {...}
    while saving. This should be OK, but check ..."): for the masked-LM's tied decoder, which loading ties again
    (a run resumes bitwise), the checkpoint says nothing; a shared tensor of another kind still warns."""
    from sinusoidal_encoder_training.runs import checkpoints

    run, _ = start(tmp_path)
    run.bar.close()
    with caplog.at_level(logging.WARNING):
        save_checkpoint(run.accelerator, run.config.output_dir, 1, None)
        assert "Removed shared tensor" not in caplog.text
        monkeypatch.setattr(checkpoints, "_tied_weights_quiet", lambda accelerator: contextlib.nullcontext())
        save_checkpoint(run.accelerator, run.config.output_dir, 2, None)  # what the filter keeps out
        assert "Removed shared tensor {'lm_head.decoder.weight'} while saving" in caplog.text

    notice = TiedWeightsNotice({"lm_head.decoder.weight"})

    def shown(text: str) -> bool:
        return notice.filter(logging.LogRecord("accelerate.utils.other", logging.WARNING, "", 0, text, None, None))

    assert not shown("[RANK 0] Removed shared tensor {'module.lm_head.decoder.weight'} while saving. This ...")
    assert shown("Removed shared tensor {'lm_head.decoder.weight', 'head.other.weight'} while saving. This ...")
    assert shown("another warning of the save")


def test_after_step_stops_on_a_loss_that_is_not_finite_before_logging_it(tmp_path):
    run, _ = start(tmp_path, max_train_steps=4, logging_steps=2)
    run.bar.close()
    run.progress.completed_steps = 2
    run.step_loss.fill_(math.nan)
    with pytest.raises(UsageError, match=r"The training loss is nan at step 2 \(no finite loss before it\)"):
        loop.after_step(run, time.perf_counter())
    assert read_metrics(run.config.output_dir) == []


def test_stop_if_requested_saves_the_step_and_stops_with_the_line_that_resumes(tmp_path, monkeypatch):
    run, train_loader = start(tmp_path, max_train_steps=4, checkpointing_steps=10)
    steps(run, train_loader, 2)
    loop.stop_if_requested(run, agreed=False)  # no process asked: nothing happens
    assert complete_checkpoints(run.config.output_dir) == []

    monkeypatch.setattr(sys, "argv", ["training/pretrain.py", "--output_dir", "out"])
    run.stop.signum = signal.SIGTERM  # what the first SIGTERM's handler records
    with pytest.raises(Terminated) as stopped:
        loop.stop_if_requested(run, agreed=False)
    newest = str(tmp_path / "out" / "checkpoints" / "step_2")
    expected = f"interrupted at step 2; the newest checkpoint is {newest}; resume with: python training/pretrain.py "
    assert stopped.value.args == (expected + "--output_dir out --resume_from_checkpoint latest",)
    assert [step for step, _ in complete_checkpoints(run.config.output_dir)] == [2] and run.progress.tokens_seen == 32
    with pytest.raises(Terminated):  # agreed by the processes at the next step: the step is saved already
        loop.stop_if_requested(run, agreed=True)
    assert [step for step, _ in complete_checkpoints(run.config.output_dir)] == [2]


def test_finish_run_evaluates_logs_and_returns_the_result(tmp_path, capsys):
    run, train_loader = start(tmp_path, max_train_steps=4)
    steps(run, train_loader, 1)
    run.bar.close()
    result = loop.finish_run(run)
    assert result == loop.TrainingResult(run.progress, {"eval_loss": 1.5}, 4)
    assert run.progress.tokens_seen == 16 and run.task.evaluations == 1  # one micro-batch
    assert [(m["step"], m.get("eval_loss")) for m in read_metrics(run.config.output_dir)] == [(1, 1.5)]
    out = capsys.readouterr().out
    assert "final evaluation: eval_loss 1.5000\nthe tiny task's summary of 1.5\n" in out

    with torch.no_grad():
        next(run.model.parameters())[0, 0] = math.inf
    with pytest.raises(UsageError, match=r"The weights hold 1 NaN or infinite value\(s\) at step 1"):
        loop.finish_run(run)  # nothing evaluated of them
    assert run.task.evaluations == 1


class ScriptedTask(TinyTask):
    """The tiny task whose evaluations report the accuracies of `ACCURACIES`, one call after another."""

    ACCURACIES = [0.5, 0.9, 0.7, 0.6, 0.9]

    def evaluate(self, model, loader, accelerator):
        self.evaluations += 1
        return {"eval_loss": 1.5, "eval_accuracy": self.ACCURACIES[self.evaluations - 1]}


BEST = {"eval_steps": 1, "checkpointing_steps": 1, "load_best_model_at_end": True, "metric_for_best_model": "accuracy"}


def saved_weights(checkpoint) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(f"{checkpoint}/model.safetensors")


def test_load_best_model_at_end_ends_with_the_weights_of_the_best_evaluation(tmp_path, capsys):
    """Evaluations at steps 1-3 and the last (4) score 0.5, 0.9, 0.7, 0.6: the run ends with step 2's weights,
    loaded from its checkpoint, which --checkpoints_total_limit 1 kept; the final evaluation is theirs, the progress
    where the run ended."""
    run, train_loader = start(tmp_path, max_train_steps=4, checkpoints_total_limit=1, task=ScriptedTask, **BEST)
    steps(run, train_loader, 4)
    run.bar.close()
    folder = run.config.output_dir
    assert [step for step, _ in complete_checkpoints(folder)] == [2, 4]  # the newest, and the best
    assert (run.progress.best_step, run.progress.best_metric) == (2, 0.9)
    best = saved_weights(dict(complete_checkpoints(folder))[2])
    model = run.accelerator.unwrap_model(run.model)
    assert not all(torch.equal(model.state_dict()[name], tensor) for name, tensor in best.items())
    result = loop.finish_run(run)
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in best.items())
    assert result.metrics == {"eval_loss": 1.5, "eval_accuracy": 0.9} and run.task.evaluations == 5
    assert (run.progress.completed_steps, run.progress.best_step, run.progress.tokens_seen) == (4, 2, 64)
    out = capsys.readouterr().out
    checkpoint = f"{folder}/checkpoints/step_2"
    assert (
        "step 4 evaluation: eval_loss 1.5000, eval_accuracy 0.6000\n"
        "best model by eval_accuracy: step 2's, 0.9000 (the last step's 0.6000); loading its weights from "
        f"{checkpoint}\n"
        "final evaluation: eval_loss 1.5000, eval_accuracy 0.9000\n"
    ) in out
    assert [m["eval_accuracy"] for m in read_metrics(folder) if "eval_accuracy" in m] == [0.5, 0.9, 0.7, 0.6]


def test_early_stopping_trains_no_further_once_the_patience_is_spent(tmp_path, capsys):
    """--early_stopping_patience 2: the evaluations of steps 3 and 4 (0.7, 0.6) do not improve on step 2's 0.9, so
    the run stops after step 4 of 6, whose evaluation is the last step's (not made again), and ends with step 2's
    weights; resumed from step 4's checkpoint, it takes no step (but for more patience); the card says so."""
    from sinusoidal_encoder_training.runs.best_model import describe_best

    settings = {"max_train_steps": 6, "task": ScriptedTask, "early_stopping_patience": 2, **BEST}
    run, train_loader = start(tmp_path, **settings)
    for started, batches in loop.step_windows(run, train_loader, streaming=False):
        loop.optimizer_step(run, batches)
        loop.after_step(run, started)
    run.bar.close()
    assert (run.progress.completed_steps, run.progress.evaluations_without_improvement) == (4, 2)
    result = loop.finish_run(run)
    assert run.task.evaluations == 5 and result.metrics["eval_accuracy"] == 0.9  # 4 evaluations, 1 of step 2's
    out = capsys.readouterr().out
    assert (
        "stopped early at step 4 of 6: 2 evaluations in a row without improving on the best eval_accuracy "
        "(--early_stopping_patience 2)\nbest model by "
    ) in out
    assert out.count("step 4 evaluation: eval_loss 1.5000, eval_accuracy 0.6000\n") == 1
    assert [m["step"] for m in read_metrics(run.config.output_dir) if "eval_accuracy" in m] == [1, 2, 3, 4]
    assert describe_best(run.config, run.progress, 6) == (
        " It stopped early, at step 4 of 6: 2 evaluations in a row had not improved on the best. The weights are "
        "step 2's, the best eval_accuracy (0.9000) of the evaluations every step."
    )
    resumed, train_loader = start(tmp_path, resume_from_checkpoint="latest", **settings)
    resumed.bar.close()
    assert resumed.progress.completed_steps == 4 and list(loop.step_windows(resumed, train_loader, False)) == []
    more, train_loader = start(tmp_path, resume_from_checkpoint="latest", **{**settings, "early_stopping_patience": 3})
    more.bar.close()
    assert next(loop.step_windows(more, train_loader, False))  # with more patience, it trains on


@pytest.mark.parametrize(
    ("threshold", "evaluations", "best", "without"),
    [(0.0, [0.8, 0.85], 0.85, 0), (0.1, [0.8, 0.85], 0.85, 1), (0.1, [0.8, 0.95], 0.95, 0), (0.0, [0.8, 0.8], 0.8, 1)],
)
def test_an_improvement_within_the_threshold_is_the_best_but_spends_patience(
    tmp_path, threshold, evaluations, best, without
):
    """As transformers' EarlyStoppingCallback: an evaluation that beats the best by --early_stopping_threshold or
    less still becomes the best (--load_best_model_at_end loads it) but counts as no improvement."""
    from sinusoidal_encoder_training.runs.best_model import see_evaluation

    config = TrainingConfig(
        output_dir=str(tmp_path), early_stopping_patience=3, early_stopping_threshold=threshold, **BEST
    )
    progress = loop.TrainingProgress()
    for step, value in enumerate(evaluations, 1):
        see_evaluation(config, progress, step, {"eval_accuracy": value})
    assert (progress.best_metric, progress.evaluations_without_improvement) == (best, without)


def test_the_best_evaluation_is_in_every_checkpoint_and_a_resumed_run_keeps_it(tmp_path):
    run, train_loader = start(tmp_path, max_train_steps=4, task=ScriptedTask, **BEST)
    steps(run, train_loader, 3)
    run.bar.close()
    resumed, _ = start(tmp_path, max_train_steps=4, task=ScriptedTask, resume_from_checkpoint="latest", **BEST)
    resumed.bar.close()
    assert (resumed.progress.completed_steps, resumed.progress.best_step, resumed.progress.best_metric) == (3, 2, 0.9)


@pytest.mark.parametrize(
    ("metric", "value", "best", "beats"),
    [
        ("eval_accuracy", 0.9, 0.8, True),
        ("eval_accuracy", 0.8, 0.8, False),  # a tie: the earlier stays
        ("eval_loss", 0.7, 0.8, True),
        ("eval_mse", 2.0, 1.0, False),
        ("perplexity", 3.0, 4.0, True),
        ("eval_f1", math.nan, 0.1, False),
        ("eval_f1", 0.1, math.nan, True),
        ("eval_f1", 0.1, None, True),
    ],
)
def test_which_value_beats_the_best_so_far(metric, value, best, beats):
    from sinusoidal_encoder_training.runs.best_model import better

    assert better(metric, value, best) is beats


@pytest.mark.parametrize(
    ("last", "line", "card"),
    [
        (
            0.95,
            "best model by eval_accuracy: the last step's, 0.9500 (step 2's 0.9000 before it)",
            " The weights are the last step's, the best eval_accuracy (0.9500) of the evaluations every step.",
        ),
        (
            0.6,
            "best model by eval_accuracy: step 2's, 0.9000, but its checkpoint {folder}/checkpoints/step_2 cannot be "
            "loaded (it is gone): the last step's weights stay (0.6000)",
            "",
        ),
        (math.nan, "best model by eval_accuracy: none, no evaluation's is a number: the last step's weights", ""),
    ],
)
def test_the_last_steps_weights_stay_when_they_are_the_best_or_the_best_is_gone(tmp_path, last, line, card):
    from sinusoidal_encoder_training.runs.best_model import choose_best, describe_best

    config = TrainingConfig(output_dir=str(tmp_path), max_train_steps=4, **BEST)
    progress = loop.TrainingProgress()
    progress.completed_steps = 4
    if not math.isnan(last):
        progress.best_step, progress.best_metric = 2, 0.9
    assert choose_best(config, progress, 4, {"eval_accuracy": last}) == (None, line.format(folder=tmp_path))
    assert describe_best(config, progress, 4) == card


def test_an_evaluation_without_the_figure_named_is_one_line_naming_those_it_has(tmp_path):
    """The configuration checks the figure against the task's declared ones; a model or task of the caller's
    (`finetune(model_init=...)`, a `TrainingTask` of one's own) is held to the same at its first evaluation."""
    from sinusoidal_encoder_training.runs.best_model import see_evaluation

    config = TrainingConfig(output_dir=str(tmp_path), **BEST)
    with pytest.raises(UsageError, match=r"^--metric_for_best_model 'accuracy': this run's evaluation reports loss, "):
        see_evaluation(config, loop.TrainingProgress(), 1, {"eval_loss": 1.5, "eval_f1": 0.5, "eval_count": 3})
