"""Under `accelerate launch` every process runs the command: a refusal every process of a machine raises alike (bad
flags, bad data the main process found and passed on: `UsageError.shared`) is shown once, by the machine's first
process (`LOCAL_RANK` 0); any other refusal by the process that raised it. The other processes wait for the
launcher to end them, so that the first one has written its line first. Two real processes:
tests/training/stages/test_pretraining.py (`test_bad_input_under_two_processes_...`)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import TWO_PROCESSES, env

from sinusoidal_encoder_training.cli import command_line, console
from sinusoidal_encoder_training.cli.command_line import UsageError, front
from sinusoidal_encoder_training.cli.commands import COMMANDS


@pytest.fixture(autouse=True)
def no_wait(monkeypatch):
    """Another process's wait for the launcher, recorded rather than waited (`leave_it_to_the_first`)."""
    waits = []
    monkeypatch.setattr(command_line.time, "sleep", waits.append)
    return waits


@pytest.mark.parametrize("local_rank", [None, "0", "1"])
@pytest.mark.parametrize("shared", [True, False])
def test_a_shared_refusal_is_shown_by_the_machines_first_process_any_other_by_its_own(
    shared, local_rank, monkeypatch, capsys, no_wait
):
    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    monkeypatch.delenv("SINUSOIDAL_ENCODER_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["pretrain.py"])
    with pytest.raises(SystemExit) as stopped:
        with front():
            raise UsageError("--thing is bad: pass another.", shared=shared)
    assert stopped.value.code == 2
    silent = shared and local_rank == "1"
    assert capsys.readouterr().err == ("" if silent else "pretrain.py: error: --thing is bad: pass another.\n")
    assert no_wait == ([command_line.SHARED_ERROR_WAIT_S] if silent else [])


@pytest.mark.parametrize("argv", [["--output_dir", "o", "--learning_rate", "-1"], ["--output_dir", "o", "--nope"]])
@pytest.mark.parametrize("local_rank", ["0", "1"])
def test_every_process_parses_the_same_flags_so_the_first_one_shows_a_refusal(
    argv, local_rank, monkeypatch, capsys, no_wait
):
    from sinusoidal_encoder_training.cli import console

    monkeypatch.setenv("LOCAL_RANK", local_rank)
    monkeypatch.delenv("SINUSOIDAL_ENCODER_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["pretrain.py", *argv])
    with pytest.raises(SystemExit) as stopped:
        console.pretrain()
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    if local_rank == "1":
        assert err == "" and no_wait == [command_line.SHARED_ERROR_WAIT_S]
    else:
        assert err.strip().splitlines()[-1].startswith("pretrain.py: error: "), err


SLOW_FIRST = """
import os, sys, time
if os.environ["LOCAL_RANK"] == "0":
    time.sleep(3)  # the first process is the slower one: the other meets the bad flag first
sys.argv[0] = "pretrain.py"
from sinusoidal_encoder_training.cli import console
console.pretrain()
"""


@pytest.mark.slow
@pytest.mark.parametrize("bad", [["--learning_rate", "-1"], ["--nope"]])
def test_the_line_is_shown_when_the_first_process_is_the_slower_one(bad, tmp_path):
    """Two processes under `accelerate launch`, the first one 3 s behind: the second, meeting the bad flag first,
    waits to be ended rather than exiting, which had torchrun end the first before it wrote its line (none shown)."""
    script = tmp_path / "slow_first.py"
    script.write_text(SLOW_FIRST)
    command = [*TWO_PROCESSES, str(script), "--output_dir", str(tmp_path / "out"), *bad]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env(ACCELERATE_USE_CPU="1"))
    ours = [line for line in proc.stderr.splitlines() if line.startswith("pretrain.py: error:")]
    assert proc.returncode != 0 and len(ours) == 1, proc.stderr[-3000:]


LAUNCHED = {"pretrain", "finetune", "evaluate"}  # each process does its share; the others do the whole work


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_of_one_process_is_refused_under_a_launch_of_several(name, monkeypatch, capsys):
    """Under `accelerate launch --num_processes 2` a command of one process did its whole work twice: distillation
    ended in an OSError traceback (the second process's cache could not replace the first's), the others wrote the
    same files twice. It stops in one line before any work; training and evaluation run as several (here they go on
    to refuse the missing flags)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delenv("SINUSOIDAL_ENCODER_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", [f"{name}.py"])
    with pytest.raises(SystemExit) as stopped:
        console.command(name)([])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.splitlines()) == 1, err
    refusal = f"{name}.py: error: {name} runs as one process, and this launch started 2: run it without accelerate"
    assert err.startswith(refusal) == (name not in LAUNCHED), err
    assert COMMANDS[name].launched == (name in LAUNCHED)
