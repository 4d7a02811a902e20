"""benchmarks/gpu/run.py on the CPU (`--device cpu` runs the GPU benchmark's code): the FLOPs its batches need, the
targets' verdicts, a tiny run writing both files with every field, a failing cell recorded beside the others, the
time budget, a stop by SIGTERM, and the one-line errors. Mechanics only: no time is asserted."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks import batches
from benchmarks.gpu import run as gpu
from benchmarks.utilization import run as utilization

SHAPE = utilization.Shape(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=100, hidden_act="relu"
)
FIELDS = {"seconds", "seconds_range", "tokens_per_second", "mfu", "mfu_range", "first_call_seconds"}


def counted_flops(run) -> int:
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


@pytest.fixture
def cpu_sized(monkeypatch):
    """The GPU batches would take minutes on two CPU cores: 4 sequences a batch, a short peak; the same code."""
    monkeypatch.setattr(gpu, "TRAIN_BATCH", 4)
    monkeypatch.setattr(gpu, "INFERENCE_BATCH", 4)
    monkeypatch.setattr(gpu, "PEAK_SIZES", {"cpu": (128,)})
    monkeypatch.setattr(gpu, "PEAK_SECONDS", {"cpu": 0.01})


def run(tmp_path, *argv: str) -> tuple[dict, dict]:
    """`main` on the CPU with the tiny preset and two repetitions: (the record returned, the JSON written)."""
    output = tmp_path / "out"
    record = gpu.main(["--output", str(output), "--device", "cpu", "--sizes", "tiny", "--repeats", "2", *argv])
    assert sorted(os.listdir(output)) == [gpu.JSON_NAME, gpu.MARKDOWN_NAME]
    return record, json.loads((output / gpu.JSON_NAME).read_text())


def test_the_gpu_batches():
    train = gpu.inputs("train", SHAPE.vocab_size)
    assert train["input_ids"].shape == train["labels"].shape == (256, 128)
    masked = (train["labels"] != -100).float().mean().item()
    assert 0.12 < masked < 0.18
    dense = gpu.inputs("dense", SHAPE.vocab_size)
    assert list(dense) == ["input_ids"] and dense["input_ids"].shape == (128, 128)  # no mask: the dense path
    padded = gpu.inputs("padded", SHAPE.vocab_size)
    lengths = padded["attention_mask"].sum(1)
    assert padded["input_ids"].shape == (128, 256) and 40 <= lengths.min() <= lengths.max() <= 256
    assert 0.35 < 1 - lengths.sum().item() / (128 * 256) < 0.5  # about 40% padding
    assert (padded["input_ids"][padded["attention_mask"] == 0] == batches.PAD_ID).all()


def test_the_cpu_benchmarks_batches_are_unchanged():
    """The batch size is a new argument; the defaults are the CPU benchmarks' batches as they were."""
    assert batches.mlm_batch(100)[0].shape == (16, 128)
    assert batches.dense_batch(100)[0].shape == (32, 128)
    ids, mask = batches.padded_batch(100)
    assert ids.shape == (32, 256) and torch.equal(batches.padded_batch(100, batch=32)[0], ids)
    assert mask.sum().item() == 4379  # the lengths of seed 1, as before the argument existed


@pytest.mark.parametrize("path", ["dense", "padded"])
def test_inference_flops_are_the_encoders_matmuls_on_real_tokens(path):
    """Our encoder with eager attention on the whole GPU batch: on a CPU it runs the real tokens only, each sequence
    attending alone, so that the counter sees exactly what `job` charges (padding excluded)."""
    model = utilization.build_model("ours", path, SHAPE).eval()
    model.config._attn_implementation = "eager"
    inputs = gpu.inputs(path, SHAPE.vocab_size)
    with torch.no_grad():
        flops = counted_flops(lambda: model(**inputs))
    expected, tokens = gpu.job(path, SHAPE)
    assert flops == expected
    assert tokens == (128 * 128 if path == "dense" else int(inputs["attention_mask"].sum()))


