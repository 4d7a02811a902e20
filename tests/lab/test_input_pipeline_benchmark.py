"""benchmarks/input_pipeline/run.py: a tiny run writes every cell and a verdict on the target; bad input is one line.
Mechanics only: no time is asserted (the figures are in benchmarks/input_pipeline/input-pipeline.md)."""

from __future__ import annotations

import json

import pytest

from benchmarks.input_pipeline import run as input_pipeline


@pytest.mark.slow
def test_a_tiny_run_writes_every_cell_and_the_verdict(tmp_path, capsys):
    argv = ["--batches", "2", "--batch_size", "8", "--length", "16", "--repeats", "1", "--output_dir", str(tmp_path)]
    result = input_pipeline.main(argv)
    written = json.loads((tmp_path / "input-pipeline.json").read_text())
    assert written == result and written["batch"] == [8, 16] and written["device"] in ("cpu", "cuda")
    assert set(written["tokens_per_second"]) == {
        "masked-LM, the package's pipeline",
        "masked-LM, per row (before)",
        "fine-tuning, the package's pipeline",
        "fine-tuning, per row (before: DataCollatorWithPadding)",
    }
    assert all(speed > 0 for speed in written["tokens_per_second"].values())
    assert written["target_met"] == (written["tokens_per_second"]["masked-LM, the package's pipeline"] >= 5e6)
    text = (tmp_path / "input-pipeline.md").read_text()
    assert ("**met**" in text) == written["target_met"] and "| masked-LM, per row (before) |" in text


def test_bad_input_is_one_line(capsys):
    with pytest.raises(SystemExit) as stopped:
        input_pipeline.main(["--batches", "0"])
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("error: --batches must be a positive integer, got 0."), lines
