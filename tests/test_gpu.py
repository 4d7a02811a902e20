"""The paths that need CUDA: flash attention's variable-length kernel against sdpa, bf16 training and save/load,
`accelerate launch` with the shipped single-GPU, multi-GPU and FSDP configurations, and FSDP checkpoint + resume.

Run them with `bash scripts/test_gpu.sh` on a machine with a GPU (the multi-GPU and FSDP tests need two). Without
CUDA every test here skips, with the reason; the CPU suite covers the rest (the flash attention convention with a
stand-in kernel: tests/test_model.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, TINY, env, pretrain_cmd, random_ids, run, tiny_config, write_text_corpus
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM

import sinusoidal_encoder as se

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: run `bash scripts/test_gpu.sh` there"),
]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
two_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 CUDA GPUs, found {GPUS}")
ACCELERATE = str(Path(sys.executable).with_name("accelerate"))
CONFIGS = REPO / "training" / "accelerate_configs"


def padded_batch(batch: int = 4, length: int = 48):
    ids = random_ids(batch, length, seed=3)
    mask = torch.ones_like(ids)
    for row, keep in enumerate((length, length - 7, 11, 1)[:batch]):
        mask[row, keep:] = 0
    return ids, mask


def launch(config: Path, *flags: str) -> tuple[str, ...]:
    return (ACCELERATE, "launch", "--config_file", str(config), "--main_process_port", "0", *flags)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_text_corpus(tmp_path_factory.mktemp("corpus"), n_train=25, n_validation=6)


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def test_sdpa_on_cuda_equals_the_cpu():
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    ids, mask = padded_batch()
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).last_hidden_state
        got = model.cuda()(ids.cuda(), attention_mask=mask.cuda()).last_hidden_state.cpu()
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_flash_attention_varlen_equals_sdpa(tmp_path, dtype):
    pytest.importorskip("flash_attn", reason="flash-attn is not installed")
    se.SinusoidalEncoderForMaskedLM(tiny_config(hidden_size=64, num_attention_heads=4)).save_pretrained(tmp_path)
    ids, mask = padded_batch()
    outputs = {}
    for implementation in ("sdpa", "flash_attention_2"):
        model = AutoModelForMaskedLM.from_pretrained(tmp_path, dtype=dtype, attn_implementation=implementation)
        model = model.cuda().eval()
        assert model.config._attn_implementation == implementation
        with torch.no_grad():
            outputs[implementation] = model(ids.cuda(), attention_mask=mask.cuda()).logits.float().cpu()
    real = mask.bool()
    torch.testing.assert_close(outputs["flash_attention_2"][real], outputs["sdpa"][real], atol=2e-2, rtol=2e-2)


def test_bf16_weights_save_and_load_on_cuda(tmp_path):
    model = se.SinusoidalEncoderForMaskedLM(tiny_config()).to(device="cuda", dtype=torch.bfloat16).eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path, dtype=torch.bfloat16).cuda().eval()
    ids, mask = padded_batch()
    with torch.no_grad():
        a = model(ids.cuda(), attention_mask=mask.cuda()).logits
        b = loaded(ids.cuda(), attention_mask=mask.cuda()).logits
    assert loaded.dtype == torch.bfloat16 and torch.equal(a, b)


def test_bf16_training_with_the_single_gpu_config(tmp_path, corpus):
    out = tmp_path / "single"
    proc = run(
        pretrain_cmd(
            corpus,
            out,
            "--max_train_steps",
            "6",
            "--eval_steps",
            "3",
            launcher=launch(CONFIGS / "single_gpu_bf16.yaml"),
        )
    )
    assert "Processes = 1, mixed precision = bf16" in proc.stdout
    model = AutoModelForMaskedLM.from_pretrained(out)
    assert model.dtype == torch.float32  # float32 master weights, bf16 autocast
    assert all(torch.isfinite(p).all() for p in model.parameters())


@two_gpus
def test_ddp_with_the_multi_gpu_config(tmp_path, corpus):
    out = tmp_path / "ddp"
    proc = run(
        pretrain_cmd(
            corpus,
            out,
            "--max_train_steps",
            "4",
            launcher=launch(CONFIGS / "multi_gpu_ddp.yaml", "--num_processes", "2"),
        )
    )
    assert "Processes = 2, mixed precision = bf16" in proc.stdout
    _, info = AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


@two_gpus
def test_fsdp_trains_checkpoints_resumes_and_exports_the_unsharded_model(tmp_path, corpus):
    """FSDP2 with the shipped configuration (full shard, one unit per encoder layer, sharded checkpoints), in float32
    so that a resumed run can be compared with the uninterrupted one."""
    launcher = launch(CONFIGS / "fsdp.yaml", "--num_processes", "2", "--mixed_precision", "no")
    common = ("--max_train_steps", "6", "--checkpointing_steps", "3", "--config_overrides", TINY)
    full = tmp_path / "full"
    proc = run(pretrain_cmd(corpus, full, *common, launcher=launcher))
    assert "Processes = 2" in proc.stdout
    shards = list((full / "checkpoints" / "step_3").glob("pytorch_model_fsdp_0*"))
    assert shards, "the checkpoint is not sharded"
    resumed = tmp_path / "resumed"
    checkpoint = ("--resume_from_checkpoint", str(full / "checkpoints" / "step_3"))
    run(pretrain_cmd(corpus, resumed, *common, *checkpoint, launcher=launcher))
    a, b = weights(full), weights(resumed)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-6, rtol=1e-5, msg=name)
    # the exported folder is the plain model: it loads without FSDP, and its config's auto_map is ours
    model = AutoModelForMaskedLM.from_pretrained(full)
    assert type(model).__name__ == "SinusoidalEncoderForMaskedLM"
    assert not list(full.glob("_fsdp*.py"))
    # and equals the last sharded checkpoint, merged by accelerate
    merged = tmp_path / "merged"
    subprocess.run(
        [ACCELERATE, "merge-weights", str(full / "checkpoints" / "step_6" / "pytorch_model_fsdp_0"), str(merged)],
        check=True,
        env=env(),
        timeout=600,
    )
    last = load_file(str(next(merged.glob("*.safetensors"))))
    shared = set(last) & set(a)
    assert shared >= {name for name in a if not name.startswith("lm_head.decoder")}
    for name in shared:
        assert torch.equal(last[name], a[name]), name


def test_an_algorithmic_run_trains_on_cuda_and_resumes_after_a_kill(tmp_path, monkeypatch):
    """`benchmarks.algorithmic.run --device cuda`: the randomized arm (positions drawn on the GPU) killed after
    step 5 resumes from its step-4 checkpoint (the GPU's RNG state included) to the uninterrupted run's result, up
    to the GPU's nondeterministic kernels; its kept weights load without a GPU."""
    from test_algorithmic_benchmark import _tiny_settings, kill_then_resume

    from benchmarks.algorithmic import run

    settings = _tiny_settings("randomized")
    whole = run.train_run(settings, tmp_path / "whole", tmp_path / "ck-whole", device="cuda")
    resumed = kill_then_resume(settings, tmp_path, monkeypatch, device="cuda")
    assert resumed["device"] == torch.cuda.get_device_name(0)
    torch.testing.assert_close(
        [p["train_loss"] for p in resumed["curve"]], [p["train_loss"] for p in whole["curve"]], rtol=1e-4, atol=1e-5
    )
    for n, score in whole["lengths"].items():
        assert abs(resumed["lengths"][n]["accuracy"] - score["accuracy"]) <= 0.02, n
    kept = torch.load(tmp_path / "ck" / "reverse_string" / "randomized-seed0" / "model.pt", weights_only=False)
    assert all(tensor.device.type == "cpu" for tensor in kept["model"].values())