def test_training_flops_are_three_forwards_with_the_head_at_masked_tokens():
    model = utilization.build_model("ours", "train", SHAPE)
    model.config._attn_implementation = "eager"
    inputs = gpu.inputs("train", SHAPE.vocab_size)
    flops = counted_flops(lambda: model(**inputs).loss.backward())
    assert (flops, gpu.TRAIN_BATCH * gpu.TRAIN_LENGTH) == gpu.job("train", SHAPE)


def cell(size, path, mode, ratio=None, mfu=None, **fields):
    """A made-up record of a cell: done with a ratio and our MFU, or with the status and fields given."""
    if ratio is None:
        return {"size": size, "path": path, "mode": mode, **fields}
    return {"size": size, "path": path, "mode": mode, "status": "done", "ratio": ratio, "ours": {"mfu": mfu}}


def test_verdicts_judge_the_eager_cells_and_show_a_better_compiled_one():
    cells = [
        cell("base", "train", "eager", ratio=1.35, mfu=0.38),
        cell("base", "train", "compiled", ratio=1.2, mfu=0.45),
        cell("base", "padded", "eager", ratio=1.49, mfu=0.2),
        cell("base", "padded", "compiled", status="failed", error="BackendCompilerFailed: triton"),
        cell("small", "padded", "eager", ratio=2.0, mfu=0.5),  # another size: judges nothing
    ]
    ratio, mfu, padded = gpu.verdicts(cells)
    assert (ratio["verdict"], ratio["value"], ratio["cell"]) == ("met", 1.35, "base / training step / eager")
    assert "compiled" not in ratio  # compiled is slower there
    assert (mfu["verdict"], mfu["value"]) == ("missed", 0.38)
    assert mfu["compiled"] == {"cell": "base / training step / compiled", "value": 0.45, "verdict": "met"}
    assert (padded["verdict"], padded["value"], padded["least"]) == ("missed", 1.49, 1.5)
    assert "compiled" not in padded  # failed: no figure


def test_verdicts_say_why_a_target_is_not_measured():
    cells = [
        cell("base", "train", "eager", status="failed", error="OutOfMemoryError: CUDA out of memory"),
        cell("base", "train", "compiled", ratio=1.4, mfu=0.39),
        cell("base", "padded", "eager", status="skipped", reason="time budget: 250 s of 240 s spent"),
    ]
    ratio, mfu, padded = gpu.verdicts(cells)
    assert ratio["verdict"] == mfu["verdict"] == "not measured" and ratio["value"] is None
    assert ratio["why"] == "the cell is failed: OutOfMemoryError: CUDA out of memory"
    assert ratio["compiled"]["verdict"] == "met" and mfu["compiled"]["verdict"] == "missed"  # reported beside
    assert padded["why"] == "the cell is skipped: time budget: 250 s of 240 s spent"
    assert gpu.verdicts([])[0]["why"] == "the cell is not in this run"
    lines = [gpu.format_verdict(entry) for entry in (ratio, mfu, padded)]
    assert lines[0].startswith("- training at base: ≥ 1.3× BERT's tokens/s: **not measured** (")
    assert "compiled: 1.40×, met (base / training step / compiled)" in lines[0]


