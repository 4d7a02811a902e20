"""The learning-rate schedule (runs.optimization): every `--lr_scheduler_type` the commands offer builds, with
`--lr_scheduler_kwargs` as transformers' `lr_scheduler_kwargs`; warmup_stable_decay decays over the last fifth of the
steps unless told; several processes, which each step the prepared schedule, follow the schedule of one."""

from __future__ import annotations

import typing

import pytest
import torch

from sinusoidal_encoder_training.configs import TrainingConfig
from sinusoidal_encoder_training.configs.output import LR_SCHEDULERS
from sinusoidal_encoder_training.runs.optimization import build_schedule, describe_schedule

NEEDS = {"cosine_with_min_lr": '{"min_lr_rate": 0.1}'}  # the schedules that need arguments of their own


def config(name: str, arguments: str | None = None) -> TrainingConfig:
    return TrainingConfig(output_dir="unused", lr_scheduler_type=name, lr_scheduler_kwargs=arguments)


def rates(config: TrainingConfig, warmup: int, total: int, processes: int = 1) -> list[float]:
    """The learning rate of each of `total` optimizer steps, the schedule stepped once per process at each."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    schedule = build_schedule(config, optimizer, warmup, total, scale=processes)
    values = []
    for _ in range(total):
        values.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        for _ in range(processes):
            schedule.step()
    return values


@pytest.mark.parametrize("name", typing.get_args(LR_SCHEDULERS))
def test_every_offered_schedule_builds_and_warms_up_to_the_peak(name):
    values = rates(config(name, NEEDS.get(name)), warmup=2, total=20)
    assert max(values) == pytest.approx(1.0) and all(0.0 <= value <= 1.0 for value in values)
    if name != "constant":  # the one schedule without warmup
        assert values[0] < values[2] == pytest.approx(1.0)


def test_warmup_stable_decay_decays_over_the_last_fifth_of_the_steps_unless_told():
    default = rates(config("warmup_stable_decay"), warmup=2, total=20)
    assert default[2:16] == [1.0] * 14 and 0.0 < default[17] < default[16] == 1.0  # a decay of 4 steps: 20%
    told = rates(config("warmup_stable_decay", '{"num_decay_steps": 5, "decay_type": "linear"}'), warmup=2, total=20)
    assert told[2:16] == [1.0] * 14 and told[15:] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2])
    assert describe_schedule(config("warmup_stable_decay")) == (
        "warmup_stable_decay schedule (decay over the last fifth of the steps) after warmup"
    )


@pytest.mark.parametrize(
    ("name", "arguments"),
    [("warmup_stable_decay", '{"num_decay_steps": 5}'), ("inverse_sqrt", '{"timescale": 3}'), ("linear", None)],
)
def test_several_processes_follow_the_schedule_of_one(name, arguments):
    """A prepared schedule advances once per process at every optimizer step: its counts of steps (warmup, decay,
    timescale) are scaled alike."""
    one = rates(config(name, arguments), warmup=2, total=12)
    assert rates(config(name, arguments), warmup=2, total=12, processes=2) == pytest.approx(one)
