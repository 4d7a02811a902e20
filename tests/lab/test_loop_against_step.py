"""benchmarks/loop_against_step/run.py: a tiny run measures the bare step and the real pretraining loop and writes the
ratio and its verdict, with the first logging window (the warm-up) beside a steady one, eager or compiled; bad input
is one line. Mechanics only: no time is asserted."""

from __future__ import annotations

import json
import statistics
from itertools import pairwise
from pathlib import Path

import pytest
import torch

from benchmarks.loop_against_step import run as loop_against_step

TINY = ["--size", "tiny", "--config_overrides", "hidden_size=8,intermediate_size=16"]
SHORT = ["--batch_size", "8", "--length", "16", "--steps", "20", "--repeats", "2"]


def check_record(folder, result: dict) -> str:
    """The record as written, its figures consistent with each other (eager: the bare step timed before the loop
    and after it, its figure the median of both's groups); returns the report."""
    written = json.loads((folder / "loop-against-step.json").read_text())
    text = (folder / "loop-against-step.md").read_text()
    assert written == result and written["batch"] == [8, 16] and len(written["loop_windows"]) == 2
    if written["torch_compile"]:
        assert written["step_after_tokens_per_second"] is None and len(written["step_repeats"]) == 2
        assert written["step_tokens_per_second"] == statistics.median(written["step_repeats"])
    else:
        repeats = written["step_repeats"]
        assert len(repeats) == 4 and written["step_tokens_per_second"] == statistics.median(repeats)
        assert written["step_before_tokens_per_second"] == statistics.median(repeats[:2])
        assert written["step_after_tokens_per_second"] == statistics.median(repeats[2:])
        assert f"again after it ({written['step_after_tokens_per_second']:,.0f})" in text
    assert f"| the {written['task']} loop |" in text
    assert written["ratio"] == pytest.approx(written["loop_tokens_per_second"] / written["step_tokens_per_second"])
    assert written["target_met"] == (written["ratio"] >= written["target"])
    assert f"The loop keeps {written['ratio']:.2f} of the step's speed" in text
    seconds = written["loop_window_seconds"]
    assert len(seconds) == 2 and written["loop_first_window_seconds"] == seconds[0]
    assert written["loop_steady_window_seconds"] == seconds[1]
    assert min([*seconds, written["step_first_window_seconds"], written["step_steady_window_seconds"]]) > 0
    assert written["loop_seconds"] > sum(seconds)  # the whole run: data preparation and evaluation too
    assert "| | tokens/s | first 10 steps | 10 steady steps |" in text and "Warm-up (the first 10 steps" in text
    return text


@pytest.mark.slow
@pytest.mark.parametrize("task", ["pretraining", "finetuning"])
def test_a_tiny_run_writes_both_speeds_the_ratio_and_the_verdict(tmp_path, task):
    result = loop_against_step.main(["--task", task, *TINY, *SHORT, "--output_dir", str(tmp_path)])
    text = check_record(tmp_path, result)
    assert result["task"] == task and not result["torch_compile"] and result["loop_graphs"] is None
    assert ", eager (`python -m" in text and "graph(s)" not in text and "CUDA" not in text
    assert result["step_variants"] == [] and result["step_profile"] is None and "```" not in text
    assert result["step_over_batches"] is None and "batches in turn" not in text