def test_a_tiny_run_writes_both_files_with_every_field(tmp_path, cpu_sized):
    record, saved = run(tmp_path, "--modes", "eager")
    assert saved == json.loads(json.dumps(record))  # the files hold what the run returns
    assert saved["finished"] and saved["command"].startswith("python -m benchmarks.gpu.run --output ")
    for field in ("date", "commit", "torch", "transformers", "batches", "shapes", "compile_options"):
        assert saved[field], field
    assert saved["device"]["type"] == "cpu" and saved["cuda"] == torch.version.cuda
    assert saved["gemm_peak_flops"] > 0 and saved["shapes"]["tiny"]["num_hidden_layers"] == 2
    assert [(c["size"], c["path"], c["mode"]) for c in saved["cells"]] == [
        ("tiny", path, "eager") for path in ("train", "padded", "dense")
    ]
    shape = utilization.Shape(**saved["shapes"]["tiny"])
    for result in saved["cells"]:
        assert result["status"] == "done" and result["seconds_spent"] > 0 and "stage" not in result
        assert (result["flops"], result["tokens"]) == gpu.job(result["path"], shape)
        for which in gpu.MODELS:
            figures = result[which]
            assert set(figures) == FIELDS
            assert figures["mfu"] == pytest.approx(result["flops"] / figures["seconds"] / saved["gemm_peak_flops"])
            assert figures["tokens_per_second"] == pytest.approx(result["tokens"] / figures["seconds"])
            low, high = figures["mfu_range"]  # the slower and the faster repetition, the median between
            assert low <= figures["mfu"] <= high
            low, high = figures["seconds_range"]
            assert low <= figures["seconds"] <= high
        assert result["ratio"] == pytest.approx(result["bert"]["seconds"] / result["ours"]["seconds"])
    assert [entry["verdict"] for entry in saved["targets"]] == ["not measured"] * 3  # no base cells
    text = (tmp_path / "out" / gpu.MARKDOWN_NAME).read_text()
    assert text == gpu.markdown(saved)  # the report renders again from the JSON
    assert text.count("| tiny | ") == 3 and "## Targets" in text and "GFLOP/s" in text
    assert gpu.render(str(tmp_path / "out" / gpu.JSON_NAME), str(tmp_path / "again.md")) == text


