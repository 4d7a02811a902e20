"""benchmarks/loop_against_step.py: a tiny run measures the bare step and the real pretraining loop and writes the
ratio and its verdict; bad input is one line. Mechanics only: no time is asserted."""

from __future__ import annotations

import json

import pytest

from benchmarks import loop_against_step


@pytest.mark.slow
@pytest.mark.parametrize("task", ["pretraining", "finetuning"])
def test_a_tiny_run_writes_both_speeds_the_ratio_and_the_verdict(tmp_path, task):
    argv = ["--task", task, "--size", "tiny", "--config_overrides", "hidden_size=8,intermediate_size=16"]
    argv += ["--batch_size", "8", "--length", "16", "--steps", "20", "--repeats", "2", "--output_dir", str(tmp_path)]
    result = loop_against_step.main(argv)
    written = json.loads((tmp_path / "loop-against-step.json").read_text())
    assert written == result and written["batch"] == [8, 16] and len(written["loop_windows"]) == 2
    assert written["task"] == task and f"| the {task} loop |" in (tmp_path / "loop-against-step.md").read_text()
    assert written["ratio"] == pytest.approx(written["loop_tokens_per_second"] / written["step_tokens_per_second"])
    assert written["target_met"] == (written["ratio"] >= written["target"])
    text = (tmp_path / "loop-against-step.md").read_text()
    assert f"The loop keeps {written['ratio']:.2f} of the step's speed" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--steps", "10"], "--steps must be at least 20"), (["--batch_size", "0"], "--batch_size must be a positive")],
)
def test_bad_input_is_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        loop_against_step.main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(lines) == 1 and message in lines[0], lines