@pytest.mark.slow
def test_step_variants_and_the_profile_show_where_the_steps_time_goes(tmp_path, monkeypatch):
    """`--step_variants` times the bare step again with each model setting (applied after `--config_overrides`,
    to the model that steps), `--step_batches` once more over that many batches drawn alike, and `--profile` adds
    the operators' table of the bare step to the report."""
    from sinusoidal_encoder_training.stages import pretraining

    built, drawn = [], []
    real_build, real_batches = pretraining.build_model, loop_against_step.classification_batches

    def build_model(config, tokenizer):
        built.append(config.config_overrides)
        return real_build(config, tokenizer)

    def classification_batches(*args):
        drawn.append(real_batches(*args))
        return drawn[-1]

    monkeypatch.setattr(pretraining, "build_model", build_model)
    monkeypatch.setattr(loop_against_step, "classification_batches", classification_batches)
    variants = ["unpad_inputs=False", "attention_probs_dropout_prob=0"]
    argv = ["--task", "finetuning", *TINY, *SHORT, "--output_dir", str(tmp_path), "--profile", "--step_batches", "3"]
    result = loop_against_step.main([*argv, "--step_variants", *variants])
    text = check_record(tmp_path, result)
    assert [len(batches) for batches in drawn] == [1, 1, 1, 3, 1]  # the step's, variants', 3 in turn, after the loop
    assert all(torch.equal(batches[0]["input_ids"], drawn[0][0]["input_ids"]) for batches in [*drawn[:3], drawn[4]])
    assert not any(torch.equal(a["input_ids"], b["input_ids"]) for a, b in pairwise(drawn[3]))
    over = result["step_over_batches"]
    assert result["step_batches"] == 3 and over["against_step"] == pytest.approx(
        over["tokens_per_second"] / result["step_tokens_per_second"]
    )
    assert f"| the bare step over 3 batches in turn | {over['tokens_per_second']:,.0f} (" in text
    assert [variant["overrides"] for variant in result["step_variants"]] == variants
    assert built[1:3] == [f"hidden_size=8,intermediate_size=16,{variant}" for variant in variants]  # after the step
    for variant in result["step_variants"]:
        assert variant["against_step"] == pytest.approx(
            variant["tokens_per_second"] / result["step_tokens_per_second"]
        )
        assert f"| the bare step with `{variant['overrides']}` | {variant['tokens_per_second']:,.0f} (" in text
    assert "aten::" in result["step_profile"] and "by their own time on the CPU" in text
    assert f"```\n{result['step_profile']}\n```" in text
    # the loop's main process over 20 more steps than the timed ones (which the windows leave out: check_record)
    host = result["loop_profile"]
    assert f"```\n{host}\n```" in text and "over 20 more steps (`--profile`, cProfile" in text
    header, *rows = host.splitlines()
    assert header.split() == ["ms/step", "own", "ms", "calls", "function"] and len(rows) == 30
    step = next(row for row in rows if row.endswith("(optimizer_step)"))
    assert "sinusoidal_encoder_training/runs/loop.py:" in step and float(step.split()[2]) == 1.0  # once a step
    repository = str(Path(loop_against_step.__file__).resolve().parents[2])
    assert repository not in host and "benchmarks/loop_against_step" not in host  # no machine path, no wrapper


def test_the_bare_fine_tuning_step_steps_on_the_loops_own_rows(tmp_path):
    """The bare step's classification batch is the first rows of the file the loop fine-tunes on, tokenised and
    truncated as fine-tuning tokenises them and padded per batch: both count the same real tokens a row."""
    from transformers import AutoTokenizer

    from sinusoidal_encoder_training import SHIPPED_TOKENIZER

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)
    path = loop_against_step.classification_file(str(tmp_path), 12)
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert rows[:8] == loop_against_step.classification_rows(8)  # the loop's first rows, whatever the file's length
    args = loop_against_step.parse(["--task", "finetuning", "--length", "24"])
    batch = loop_against_step.classification_batch(args, tokenizer, rows[:8])
    encoded = tokenizer([row["text"] for row in rows[:8]], truncation=True, max_length=24)["input_ids"]
    assert batch["input_ids"].shape == (8, max(map(len, encoded)))
    for ids, mask, expected in zip(batch["input_ids"], batch["attention_mask"], encoded, strict=True):
        assert ids[mask.bool()].tolist() == expected
    assert batch["tokens"] == sum(map(len, encoded)) and batch["items"].item() == 8
    assert batch["labels"].tolist() == [int(row["label"].removeprefix("label")) for row in rows[:8]]


@pytest.mark.slow
def test_padding_to_a_multiple_pads_the_loops_batches_and_the_bare_steps_alike(tmp_path, monkeypatch):
    """`--pad_to_multiple_of` (fine-tuning): every batch the loop steps on and the bare step's are padded to a
    multiple of it, and the report says so."""
    from sinusoidal_encoder_training.runs import loop

    widths = {"loop": set(), "step": set()}
    real_step, real_batches = loop.optimizer_step, loop_against_step.classification_batches

    def optimizer_step(run, batches):
        widths["loop"].update(batch["input_ids"].shape[1] for batch in batches)
        return real_step(run, batches)

    def classification_batches(*args):
        batches = real_batches(*args)
        widths["step"].update(batch["input_ids"].shape[1] for batch in batches)
        return batches

    monkeypatch.setattr(loop, "optimizer_step", optimizer_step)
    monkeypatch.setattr(loop_against_step, "classification_batches", classification_batches)
    argv = ["--task", "finetuning", *TINY, *SHORT, "--output_dir", str(tmp_path), "--pad_to_multiple_of", "12"]
    result = loop_against_step.main(argv)
    text = check_record(tmp_path, result)
    assert result["pad_to_multiple_of"] == 12 and "batches of 8 x 16 (padded to a multiple of 12)" in text
    assert widths["step"] and widths["loop"] and all(width % 12 == 0 for width in widths["step"] | widths["loop"])