def test_compiled_cells_go_through_torch_compile(tmp_path, cpu_sized, monkeypatch):
    """The compiled path with a backend that compiles nothing (inductor takes minutes on a CPU): dynamo traces each
    model, and the record names the options."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    monkeypatch.setattr(gpu, "COMPILE_OPTIONS", {"dynamic": False, "backend": counter})
    _, saved = run(tmp_path, "--paths", "dense", "--modes", "compiled")
    assert saved["cells"][0]["status"] == "done" and counter.frame_count >= 2  # ours and BERT
    assert saved["compile_options"]["dynamic"] is False and "CompileCounter" in saved["compile_options"]["backend"]


def test_a_failing_cell_is_recorded_and_the_others_run(tmp_path, cpu_sized, monkeypatch):
    workload = gpu.workload

    def failing(which, path, *args):
        if path == "train" and which == "bert":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.\nGPU 0 | has ...")
        return workload(which, path, *args)

    monkeypatch.setattr(gpu, "workload", failing)
    _, saved = run(tmp_path, "--paths", "train", "dense", "--modes", "eager")
    train, dense = saved["cells"]
    assert (train["status"], train["stage"]) == ("failed", "building BERT") and "ours" not in train
    assert train["error"] == "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 | has ..."
    assert dense["status"] == "done" and dense["ratio"] > 0 and saved["finished"]
    text = (tmp_path / "out" / gpu.MARKDOWN_NAME).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| tiny | training step"))
    assert "failed while building BERT: OutOfMemoryError" in row and "GPU 0 \\| has" in row
    assert row.count(" | ") == 10  # 11 columns: the pipe of the message escaped


def test_a_run_without_a_peak_keeps_its_times_and_ratios(tmp_path, cpu_sized, monkeypatch):
    def no_peak(*args):
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED")

    monkeypatch.setattr(gpu, "gemm_peak", no_peak)
    _, saved = run(tmp_path, "--paths", "dense", "--modes", "eager")
    assert saved["gemm_peak_flops"] is None and saved["gemm_peak_error"] == "RuntimeError: CUBLAS_STATUS_NOT_SUPPORTED"
    (dense,) = saved["cells"]
    assert dense["status"] == "done" and dense["ratio"] > 0 and dense["ours"]["mfu"] is None
    text = (tmp_path / "out" / gpu.MARKDOWN_NAME).read_text()
    assert "not measured (RuntimeError: CUBLAS_STATUS_NOT_SUPPORTED)" in text and "| tiny | dense inference" in text


def test_the_time_budget_skips_the_cells_that_would_not_fit(tmp_path, cpu_sized, monkeypatch):
    monkeypatch.setattr(gpu, "expected_seconds", lambda path, mode, shape: 0.0 if mode == "eager" else 1e6)
    _, saved = run(tmp_path, "--paths", "dense", "--modes", "compiled", "eager", "--time_budget", "600")
    eager, compiled = saved["cells"]  # eager first, whatever the order of the arguments
    assert (eager["mode"], eager["status"]) == ("eager", "done")
    assert compiled["status"] == "skipped" and compiled["reason"].startswith("time budget: ")
    assert "expected to take about 1000000 s" in compiled["reason"]

    _, saved = run(tmp_path, "--time_budget", "0")  # nothing fits: every cell recorded as skipped, nothing run
    assert len(saved["cells"]) == 6 and {c["status"] for c in saved["cells"]} == {"skipped"} and saved["finished"]


def test_expected_seconds_grow_with_compilation_and_layers():
    base, small = gpu.main_job_shape("base"), gpu.main_job_shape("small")
    assert gpu.expected_seconds("train", "eager", base) < gpu.expected_seconds("padded", "compiled", small)
    assert gpu.expected_seconds("padded", "compiled", base) < gpu.expected_seconds("train", "compiled", base)
    assert gpu.expected_seconds("train", "compiled", small) < gpu.expected_seconds("train", "compiled", base)


def test_sigterm_records_the_cell_it_stops_and_keeps_the_files(tmp_path, cpu_sized, monkeypatch):
    def stopped(*args):
        os.kill(os.getpid(), signal.SIGTERM)  # as `timeout` stops a run
        raise AssertionError("SIGTERM did not stop the cell")

    monkeypatch.setattr(gpu, "workload", stopped)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stop:
        run(tmp_path, "--paths", "padded", "dense", "--modes", "eager")
    assert stop.value.code == 143 and signal.getsignal(signal.SIGTERM) == before
    saved = json.loads((tmp_path / "out" / gpu.JSON_NAME).read_text())
    assert not saved["finished"]
    padded, dense = saved["cells"]
    assert (padded["status"], padded["stage"], padded["reason"]) == ("stopped", "building ours", "SIGTERM")
    assert (dense["status"], dense["reason"]) == ("skipped", "the run was stopped (SIGTERM) before it started")
    text = (tmp_path / "out" / gpu.MARKDOWN_NAME).read_text()
    assert "did not finish" in text and "| stopped while building ours: SIGTERM |" in text


def test_statuses_without_figures_render_as_one_row():
    for status in ("pending", "running", "skipped", "stopped", "failed"):
        row = gpu.format_row(cell("base", "dense", "eager", status=status, reason="why"))
        assert row.count(" | ") == 10 and "\n" not in row, status
    killed = cell("base", "train", "compiled", status="running", stage="compiling BERT")  # a run killed (SIGKILL)
    assert "| the run was killed while compiling BERT |" in gpu.format_row(killed)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repeats", "0"], "--repeats must be at least 1, got 0."),
        (["--sizes", "base", "huge"], "--sizes: 'huge' is not a preset; choose from tiny, small, base."),
        (["--time_budget", "-1"], "--time_budget must be at least 0 seconds"),
        (["--paths", "sparse"], "argument --paths: invalid choice: 'sparse'"),
        (["--device", "cuda"], "no CUDA GPU visible to torch"),
    ],
)
def test_bad_input_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    output = tmp_path / "out"
    with pytest.raises(SystemExit) as error:
        gpu.main(["--output", str(output), "--device", "cpu", *argv])
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert error.value.code == 2 and len(errors) == 1 and message in errors[0]
    assert not output.exists()


def test_an_output_that_is_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "taken").write_text("")
    with pytest.raises(SystemExit) as error:
        gpu.main(["--output", str(tmp_path / "taken"), "--device", "cpu"])
    assert error.value.code == 2 and "is a file, not a folder." in capsys.readouterr().err
