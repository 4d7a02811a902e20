"""Under `accelerate launch` every process runs the command: a refusal every process of a machine raises alike (bad
flags, bad data the main process found and passed on: `UsageError.shared`) is shown once, by the machine's first
process (`LOCAL_RANK` 0); any other refusal by the process that raised it. Two real processes:
tests/training/stages/test_pretraining.py (`test_bad_input_under_two_processes_...`)."""

from __future__ import annotations

import sys

import pytest

from sinusoidal_encoder_training.cli.command_line import UsageError, front


@pytest.mark.parametrize("local_rank", [None, "0", "1"])
@pytest.mark.parametrize("shared", [True, False])
def test_a_shared_refusal_is_shown_by_the_machines_first_process_any_other_by_its_own(
    shared, local_rank, monkeypatch, capsys
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


@pytest.mark.parametrize("argv", [["--output_dir", "o", "--learning_rate", "-1"], ["--output_dir", "o", "--nope"]])
@pytest.mark.parametrize("local_rank", ["0", "1"])
def test_every_process_parses_the_same_flags_so_the_first_one_shows_a_refusal(argv, local_rank, monkeypatch, capsys):
    from sinusoidal_encoder_training.cli import console

    monkeypatch.setenv("LOCAL_RANK", local_rank)
    monkeypatch.delenv("SINUSOIDAL_ENCODER_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["pretrain.py", *argv])
    with pytest.raises(SystemExit) as stopped:
        console.pretrain()
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    if local_rank == "1":
        assert err == ""
    else:
        assert err.strip().splitlines()[-1].startswith("pretrain.py: error: "), err
