"""benchmarks/utilization/run.py: the FLOPs it charges each job are the matrix-product FLOPs the models run (counted by
torch's FlopCounterMode), and a tiny run writes every cell. Mechanics only: no time is asserted."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks import machine, timing
from benchmarks.utilization import run as utilization

SHAPE = utilization.Shape(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=100, hidden_act="relu"
)


def counted_flops(run) -> int:
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


@pytest.mark.parametrize("lengths", [[16, 16], [5, 12, 9]])
def test_inference_flops_are_the_encoders_matmuls_on_real_tokens(lengths):
    """Each sequence alone through the encoder (eager attention, so that the counter sees its two products): the sum
    is what `useful_flops` charges, padding excluded."""
    model = utilization.build_model("ours", "dense", SHAPE).eval()
    model.config._attn_implementation = "eager"
    total = 0
    for length in lengths:
        ids = torch.randint(5, SHAPE.vocab_size, (1, length))
        with torch.no_grad():
            total += counted_flops(lambda ids=ids: model(input_ids=ids))
    assert total == utilization.useful_flops(SHAPE, lengths)


def test_training_flops_are_three_forwards_with_the_head_at_masked_tokens():
    model = utilization.build_model("ours", "train", SHAPE)
    model.config._attn_implementation = "eager"
    ids = torch.randint(5, SHAPE.vocab_size, (2, 16))
    labels = torch.full_like(ids, -100)
    labels[:, ::4] = ids[:, ::4]  # 8 masked tokens

    def step():
        model(input_ids=ids, labels=labels).loss.backward()

    expected = utilization.useful_flops(SHAPE, [16, 16], head_tokens=8, training=True)
    assert counted_flops(step) == expected


@pytest.mark.slow
def test_a_tiny_run_writes_every_cell(tmp_path, monkeypatch):
    monkeypatch.setattr(utilization, "gemm_peak", lambda dtype: 1e9 if dtype == torch.float32 else 2e9)
    # no warm-up calls before the two timed ones: nothing here is a measurement, and each untimed call of a worker
    # costs as much as a timed one
    series = timing.interleaved_series
    monkeypatch.setattr(timing, "interleaved_series", lambda commands, repeats, warmup: series(commands, repeats, 0))
    output = tmp_path / "utilization.md"
    # one cell: each costs two worker processes (ours and BERT), whose start is most of this test's time; a path or
    # a precision is only what the worker is handed (the training workload: the test below, in this process)
    argv = ["--size", "tiny", "--paths", "padded", "--precisions", "bf16", "--modes", "eager"]
    utilization.main([*argv, "--repeats", "2", "--output", str(output)])
    record = json.loads((tmp_path / "utilization.json").read_text())
    cells = {(cell["path"], cell["precision"], cell["mode"]): cell for cell in record["cells"]}
    assert set(cells) == {("padded", "bf16", "eager")}
    shape = utilization.Shape(**record["shape"])
    for (path, precision, _), cell in cells.items():
        assert cell["flops"] == utilization.job(path, shape)[0] > 0
        for which in ("ours", "bert"):
            figures = cell[which]
            assert figures["mfu"] == pytest.approx(
                cell["flops"] / figures["seconds"] / record["gemm_peak_flops"][precision]
            )
            low, high = figures["mfu_range"]  # the slower and the faster of the two repetitions, the median between
            assert low <= figures["mfu"] <= high
        assert cell["ratio"] == pytest.approx(cell["bert"]["seconds"] / cell["ours"]["seconds"])
        assert cell["target"] == utilization.TARGETS[path, precision]
    padded_tokens = int(utilization.inference_batch("padded", shape.vocab_size)["attention_mask"].sum())
    assert cells["padded", "bf16", "eager"]["tokens"] == padded_tokens < 32 * 256
    assert "| padded inference" in output.read_text() and record["cpu"]["flags"].keys() == set(machine.CPU_FLAGS)


@pytest.mark.parametrize("which", ["ours", "bert"])
def test_a_training_workload_is_a_whole_step_of_the_scripts_optimizer(which, monkeypatch):
    """What a worker of a training cell times, each call: forward (under bf16 autocast), backward, an AdamW step that
    moves every weight, gradients cleared."""
    built = []
    build = utilization.build_model

    def recorded(*args):
        built.append(build(*args))
        return built[-1]

    monkeypatch.setattr(utilization, "build_model", recorded)
    step = utilization.workload(which, "train", "bf16", "eager", SHAPE)
    model = built[0]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    step()
    assert model.training
    still = [name for name, p in model.named_parameters() if torch.equal(p, before[name])]
    assert still == [] and all(p.grad is None for p in model.parameters())


def test_bad_input_is_one_line_before_any_work(capsys):
    with pytest.raises(SystemExit):
        utilization.main(["--size", "huge"])
    assert "--size: 'huge' is not a preset" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        utilization.main(["--position_encoding", "rope"])
    assert "--position_encoding: 'rope' is not one; choose one of sinusoidal," in capsys.readouterr().err


@pytest.mark.parametrize("encoding", ["tupe", "rotary"])
def test_our_model_takes_the_position_encoding_asked_for_and_bert_stays_as_it_is(encoding):
    shape = utilization.main_job_shape("tiny")
    ours = utilization.build_model("ours", "train", shape, encoding)
    assert ours.config.position_encoding == encoding and ours.config.sparse_prediction
    bert = utilization.build_model("bert", "train", shape, encoding)
    assert sum(p.numel() for p in bert.parameters()) == sum(
        p.numel() for p in utilization.build_model("bert", "train", shape).parameters()
    )


@pytest.mark.slow
def test_profiles_time_the_compiled_kernels_by_name():
    from torch._inductor import config as inductor_config

    args = argparse.Namespace(paths=["dense"], precisions=["fp32"], modes=["compiled"], position_encoding="sinusoidal")
    text = utilization.profiles(args, utilization.main_job_shape("tiny"))
    ours = text.split("## dense inference (32 × 128), fp32, compiled, ours")[1].split("## ")[0]
    assert "cpp_fused" in ours and "mkldnn::_linear_pointwise" in ours, ours  # generated kernels; prepacked GEMMs
    assert "compiled, BERT" in text
    assert not inductor_config.freezing and not inductor_config.cpp.enable_kernel_profile  # nothing leaks out
    assert not torch.compiler.config.force_disable_caches