def test_the_bare_fine_tuning_steps_one_batch_is_the_most_typical_of_the_loops(tmp_path):
    """One fixed batch: of the first `TYPICAL_OF` batches of the loop's rows, the one whose real tokens are nearest
    their mean; several in turn: the first ones, as they come."""
    from transformers import AutoTokenizer

    from sinusoidal_encoder_training import SHIPPED_TOKENIZER

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)
    args = loop_against_step.parse(["--task", "finetuning", "--batch_size", "4", "--length", "32"])
    rows = loop_against_step.classification_rows(4 * loop_against_step.TYPICAL_OF)
    every = [loop_against_step.classification_batch(args, tokenizer, rows[i : i + 4]) for i in range(0, len(rows), 4)]
    mean = sum(batch["tokens"] for batch in every) / len(every)
    (fixed,) = loop_against_step.classification_batches(args, tokenizer, 1)
    assert abs(fixed["tokens"] - mean) == min(abs(batch["tokens"] - mean) for batch in every)
    assert fixed["tokens"] != every[0]["tokens"]  # not merely the first, for these rows
    in_turn = loop_against_step.classification_batches(args, tokenizer, 3)
    assert [batch["tokens"] for batch in in_turn] == [batch["tokens"] for batch in every[:3]]


@pytest.fixture
def _fresh_compile_state():
    """accelerate keeps the compile plugin in its process-wide state, and a compiled loop sets dynamo's settings
    (`compilation.compile_once_per_mode`): both put back after the test, so that later in-process runs are eager."""
    import torch._dynamo.config
    import torch.fx.experimental._config
    from accelerate.state import AcceleratorState

    settings = (torch._dynamo.config.capture_dynamic_output_shape_ops, torch.fx.experimental._config.use_duck_shape)
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    torch._dynamo.reset()
    torch._dynamo.config.capture_dynamic_output_shape_ops, torch.fx.experimental._config.use_duck_shape = settings


@pytest.mark.slow
@pytest.mark.usefixtures("_fresh_compile_state")
def test_a_compiled_run_compiles_both_the_same_way_and_reports_the_warm_up(tmp_path):
    """`--torch_compile` compiles the bare step and the loop with the same backend, mode and dynamic shapes, each
    from nothing: the loop's graphs are counted, and the inductor caches are left as they were. The backend is
    dynamo's `eager` (the capture alone: inductor's C++ compilation would take minutes on a CPU, and
    tests/model/test_compile.py checks the loop under aot_eager)."""
    from accelerate import Accelerator
    from torch._dynamo.utils import counters

    caches = torch._inductor.config.force_disable_caches
    prepared = []
    real_prepare = Accelerator.prepare

    def prepare(self, *args, **kwargs):  # which plugin the bare step's Accelerator compiled with
        prepared.append(self.state.dynamo_plugin)
        return real_prepare(self, *args, **kwargs)

    argv = [*TINY, *SHORT, "--output_dir", str(tmp_path), "--torch_compile", "--torch_compile_backend", "eager"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Accelerator, "prepare", prepare)
        result = loop_against_step.main([*argv, "--torch_compile_mode", "reduce-overhead"])
    text = check_record(tmp_path, result)
    step_plugin = prepared[0]
    assert (step_plugin.backend.value.lower(), step_plugin.mode, step_plugin.dynamic) == (
        "eager",
        "reduce-overhead",
        True,
    )
    assert result["torch_compile"] and result["torch_compile_mode"] == "reduce-overhead"
    assert ", compiled (eager, mode reduce-overhead) (`python -m" in text
    # the loop's own graphs (training, evaluation with labels): one per mode, counted after the bare step's
    assert 1 <= result["loop_graphs"]["captured"] <= 3 and counters["stats"]["unique_graphs"] > 0
    assert f"the loop captured {result['loop_graphs']['captured']} graph(s), " in text and "CUDA graphs" in text
    assert torch._inductor.config.force_disable_caches == caches


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "10"], "--steps must be at least 20"),
        (["--batch_size", "0"], "--batch_size must be a positive"),
        (["--step_batches", "0"], "--step_batches must be a positive integer, got 0"),
        (["--torch_compile_mode", "reduce-overhead"], "--torch_compile_mode reduce-overhead needs --torch_compile"),
        (["--step_variants", "unpad=False"], "--step_variants 'unpad=False': the config has no field 'unpad'."),
        (["--config_overrides", "hidden_size"], "--config_overrides 'hidden_size': 'hidden_size' is not of the form"),
        (["--size", "tiny", "--step_variants", "num_attention_heads=3"], "must divide `hidden_size` (64)"),  # tiny's
        (["--config_overrides", "vocab_size=512"], "The model's vocabulary (512) is smaller than the tokenizer's"),
        (["--pad_to_multiple_of", "8"], "--pad_to_multiple_of is for --task finetuning"),
        (["--task", "finetuning", "--pad_to_multiple_of", "0"], "--pad_to_multiple_of must be a positive integer"),
    ],
)
def test_bad_input_is_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        loop_against_step.main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(lines) == 1 and message in lines[0], lines
