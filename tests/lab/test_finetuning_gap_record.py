"""benchmarks/finetuning_gap/run.py: a finished fine-tuning run's eval_results.json becomes one line of the
fine-tuning-gap table, in the fields docs/tables.py reads."""

from __future__ import annotations

import json

import pytest

from benchmarks.finetuning_gap import run as finetuning_gap


def test_a_finished_run_is_appended_as_one_line(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    eval_results = {"eval_accuracy": 0.9, "eval_macro_f1": 0.8, "tfidf_logreg_accuracy": 0.93}
    (folder / "eval_results.json").write_text(json.dumps(eval_results))
    results = tmp_path / "results.jsonl"
    results.write_text('{"label": "an earlier line"}\n')
    argv = [str(folder), "--label", "lr 3e-4", "--model", "the main job", "--command", "bash scripts/finetune.sh"]
    finetuning_gap.main([*argv, "--results", str(results)])
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(lines) == 2 and lines[0] == {"label": "an earlier line"}
    assert lines[1]["label"] == "lr 3e-4" and lines[1]["model"] == "the main job"
    assert lines[1]["command"] == "bash scripts/finetune.sh" and lines[1]["eval_results"] == eval_results
    assert set(lines[1]) == {"label", "model", "command", "pretrained", "commit", "date", "eval_results"}


def test_a_folder_without_results_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="not a finished fine-tuning run"):
        finetuning_gap.main([str(tmp_path), "--label", "x", "--model", "y", "--command", "z"])
